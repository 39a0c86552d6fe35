"""Judge results as audit rows (used by the batch runner, the HTTP service and the harness)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suffice.audit.encoding import sha256_text
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
