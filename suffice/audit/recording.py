"""Judge results as audit rows (used by the batch runner, the HTTP service and the harness)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suffice.audit.encoding import sha256_text
from suffice.audit.log import AuditLog
from suffice.gates.base import Gate
from suffice.records import Chunk, Item
from suffice.results import JudgeResult
from suffice.serving.models import ModelRef


def weights_hash(model_path: Path | None) -> str | None:
    """The weight folder's fingerprint (see :meth:`ModelRef.fingerprint`): cheap, and it
    changes whenever the weights are swapped, without reading gigabytes."""
    if model_path is None or not model_path.is_dir():
        return None
    return ModelRef(model_path, str(model_path)).fingerprint()


def chunk_digests(chunks: Sequence[Chunk]) -> list[dict[str, Any]]:
    """Chunk ids with content hashes, as the audit row stores them."""
    return [{"id": c.id, "source": c.source, "sha256": sha256_text(c.text)} for c in chunks]


def audit_values(
    gate: Gate,
    result: JudgeResult,
    item: Item | None,
    *,
    run_id: str,
    round: int,
    latency_ms: float,
    weights_hash: str | None,
) -> dict[str, Any]:
    """The audit row's values for one evaluation (a verdict or an error), for
    :meth:`AuditLog.record_many` (a whole batch in one transaction: one disk sync
    instead of one per row).  The decision recorded is the gate's route: the
    calibrated one when configured."""
    values: dict[str, Any] = {
        "run_id": run_id,
        "item_id": result.id,
        "gate": result.gate,
        "prompt_version": result.prompt_version,
        "model_id": result.model,
        "weights_hash": weights_hash,
        "backend": result.backend,
        "raw_output": result.raw_text
        if result.raw_text is not None
        else (result.error.raw_text if result.error else None),
        "round": round,
        "latency_ms": round_ms(latency_ms),
    }
    if item is not None:
        values["query_hash"] = sha256_text(item.question)
        values["chunks"] = chunk_digests(item.chunks)
    if result.verdict is not None:
        routing = gate.route(result.verdict)
        values["verdict"] = result.verdict.model_dump(mode="json")
        values["scores"] = routing.scores
        values["decision"] = routing.route
        if routing.rubric:
            name, _, version = routing.rubric.partition("@")
            values["rubric"], values["rubric_version"] = name, version
    else:
        values["error"] = result.error.model_dump(mode="json") if result.error else None
        values["decision"] = "error"
    return values


def round_ms(value: float) -> float:
    """Milliseconds to three decimals, always a float (the audit stores latency as REAL)."""
    return float(f"{value:.3f}")


#: The error type of an output that failed validation (see :class:`~suffice.exceptions.VerdictError`).
VERDICT_ERROR = "VerdictError"


def failed_twice(result: JudgeResult) -> bool:
    """Whether both generations for the record failed validation (the first and its one retry)."""
    return result.error is not None and result.error.type == VERDICT_ERROR and result.retries >= 1


def review_entry(result: JudgeResult, item: Item | None) -> dict[str, Any]:
    """The review queue entry for a record whose two generations failed validation: the
    seeds' "after two failures, log the raw output and route to a human review queue"."""
    assert result.error is not None
    payload = {
        "question": item.question if item else None,
        "chunks": [{"id": c.id, "source": c.source, "score": c.score, "text": c.text} for c in item.chunks]
        if item
        else [],
        "raw_output": result.error.raw_text,
        "error": result.error.model_dump(mode="json"),
    }
    return {
        "item_id": result.id or "",
        "gate": result.gate,
        "reason": f"two generations failed validation: {result.error.message}",
        "rule": "two_failed_generations",
        "payload": payload,
    }


def record_results(
    log: AuditLog,
    rows: Sequence[dict[str, Any]],
    results: Sequence[JudgeResult],
    items: Sequence[Item | None],
    run_id: str,
) -> list[int]:
    """Record the audit rows of ``results`` (one per result, as :func:`audit_values` gives
    them) and queue a review, pointing at its row, for each record whose two generations
    failed validation.  Returns the rows' sequence numbers."""
    seqs = log.record_many(rows)
    for seq, result, item in zip(seqs, results, items, strict=True):
        if failed_twice(result):
            log.enqueue_review(**review_entry(result, item), run_id=run_id, evaluation_seq=seq)
    return seqs
