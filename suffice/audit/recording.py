"""Judge results as audit rows (used by the batch runner, the HTTP service and the harness)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from suffice.audit.encoding import canonical_json, sha256_text
from suffice.audit.log import AuditLog
from suffice.exceptions import SufficeError
from suffice.gates.base import Gate
from suffice.gates.roles import high_stakes
from suffice.records.item import Chunk, Item
from suffice.results import JudgeResult
from suffice.serving.weights import ModelRef


def weights_hash(model_path: Path | None) -> str | None:
    """The weight folder's fingerprint (:meth:`ModelRef.fingerprint`: cheap, yet it changes with the weights)."""
    if model_path is None or not model_path.is_dir():
        return None
    return ModelRef(model_path, str(model_path)).fingerprint()


def chunk_digests(chunks: Sequence[Chunk]) -> list[dict[str, Any]]:
    """Chunk ids with content hashes, as the audit row stores them."""
    return [{"id": c.id, "source": c.source, "sha256": sha256_text(c.text)} for c in chunks]


def input_hash(item: Item) -> str:
    """SHA-256 of everything the gate judged, as :func:`canonical_json` writes it: the question, the response,
    the rubric and every chunk (id, source, score, date, metadata, text) in order.  The question alone
    (``query_hash``) cannot show which answer or which evidence a verdict was about."""
    return sha256_text(
        canonical_json(
            {
                "question": item.question,
                "response": item.response,
                "rubric": item.rubric,
                "chunks": [
                    {
                        "id": c.id,
                        "source": c.source,
                        "score": c.score,
                        "date": c.date,
                        "metadata": c.metadata_dict,
                        "text": c.text,
                    }
                    for c in item.chunks
                ],
            }
        )
    )


def settings_digest(settings: Mapping[str, str]) -> str:
    """SHA-256 of the settings that decide verdicts, as :func:`canonical_json` writes them: rows with the
    same digest were judged alike, whichever entry point wrote them."""
    return sha256_text(canonical_json(dict(settings)))


def audit_values(
    gate: Gate,
    result: JudgeResult,
    item: Item | None,
    *,
    run_id: str,
    round: int,
    latency_ms: float,
    weights_hash: str | None,
    settings: Mapping[str, str],
) -> dict[str, Any]:
    """The audit row's values for one evaluation (a verdict or an error), for :meth:`AuditLog.record_many`.  The
    decision recorded is the gate's route (the calibrated one when configured) with its rule.  ``settings``: the
    gate's and the engine's settings that decide verdicts (:meth:`Gate.settings` with
    :func:`~suffice.serving.factory.engine_settings`)."""
    values: dict[str, Any] = {
        "run_id": run_id,
        "item_id": result.id,
        "gate": result.gate,
        "prompt_version": result.prompt_version,
        "fence": result.fence,
        "model_id": result.model,
        "weights_hash": weights_hash,
        "backend": result.backend,
        "raw_output": result.error.raw_text if result.raw_text is None and result.error else result.raw_text,
        "round": round,
        "latency_ms": round_ms(latency_ms),
        "settings": dict(settings),
        "settings_digest": settings_digest(settings),
        # Every output that failed validation behind this row; a result from a served answer (ServiceScorer) or the
        # verdict cache has none (they are never dumped): the service's own log, or the first judging's row, has them.
        "retries": result.retries,
        "attempts": [attempt.model_dump(mode="json") for attempt in result.attempts],
    }
    if item is not None:
        values["query_hash"] = sha256_text(item.question)
        values["input_hash"] = input_hash(item)
        values["chunks"] = chunk_digests(item.chunks)
    if result.verdict is not None:
        routing = gate.route(result.verdict)
        values["verdict"] = result.verdict.model_dump(mode="json")
        values["cached_from"] = result.cached.first_judged if result.cached is not None else None
        values["scores"] = routing.scores
        values["decision"] = routing.route
        # A human_review route always names its rule, as its queued review does.
        values["rule"] = routing.rule or (UNNAMED_RULE if routing.route == "human_review" else None)
        if routing.rubric:
            name, _, version = routing.rubric.partition("@")
            values["rubric"], values["rubric_version"] = name, version
    else:
        values["error"] = result.error.model_dump(mode="json") if result.error else None
        values["decision"] = "error"
        if failed_twice(result):
            values["rule"] = TWO_FAILED_GENERATIONS
    return values


def round_ms(value: float) -> float:
    """Milliseconds to three decimals, always a float (the audit stores latency as REAL)."""
    return float(f"{value:.3f}")


#: The rule of a record whose two generations failed validation (it is queued for review).
TWO_FAILED_GENERATIONS = "two_failed_generations"
#: The error type of an output that failed validation (see :class:`~suffice.exceptions.VerdictError`).
VERDICT_ERROR = "VerdictError"


def failed_twice(result: JudgeResult) -> bool:
    """Whether both generations for the record failed validation (the first and its one retry)."""
    return result.error is not None and result.error.type == VERDICT_ERROR and result.retries >= 1


#: The rule of a gate's own ``human_review`` route that names none (a gate written outside suffice).
UNNAMED_RULE = "gate_routed_to_review"


def review_rule(gate: Gate, result: JudgeResult) -> str | None:
    """The rule that sends ``result`` to a person (``None``: none does): two failed generations, or the
    gate's ``human_review`` route with its rule."""
    if failed_twice(result):
        return TWO_FAILED_GENERATIONS
    if result.verdict is not None:
        routing = gate.route(result.verdict)
        if routing.route == "human_review":
            return routing.rule or UNNAMED_RULE
    return None


def review_record(item: Item | None) -> dict[str, Any]:
    """The record as a review's payload shows it: question, response and chunks (empty where it is not an item)."""
    if item is None:
        return {"question": None, "response": None, "chunks": []}
    chunks = [{"id": c.id, "source": c.source, "score": c.score, "text": c.text} for c in item.chunks]
    return {"question": item.question, "response": item.response, "chunks": chunks}


def review_entry(
    result: JudgeResult, item: Item | None, gate: Gate | None = None, settings: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The review queue entry for a record sent to a person by :func:`review_rule` (``None``: it is not).  The
    payload holds the record as judged (question, response, chunks), the verdict, the rule, the reason and the
    run's settings."""
    rule = review_rule(gate, result) if gate is not None else TWO_FAILED_GENERATIONS if failed_twice(result) else None
    if rule is None:
        return None
    payload: dict[str, Any] = {"rule": rule, **review_record(item), "settings": dict(settings or {})}
    if gate is not None and item is not None:
        # Under high stakes a review needs two reviewers (suffice.audit.reviewing.reviewers_for).
        try:
            payload["high_stakes"] = high_stakes(gate, item)
        except SufficeError:
            payload["high_stakes"] = True
    if result.verdict is not None and gate is not None:
        routing = gate.route(result.verdict)
        payload.update(
            verdict=result.verdict.model_dump(mode="json"),
            why=routing.reason,
            scores=routing.scores,
            gap=routing.gap,
            queries=routing.queries,
        )
    else:
        assert result.error is not None
        payload.update(
            raw_output=result.error.raw_text,
            error=result.error.model_dump(mode="json"),
            why=f"two generations failed validation: {result.error.message}",
        )
    # The rule first: a reviewer (and a count per rule) reads it without parsing the rest.
    return {
        "item_id": result.id or "",
        "gate": result.gate,
        "reason": f"{rule}: {payload['why']}",
        "rule": rule,
        "payload": payload,
    }


def record_results(
    log: AuditLog,
    rows: Sequence[dict[str, Any]],
    results: Sequence[JudgeResult],
    items: Sequence[Item | None],
    run_id: str,
    gate: Gate | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[int]:
    """Record the audit rows of ``results`` (as :func:`audit_values` gives them) and queue a review pointing at its
    row for each record sent to a person (:func:`review_entry`); returns the rows' sequence numbers."""
    seqs = log.record_many(rows)
    for seq, result, item in zip(seqs, results, items, strict=True):
        entry = review_entry(result, item, gate, settings)
        if entry is not None:
            log.enqueue_review(**entry, run_id=run_id, evaluation_seq=seq)
    return seqs
