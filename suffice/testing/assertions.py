"""One record against one gate: assertions that fail with the verdict's own words.

Each helper takes a judge (any :class:`~suffice.config.JudgeProtocol`: a :class:`~suffice.Judge`, or a
:class:`~suffice.Client` of ``suffice serve``) and a record as ``suffice judge`` reads one (``question``,
``chunks``, and ``response`` for a gate that checks an answer; RAGAS names too; without an id, the one ``suffice
judge`` gives), judges it, and returns the :class:`~suffice.results.JudgeResult`; when the gate says no, it raises
:class:`AssertionError` naming what the verdict names: what is missing, which claim is unsupported, which rubric
dimension fell short.  A record the judge refuses as a record (a field missing or malformed, chunks too long for the
model) is an :class:`~suffice.exceptions.InputError` saying what to fix instead: the gate never answered.
``record_property`` (pytest's fixture of that name, or any ``(name, value)`` callable) receives the verdict, so a
JUnit XML report carries it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from suffice.config import JudgeProtocol
from suffice.exceptions import ConfigError, InputError
from suffice.gates import Gate
from suffice.gates.registry import DEFAULT_CHECK_GATE, DEFAULT_GATE
from suffice.records.fields import FieldMap
from suffice.results import JudgeResult

#: pytest shows a failure or an error from the test's line, not from inside these helpers.
__tracebackhide__ = True
#: What the helpers judge with: any judge of the one protocol (a Judge in process, a Client or AsyncClient
#: of ``suffice serve``, your own).
JudgeLike = JudgeProtocol
#: pytest's ``record_property``: one ``(name, value)`` for the JUnit XML report.
RecordProperty = Callable[[str, object], None]

#: The gates the named helpers judge with: the registry's defaults, and the adequacy gate (the one built-in gate no
#: default stands for; an outside gate is judged by :func:`assert_passes` with its name).
SUFFICIENCY = DEFAULT_GATE
RECOVERY = DEFAULT_CHECK_GATE
ADEQUACY = "adequacy"

#: A record as ``suffice judge`` reads one: RAGAS names mapped, and one without an id given ``row-<line>-<digest>``.
AS_JUDGED = FieldMap()


def _judge(judge: JudgeLike) -> JudgeProtocol:
    if not isinstance(judge, JudgeProtocol):
        raise ConfigError("judge", type(judge).__name__, "must be a judge: a suffice.Judge, Client or AsyncClient")
    return judge


def judge_records(
    judge: JudgeLike, records: Sequence[object], gate: str | None = None, options: Mapping[str, Any] | None = None
) -> list[JudgeResult]:
    """One result per record, in order (``gate``: default the judge's own); a record without an id gets the one
    ``suffice judge`` would give it at that line."""
    read = [AS_JUDGED.apply(record, line) for line, record in enumerate(records, start=1)]
    return _judge(judge).judge_batch(read, gate=gate, options=options)


def gate_of(judge: JudgeLike, gate: str | None, options: Mapping[str, Any] | None) -> Gate:
    """The gate that reads the verdicts (its decision rule and route), as the judge builds it."""
    return _judge(judge).gate_for(gate, options)


def _question(record: object) -> str:
    question = record.get("question", record.get("user_input")) if isinstance(record, Mapping) else None
    return repr(question) if isinstance(question, str) else "the record"


def _words(items: Sequence[str]) -> str:
    return "; ".join(str(item) for item in items)


def describe_failure(gate: Gate, result: JudgeResult) -> str:
    """Why ``result`` does not pass ``gate``, in the verdict's own words."""
    verdict = result.verdict
    if verdict is None:
        error = result.error
        return f"no verdict: {error.type}: {error.message}" if error is not None else "no verdict"
    fields = verdict.model_dump(mode="json")
    coverage = fields.get("coverage")
    uncovered = [name for name, covered in coverage.items() if not covered] if isinstance(coverage, dict) else []
    listed = {"missing": fields.get("missing_information"), "not covered": uncovered}
    listed |= {"unsupported claims": fields.get("unsupported_claims"), "contradictions": fields.get("contradictions")}
    parts = [f"{label}: {_words(items)}" for label, items in listed.items() if isinstance(items, list) and items]
    decision = fields.get("decision")
    if isinstance(decision, dict):
        for key in ("below_minimum", "failed_critical"):
            if decision.get(key):
                parts.append(key.replace("_", " ") + ": " + ", ".join(f"{k} {v:g}" for k, v in decision[key].items()))
        unmet = [f"{n} (critical)" for n in decision.get("failed_critical_criteria") or []]
        unmet += [str(n) for n in decision.get("unmet_criteria") or []]
        if unmet:
            parts.append("criteria not met: " + ", ".join(unmet))
        if decision.get("reason"):
            parts.append(f"decision: {decision['reason']}")
    shown = ("classification", "abstention_notice", "reasoning", "rationale")
    parts += [f"{key}: {fields[key]}" for key in shown if fields.get(key)]
    parts.append(f"route: {gate.route(verdict).route}")
    return "; ".join(parts)


def _record(record_property: RecordProperty | None, gate: Gate, result: JudgeResult, positive: bool | None) -> None:
    """The verdict as one JUnit XML property, ``suffice.<gate>``: a JSON object (id, passed, route, verdict)."""
    if record_property is None:
        return
    value: dict[str, Any] = {"id": result.id, "passed": positive}
    if result.verdict is not None:
        value["route"] = gate.route(result.verdict).route
        value["verdict"] = result.verdict.model_dump(mode="json")
    if result.error is not None:
        value["error"] = result.error.model_dump(mode="json")
    record_property(f"suffice.{gate.name}", json.dumps(value, ensure_ascii=False, sort_keys=True))


def _judged(
    judge: JudgeLike,
    record: object,
    gate: str | None,
    options: Mapping[str, Any] | None,
    record_property: RecordProperty | None,
) -> tuple[Gate, JudgeResult, bool | None]:
    reader = gate_of(judge, gate, options)
    result = judge_records(judge, [record], reader.name, options)[0]
    # What passes is what delivers: a verdict a person must see is not "sufficient", whatever its boolean says.
    positive = reader.route(result.verdict).route == "deliver" if result.verdict is not None else None
    _record(record_property, reader, result, positive)
    if result.error is not None and result.error.field is not None:
        raise InputError("record", f"suffice {reader.name} cannot judge {_question(record)}: {result.error.message}")
    return reader, result, positive


def _require_positive(
    judge: JudgeLike,
    record: object,
    gate: str | None,
    options: Mapping[str, Any] | None,
    record_property: RecordProperty | None,
    failed: str,
) -> JudgeResult:
    """The result of ``record``, or an AssertionError unless its decision is positive: ``suffice <gate>: <failed,
    ``{}`` the question>: <what the verdict says>``."""
    reader, result, positive = _judged(judge, record, gate, options, record_property)
    if not positive:
        raise AssertionError(
            f"suffice {reader.name}: {failed.format(_question(record))}: {describe_failure(reader, result)}"
        )
    return result


def assert_passes(
    judge: JudgeLike,
    record: object,
    gate: str | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Judge ``record`` with ``gate`` (any gate, yours too) and fail unless its decision is positive."""
    return _require_positive(judge, record, gate, options, record_property, "{} did not pass")


def assert_sufficient(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the sufficiency gate finds the chunks enough to answer the question; the message names what
    the verdict says is missing, the entities no chunk covers and any contradiction."""
    return _require_positive(
        judge, record, SUFFICIENCY, options, record_property, "the context for {} is not sufficient"
    )


def assert_insufficient(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the sufficiency gate refuses the chunks (a question your corpus must not pretend to answer);
    the message names the chunks the verdict found useful and its reasoning."""
    _, result, positive = _judged(judge, record, SUFFICIENCY, options, record_property)
    if positive is None:
        error = result.error
        raise AssertionError(
            f"suffice sufficiency: {_question(record)} got no verdict"
            + (f": {error.type}: {error.message}" if error is not None else "")
        )
    if positive:
        fields = result.verdict.model_dump(mode="json") if result.verdict is not None else {}
        raise AssertionError(
            f"suffice sufficiency: the context for {_question(record)} was judged sufficient: "
            f"useful chunks: {fields.get('useful_chunk_ids')}; reasoning: {fields.get('reasoning')}"
        )
    return result


def assert_supported(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    allow_unsupported: bool = False,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the recovery gate delivers the record's ``response`` as supported by its chunks, and (unless
    ``allow_unsupported``) no claim of it is unsupported; the message names the unsupported claims."""
    result = _require_positive(judge, record, RECOVERY, options, record_property, "the answer to {} is not supported")
    assert result.verdict is not None
    unsupported = list(getattr(result.verdict, "unsupported_claims", []) or [])
    if unsupported and not allow_unsupported:
        raise AssertionError(
            f"suffice recovery: the answer to {_question(record)} was delivered with unsupported claims: "
            f"{_words(unsupported)}"
        )
    return result


def assert_adequate(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the adequacy gate's computed decision is PASS; the message names the dimensions under their
    minimum, the failed critical ones, the rubric criteria not met, what is missing and the rationale."""
    return _require_positive(judge, record, ADEQUACY, options, record_property, "the context for {} is not adequate")
