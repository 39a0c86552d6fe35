"""The re-retrieval loop: gate → decision → widened retrieval → the same gate again.

Batch first: every round is one engine call for all questions still open and one
retriever call for all that need more evidence.  Every question ends in exactly one
outcome: ``delivered``, ``abstained`` (with the gap described) or ``review``
(queued for a person, with the reason).  When the round budget is spent, or a
retrieval finds nothing new, the outcome is escalation to review, never silence.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suffice.exceptions import ConfigError, InputError
from suffice.harness.audit import AuditLog, weights_hash
from suffice.harness.recording import audit_result
from suffice.harness.retrieval import RetrievalRequest, Retriever, merge_chunks
from suffice.harness.rewrite import QueryRewriter, RewriteRequest
from suffice.harness.routing import Routing, route_of
from suffice.judge import Judge
from suffice.records import Item, record_id
from suffice.results import JudgeResult

DEFAULT_AUDIT_DB = Path("suffice-audit.sqlite")


@dataclass(frozen=True)
class PipelineConfig:
    """``max_rounds`` gate evaluations per question (the seeds advise 2-3); retrieval
    width starts at ``base_width`` chunks per query and is multiplied by
    ``width_growth`` every round ("a wider window")."""

    max_rounds: int = 3
    base_width: int = 5
    width_growth: int = 2
    rewrite_queries: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.max_rounds <= 10:
            raise ConfigError("max_rounds", self.max_rounds, "must be between 1 and 10")
        if self.base_width < 1:
            raise ConfigError("base_width", self.base_width, "must be >= 1")
        if self.width_growth < 1:
            raise ConfigError("width_growth", self.width_growth, "must be >= 1")

    def width(self, round: int) -> int:
        return int(self.base_width * self.width_growth ** (round - 1))


class RoundTrace(BaseModel):
    model_config = ConfigDict(frozen=True)

    round: int
    route: str
    reason: str
    queries: list[str] = Field(default_factory=list)
    new_chunks: int = 0
    audit_seq: int | None = None


class Outcome(BaseModel):
    """How one question ended.  ``verdict`` is the last gate verdict (if any)."""

    model_config = ConfigDict(frozen=True)

    id: str | None
    kind: Literal["delivered", "abstained", "review"]
    reason: str
    rounds: int
    gap: list[str] = Field(default_factory=list)
    answer: str | None = None
    chunk_ids: list[Any] = Field(default_factory=list)
    review_id: int | None = None
    verdict: dict[str, Any] | None = None
    trace: list[RoundTrace] = Field(default_factory=list)


@dataclass
class _Open:
    index: int
    item: Item
    tried: list[str] = field(default_factory=list)
    trace: list[RoundTrace] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    gap: list[str] = field(default_factory=list)


class Pipeline:
    def __init__(
        self,
        judge: Judge,
        retriever: Retriever,
        config: PipelineConfig | None = None,
        *,
        audit: AuditLog | str | Path | None = None,
    ) -> None:
        self.judge = judge
        self.retriever = retriever
        self.config = config or PipelineConfig()
        self.audit = audit if isinstance(audit, AuditLog) else AuditLog(audit or DEFAULT_AUDIT_DB)
        self.rewriter = QueryRewriter(judge.engine) if self.config.rewrite_queries else None
        self._weights = weights_hash(getattr(judge.engine, "model_path", None))

    def run(self, records: Sequence[object]) -> list[Outcome]:
        run_id = uuid.uuid4().hex
        outcomes: list[Outcome | None] = [None] * len(records)
        open_: list[_Open] = []
        first_retrieval: list[_Open] = []
        for index, record in enumerate(records):
            if isinstance(record, Mapping) and "chunks" not in record:
                record = {**record, "chunks": []}  # a question alone: the retriever finds its chunks
            try:
                item = self.judge.gate.parse_item(record)
            except InputError as exc:
                outcomes[index] = self._review(run_id, record_id(record), None, f"input error: {exc}", [], None, None)
                continue
            state = _Open(index, item)
            (open_ if item.chunks else first_retrieval).append(state)
        if first_retrieval:  # no chunks given: the first retrieval is the question itself
            self._retrieve(first_retrieval, {id(s): [s.item.question] for s in first_retrieval}, round=1)
            open_ += first_retrieval
            open_.sort(key=lambda s: s.index)

        for round in range(1, self.config.max_rounds + 1):
            if not open_:
                break
            started = time.perf_counter()
            results = self.judge.judge_batch([s.item for s in open_])
            latency = (time.perf_counter() - started) * 1000
            again: list[_Open] = []
            queries: dict[int, list[str]] = {}
            for state, result in zip(open_, results, strict=True):
                seq = audit_result(
                    self.audit,
                    result,
                    state.item,
                    run_id=run_id,
                    round=round,
                    latency_ms=latency,
                    weights_hash=self._weights,
                )
                outcome = self._step(run_id, state, result, round, seq, queries)
                if outcome is None:
                    again.append(state)
                else:
                    outcomes[state.index] = outcome
            if again and self.rewriter is not None:
                self._rewrite(again, queries)
            if again:
                self._retrieve(again, queries, round=round + 1)
            still_open = []
            for state in again:
                if state.trace[-1].new_chunks == 0:
                    outcomes[state.index] = self._escalate(run_id, state, "retrieval found nothing new")
                else:
                    still_open.append(state)
            open_ = still_open

        final = [o for o in outcomes if o is not None]
        assert len(final) == len(records), "every question ends in exactly one outcome"
        return final

    # -- one question, one round ---------------------------------------------------------
    def _step(
        self, run_id: str, state: _Open, result: JudgeResult, round: int, seq: int, queries: dict[int, list[str]]
    ) -> Outcome | None:
        item = state.item
        if result.verdict is None:
            reason = f"evaluation failed: {result.error.message if result.error else 'unknown'}"
            state.trace.append(RoundTrace(round=round, route="error", reason=reason, audit_seq=seq))
            return self._review(run_id, item.id, item, reason, [], None, seq, state.trace)
        routing = route_of(result.verdict)
        verdict = result.verdict.model_dump(mode="json")
        state.verdict, state.gap = verdict, routing.gap
        state.trace.append(RoundTrace(round=round, route=routing.route, reason=routing.reason, audit_seq=seq))
        if routing.route == "deliver":
            return self._outcome("delivered", item, routing.reason, routing, verdict, state.trace)
        if routing.route == "abstain":
            return self._outcome("abstained", item, routing.reason, routing, verdict, state.trace)
        if routing.route == "human_review":
            return self._review(run_id, item.id, item, routing.reason, routing.gap, verdict, seq, state.trace)
        if round >= self.config.max_rounds:
            reason = f"retrieval budget of {self.config.max_rounds} rounds spent: {routing.reason}"
            return self._review(run_id, item.id, item, reason, routing.gap, verdict, seq, state.trace)
        queries[id(state)] = routing.queries or [item.question]
        return None

    def _outcome(
        self,
        kind: Literal["delivered", "abstained"],
        item: Item,
        reason: str,
        routing: Routing,
        verdict: dict[str, Any],
        trace: list[RoundTrace],
    ) -> Outcome:
        return Outcome(
            id=item.id,
            kind=kind,
            reason=reason,
            rounds=_rounds(trace),
            gap=routing.gap,
            answer=verdict.get("answer"),
            chunk_ids=[c.id for c in item.chunks],
            verdict=verdict,
            trace=list(trace),
        )

    def _review(
        self,
        run_id: str,
        item_id: str | None,
        item: Item | None,
        reason: str,
        gap: list[str],
        verdict: dict[str, Any] | None,
        seq: int | None,
        trace: list[RoundTrace] | None = None,
    ) -> Outcome:
        payload = {
            "question": item.question if item else None,
            "chunks": [{"id": c.id, "source": c.source, "score": c.score, "text": c.text} for c in item.chunks]
            if item
            else [],
            "verdict": verdict,
            "gap": gap,
        }
        review_id = self.audit.enqueue_review(
            item_id=item_id or "",
            gate=self.judge.gate.name,
            reason=reason,
            payload=payload,
            run_id=run_id,
            evaluation_seq=seq,
        )
        return Outcome(
            id=item_id,
            kind="review",
            reason=reason,
            rounds=_rounds(trace or []),
            gap=gap,
            chunk_ids=[c.id for c in item.chunks] if item else [],
            review_id=review_id,
            verdict=verdict,
            trace=list(trace or []),
        )

    def _escalate(self, run_id: str, state: _Open, why: str) -> Outcome:
        last = state.trace[-1] if state.trace else None
        reason = f"{why} after round {last.round if last else 0}; escalated"
        seq = next((t.audit_seq for t in reversed(state.trace) if t.audit_seq is not None), None)
        return self._review(run_id, state.item.id, state.item, reason, state.gap, state.verdict, seq, state.trace)

    # -- retrieval ----------------------------------------------------------------------
    def _rewrite(self, states: list[_Open], queries: dict[int, list[str]]) -> None:
        assert self.rewriter is not None
        requests = [RewriteRequest(s.item.question, tuple(queries[id(s)]), tuple(s.tried)) for s in states]
        for state, rewritten in zip(states, self.rewriter.rewrite(requests), strict=True):
            queries[id(state)] = rewritten

    def _retrieve(self, states: list[_Open], queries: dict[int, list[str]], round: int) -> None:
        requests = [
            RetrievalRequest(s.item.id, s.item.question, tuple(queries[id(s)]), round, self.config.width(round))
            for s in states
        ]
        found = self.retriever.retrieve(requests)
        for state, request, chunks in zip(states, requests, found, strict=True):
            merged, added = merge_chunks(state.item.chunks, chunks, round)
            state.item = replace(state.item, chunks=tuple(merged))
            state.tried.extend(request.queries)
            state.trace.append(
                RoundTrace(
                    round=round,
                    route="retrieval",
                    reason=f"width {request.width}",
                    queries=list(request.queries),
                    new_chunks=added,
                )
            )


def _rounds(trace: Sequence[RoundTrace]) -> int:
    """Gate evaluations in a trace (retrieval steps are traced too)."""
    return sum(1 for t in trace if t.route != "retrieval")
