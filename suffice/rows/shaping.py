"""Output rows: a result as ``suffice judge`` writes it, and the rows written without the engine."""

from __future__ import annotations

from typing import Any

from suffice.formats.verdicts import verdict_format
from suffice.gates.base import Gate
from suffice.results import ErrorInfo, JudgeResult

#: The error type of a record whose judging alone stopped the engine.
ENGINE_CRASH = "EngineCrashError"


def result_row(result: JudgeResult, gate: Gate, fmt: str, line: int) -> dict[str, Any]:
    """The output row of one result (``line``: the input position it answers), its verdict in format ``fmt``
    (:mod:`suffice.formats.verdicts`)."""
    # A row from the engine is as it always was; a cache hit's says when it was first judged.
    # A cascade's row says which detail its verdict is; other rows carry no such column.
    exclude = (
        {"raw_text"}
        | ({"cached"} if result.cached is None else set())
        | ({"cascade"} if result.cascade is None else set())
    )
    row = result.model_dump(mode="json", exclude=exclude)
    row["line"] = line
    if result.verdict is not None:
        row.update(verdict_format(fmt).fields(gate, result.verdict))
    return row


def error_result(rid: str | None, gate: Gate, model: str, backend: str, error: ErrorInfo) -> JudgeResult:
    """A result written without the engine (``model`` and ``backend``: the run's)."""
    return JudgeResult(
        id=rid, gate=gate.name, error=error, model=model, backend=backend, prompt_version=gate.prompt_version
    )


def crash_result(rid: str | None, gate: Gate, model: str, backend: str) -> JudgeResult:
    """The result of a record that stopped the engine when it was judged alone."""
    message = (
        "the engine died while it judged this record alone, after it had died with it in a batch: "
        "it is not judged again (--retry-errors tries it once more)"
    )
    return error_result(rid, gate, model, backend, ErrorInfo(type=ENGINE_CRASH, message=message))
