"""The re-retrieval loop: gate → decision → widened retrieval → (regenerated answer) → the same gate again.

Every round is one engine call and one retriever call for all open questions.  Every question ends in exactly one
outcome: ``delivered``, ``abstained`` (the gate abstains, the retrieval budget is spent, or retrieval finds nothing
new: the user sees the gap and the queries) or ``review`` (what the gate sends to a person, and failures).  A failing
retrieval, rewrite or generation sends only its own question to review (:mod:`suffice.serving.isolation`).  Every
retrieval attempt is written to the audit log's ``retrievals`` chain, every evaluation to its ``evaluations`` chain.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from suffice.audit import DEFAULT_AUDIT_DB, AuditLog
from suffice.audit.encoding import sha256_text
from suffice.audit.recording import UNNAMED_RULE, audit_values, failed_twice, review_record, weights_hash
from suffice.audit.reviewing import APPLIED_RULE, applied_outcome, review_log_id, review_outcome
from suffice.config import JudgeProtocol, require_judge
from suffice.exceptions import ConfigError, InputError, RetrievalError, RewriteError, StepError, SufficeError
from suffice.gates.roles import high_stakes, parse_item
from suffice.harness.retrieval import RawChunk, RetrievalRequest, Retriever, merge_chunks
from suffice.harness.rewrite import QueryRewriter, RewriteRequest
from suffice.records.item import Chunk, Item, item_record, record_id
from suffice.results import JudgeResult, ReviewOutcome
from suffice.serving.isolation import step_outcomes

#: ``generator(question, chunks) -> answer``: the caller's answer generator, called again after a re-retrieval.
Generator = Callable[[str, Sequence[Chunk]], str]


class GenerationError(StepError):
    """The answer generator raised or returned something other than text."""

    step = "generation"


@dataclass(frozen=True)
class PipelineConfig:
    """``max_rounds`` gate evaluations per question; retrieval width starts at ``base_width`` chunks per query,
    times ``width_growth`` every round.  ``retrieval_timeout_s``: seconds per question a retriever call may
    take, past which its questions go to review; with it the retriever runs in a thread of its own, so it is
    not the default.  ``high_stakes``: whether an abstention or a spent budget goes to a person instead of
    the user alone (the seed: "a human review gate when the system abstains on high-stakes queries or when
    the retry budget is exhausted"); ``None`` asks the gate (a recovery threshold's ``high_stakes``, a
    HIGH-risk rubric)."""

    max_rounds: int = 3
    base_width: int = 5
    width_growth: int = 2
    rewrite_queries: bool = False
    retrieval_timeout_s: float | None = None
    high_stakes: bool | None = None

    def __post_init__(self) -> None:
        for name in ("max_rounds", "base_width", "width_growth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(name, value, "must be a whole number")
        if not 1 <= self.max_rounds <= 10:
            raise ConfigError("max_rounds", self.max_rounds, "must be between 1 and 10")
        if self.base_width < 1:
            raise ConfigError("base_width", self.base_width, "must be >= 1")
        if self.width_growth < 1:
            raise ConfigError("width_growth", self.width_growth, "must be >= 1")
        timeout = self.retrieval_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf")
        ):
            raise ConfigError("retrieval_timeout_s", timeout, "must be a positive number of seconds, or None")
        if self.high_stakes is not None and not isinstance(self.high_stakes, bool):
            raise ConfigError("high_stakes", self.high_stakes, "must be true, false or None (the gate decides)")

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
    #: For a retrieval step: the width asked for and the ids of the chunks it brought back (as the retriever gave
    #: them); ``audit_seq`` is then its row in the audit log's ``retrievals`` chain.
    width: int | None = None
    chunk_ids: list[Any] = Field(default_factory=list)


#: Trace routes of harness steps (not gate evaluations).
_STEPS = frozenset({RetrievalError.step, RewriteError.step, GenerationError.step})


class StepFailure(BaseModel):
    """The harness step that failed for a question, apart from the reason: a broken retriever, not a gap."""

    model_config = ConfigDict(frozen=True)

    #: ``retrieval`` or ``rewrite`` (the step's name in the trace).
    step: str
    #: The round the failed step was preparing (retrieval before round 1 is round 1).
    round: int
    #: What went wrong: the exception's type and message, or the malformed result.
    message: str


class Outcome(BaseModel):
    """How one question ended.  ``verdict`` is the last gate verdict (if any).  A delivered ``answer`` is the checked
    answer as it was given (or generated), with ``citations`` (the source ids backing it) and ``caveats`` for a
    partially supported one (the recovery gate's answer carries its citations inline).  An abstention carries the
    ``gap`` (what is missing) and ``queries`` (what could fill it).  ``failure`` is set when a harness step, not the
    gate, sent the question to review."""

    model_config = ConfigDict(frozen=True)

    id: str | None
    kind: Literal["delivered", "abstained", "review"]
    reason: str
    rounds: int
    gap: list[str] = Field(default_factory=list)
    answer: str | None = None
    caveats: list[str] = Field(default_factory=list)
    citations: list[str] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)
    failure: StepFailure | None = None
    chunk_ids: list[Any] = Field(default_factory=list)
    review_id: int | None = None
    #: For ``review``: the rule that sent the question to a person (see ``suffice.grammars.routes.REVIEW_RULES``).
    rule: str | None = None
    verdict: dict[str, Any] | None = None
    trace: list[RoundTrace] = Field(default_factory=list)
    #: Set by :meth:`Pipeline.resume`: the review whose person's decision this outcome applies, the reviewers who
    #: agreed on it, and their note.
    resumed_from: int | None = None
    decided_by: list[str] = Field(default_factory=list)
    note: str | None = None


class OutcomeSource(Protocol):
    """Where :meth:`Pipeline.resume` reads a review's outcome: a :class:`~suffice.Client` or
    :class:`~suffice.AsyncClient` of the ``suffice serve`` that queued it (or anything with this method)."""

    def review_outcome(self, review_id: int) -> ReviewOutcome: ...


#: The route an applied decision takes, as the audit row's ``decision`` records it.
_APPLIED_ROUTES = {"answer": "deliver", "refine_retrieval": "retrieve_more", "unanswerable": "abstain"}
#: What an applied decision's audit row leaves out of the review's outcome: the rest is who decided what.
_NOT_APPLIED = {"state", "decided", "item_id", "run_id", "gate", "rule", "gap", "record"}


@dataclass
class _Open:
    index: int
    item: Item
    tried: list[str] = field(default_factory=list)
    trace: list[RoundTrace] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    gap: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    failure: StepFailure | None = None
    #: The record came without an answer: the generator writes the first one.
    generate_first: bool = False
    #: The record itself said no retrieval is left (not the budget).
    exhausted_given: bool = False


#: What a record without an answer is parsed with until the generator writes one (never judged).
_PENDING = "(the answer is being generated)"


class Pipeline:
    """The re-retrieval loop around a judge, writing every round to the audit log.

    ``judge``: any :class:`~suffice.JudgeProtocol` (an in-process :class:`~suffice.Judge`, a
    :class:`~suffice.Client` or :class:`~suffice.AsyncClient` of ``suffice serve``); each round is one
    ``judge_batch`` call.  ``rewrite_queries`` rewrites with the judge's engine, so it needs a judge with one in
    this process.

    ``generator`` (optional): ``generator(question, chunks) -> answer``.  With it, a gate that checks an answer gets
    a new one after every re-retrieval (the seed: "regenerate the answer and re-evaluate"), and a record without an
    answer gets its first one before round 1.  Without it, the answer given is checked again on the wider evidence.
    """

    def __init__(
        self,
        judge: JudgeProtocol,
        retriever: Retriever,
        config: PipelineConfig | None = None,
        *,
        audit: AuditLog | str | Path | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.judge = require_judge(judge)
        if hasattr(self.judge, "review_queue"):  # an in-process Judge
            # Each route to a person is an outcome of kind "review" to the caller, and queued when there is a log.
            self.judge.review_queue = "the Pipeline"
        #: The judge's gate: reads each record and routes each verdict.
        self.gate = judge.gate_for()
        self.retriever = retriever
        self.generator = generator
        self._run_id = ""
        self.config = config or PipelineConfig()
        self.audit = audit if isinstance(audit, AuditLog) else AuditLog(audit or DEFAULT_AUDIT_DB)
        engine = getattr(judge, "engine", None)  # an in-process judge's: a service's engine is not here
        if self.config.rewrite_queries and engine is None:
            raise ConfigError(
                "rewrite_queries", True, "rewrites with the judge's engine in this process: give a suffice.Judge"
            )
        self.rewriter = QueryRewriter(engine) if engine is not None and self.config.rewrite_queries else None
        self._weights = weights_hash(getattr(engine, "model_path", None))
        #: What decides this judge's verdicts, recorded with each row (as ``judge`` and ``serve`` record it).
        self._settings = judge.settings_for()
        #: One resume at a time: a decision is looked up as unapplied and applied in one step.
        self._resuming = threading.Lock()

    def run(self, records: Sequence[object]) -> list[Outcome]:
        run_id = uuid.uuid4().hex
        self._run_id = run_id
        outcomes: list[Outcome | None] = [None] * len(records)
        open_: list[_Open] = []
        first_retrieval: list[_Open] = []
        for index, record in enumerate(records):
            if isinstance(record, Mapping) and "chunks" not in record:
                record = {**record, "chunks": []}  # a question alone: the retriever finds its chunks
            try:
                state = self._open(index, record)
            except InputError as exc:
                outcomes[index] = self._review(
                    run_id, None, f"input error: {exc}", [], None, None, rule="input_error", item_id=record_id(record)
                )
                continue
            (open_ if state.item.chunks else first_retrieval).append(state)
        if first_retrieval:  # no chunks given: the first retrieval is the question itself
            self._retrieve(first_retrieval, {id(s): [s.item.question] for s in first_retrieval}, round=1)
            open_ = sorted([*open_, *self._unfailed(run_id, first_retrieval, outcomes)], key=lambda s: s.index)
        first_answers = [s for s in open_ if s.generate_first]
        if first_answers:
            self._generate(first_answers, round=1)
            open_ = self._unfailed(run_id, open_, outcomes)
        self._loop(run_id, open_, outcomes)

        final = [o for o in outcomes if o is not None]
        assert len(final) == len(records), "every question ends in exactly one outcome"
        return final

    def _open(self, index: int, record: object) -> _Open:
        """``record`` as an open question, its answer pending where the generator writes the first one; an
        :class:`InputError` where it cannot be read."""
        pending = False
        if self.generator is not None and self.gate.needs_response and isinstance(record, Mapping):
            pending = record.get("response") is None
            record = {**record, "response": _PENDING} if pending else record
        item = parse_item(self.gate, record)
        return _Open(index, item, generate_first=pending, exhausted_given=item.retrieval_exhausted)

    def _unfailed(self, run_id: str, states: list[_Open], outcomes: list[Outcome | None]) -> list[_Open]:
        """``states`` whose step did not fail; each failed one's review is its outcome."""
        for state in states:
            if state.failure is not None:
                outcomes[state.index] = self._failed(run_id, state)
        return [s for s in states if s.failure is None]

    def _loop(self, run_id: str, open_: list[_Open], outcomes: list[Outcome | None]) -> None:
        """The rounds: judge every open question, route, re-retrieve (and regenerate) what the gate sends back,
        until each has its outcome in ``outcomes`` (at its state's ``index``)."""
        for round in range(1, self.config.max_rounds + 1):
            if not open_:
                break
            if round == self.config.max_rounds:
                # The last round: the gate routes what more retrieval would fix as it would with no retriever.
                for state in open_:
                    state.item = replace(state.item, retrieval_exhausted=True)
            started = time.perf_counter()
            results = self.judge.judge_batch([item_record(s.item) for s in open_])
            latency = (time.perf_counter() - started) * 1000
            again: list[_Open] = []
            queries: dict[int, list[str]] = {}
            for state, result in zip(open_, results, strict=True):
                values = audit_values(
                    self.gate,
                    result,
                    state.item,
                    run_id=run_id,
                    round=round,
                    latency_ms=latency,
                    weights_hash=self._weights,
                    settings=self._settings,
                )
                seq = self.audit.record(**values)
                outcome = self._step(run_id, state, result, round, seq, queries)
                if outcome is None:
                    again.append(state)
                else:
                    outcomes[state.index] = outcome
            if again and self.rewriter is not None:
                self._rewrite(again, queries, round=round + 1)
            self._retrieve([s for s in again if s.failure is None], queries, round=round + 1)
            widened = [s for s in again if s.failure is None and s.trace[-1].new_chunks > 0]
            if widened and self.generator is not None and self.gate.needs_response:
                self._generate(widened, round=round + 1)
            still_open = []
            for state in again:
                if state.failure is not None:
                    outcomes[state.index] = self._failed(run_id, state)
                elif state.trace[-1].route == RetrievalError.step and state.trace[-1].new_chunks == 0:
                    outcomes[state.index] = self._abstain(run_id, state, "retrieval found nothing new")
                else:
                    still_open.append(state)
            open_ = still_open

    # -- one question, one round ---------------------------------------------------------
    def _step(
        self, run_id: str, state: _Open, result: JudgeResult, round: int, seq: int, queries: dict[int, list[str]]
    ) -> Outcome | None:
        item = state.item
        if result.verdict is None:
            reason = f"evaluation failed: {result.error.message if result.error else 'unknown'}"
            state.trace.append(RoundTrace(round=round, route="error", reason=reason, audit_seq=seq))
            rule = "two_failed_generations" if failed_twice(result) else "evaluation_failed"
            return self._review(run_id, state, reason, [], None, seq, rule=rule)
        routing = self.gate.route(result.verdict)
        verdict = result.verdict.model_dump(mode="json")
        # A gate without retrieval queries (the sufficiency gate's are empty) is searched for by its gap.
        search = list(routing.queries or routing.gap)
        state.verdict, state.gap, state.queries = verdict, routing.gap, search
        state.trace.append(RoundTrace(round=round, route=routing.route, reason=routing.reason, audit_seq=seq))
        spent = round >= self.config.max_rounds and not state.exhausted_given
        budget = f"retrieval budget of {self.config.max_rounds} rounds spent: "
        if routing.route == "deliver":
            return Outcome(
                id=item.id,
                kind="delivered",
                reason=routing.reason,
                rounds=_rounds(state.trace),
                gap=routing.gap,
                answer=routing.answer,
                caveats=routing.caveats,
                citations=routing.citations,
                chunk_ids=[c.id for c in item.chunks],
                verdict=verdict,
                trace=list(state.trace),
            )
        if routing.route == "human_review":
            named = routing.rule
            if spent and named == "abstained_high_stakes":
                named = "budget_spent_high_stakes"
            reason = (budget if spent else "") + routing.reason
            return self._review(run_id, state, reason, routing.gap, verdict, seq, rule=named, queries=routing.queries)
        if routing.route == "abstain":
            return self._abstain(run_id, state, (budget if spent else "") + routing.reason, spent=spent, seq=seq)
        if round >= self.config.max_rounds:
            return self._abstain(run_id, state, budget + routing.reason, spent=True, seq=seq)
        # Nothing was retrieved: the gate's "queries" are its canned note; search the question again.
        queries[id(state)] = (search if item.has_evidence else []) or [item.question]
        return None

    def _review(
        self,
        run_id: str,
        state: _Open | None,
        reason: str,
        gap: list[str],
        verdict: dict[str, Any] | None,
        seq: int | None,
        *,
        rule: str | None,
        queries: Sequence[str] = (),
        item_id: str | None = None,
    ) -> Outcome:
        """A person's review of the question (``state``; ``None``: a record that could not be read, ``item_id``)."""
        item, trace, failure = (state.item, state.trace, state.failure) if state is not None else (None, [], None)
        item_id = item.id if item is not None else item_id
        rule = rule or UNNAMED_RULE
        payload = {
            "rule": rule,
            "why": reason,
            **review_record(item),
            "verdict": verdict,
            "gap": gap,
            "queries": list(queries),
            "failure": failure.model_dump(mode="json") if failure else None,
            "settings": self._review_settings(),
            # Under high stakes a review needs two reviewers (suffice.audit.reviewing.reviewers_for).
            "high_stakes": self._high_stakes(item) if item else False,
        }
        review_id = self.audit.enqueue_review(
            item_id=item_id or "",
            gate=self.gate.name,
            reason=f"{rule}: {reason}",
            payload=payload,
            run_id=run_id,
            evaluation_seq=seq,
        )
        return Outcome(
            id=item_id,
            kind="review",
            reason=reason,
            rounds=_rounds(trace),
            gap=gap,
            chunk_ids=[c.id for c in item.chunks] if item else [],
            review_id=review_id,
            queries=list(queries),
            rule=rule,
            verdict=verdict,
            trace=list(trace),
            failure=failure,
        )

    def _review_settings(self) -> dict[str, Any]:
        """The run's settings a reviewer sees: the gate's, the engine's and the loop's."""
        loop = {k: v for k, v in asdict(self.config).items() if k != "retrieval_timeout_s"}
        return {**self._settings, "pipeline": loop}

    def _high_stakes(self, item: Item) -> bool:
        if self.config.high_stakes is not None:
            return self.config.high_stakes
        try:
            return high_stakes(self.gate, item)
        except SufficeError:  # e.g. a rubric gone since the record was read: the safer reading
            return True

    def _abstain(self, run_id: str, state: _Open, why: str, *, spent: bool = False, seq: int | None = None) -> Outcome:
        """No retrieval can help any more: the user sees the gap and the queries that were to fill it; under high
        stakes a person sees them first (``spent``: the retrieval budget ran out)."""
        if self._high_stakes(state.item):
            rule = "budget_spent_high_stakes" if spent else "abstained_high_stakes"
            seq = seq if seq is not None else _last_seq(state)
            return self._review(
                run_id, state, why, list(state.gap), state.verdict, seq, rule=rule, queries=state.queries
            )
        return Outcome(
            id=state.item.id,
            kind="abstained",
            reason=f"{why}; abstained",
            rounds=_rounds(state.trace),
            gap=list(state.gap),
            queries=list(state.queries),
            chunk_ids=[c.id for c in state.item.chunks],
            verdict=state.verdict,
            trace=list(state.trace),
        )

    def _failed(self, run_id: str, state: _Open) -> Outcome:
        """Review for a question whose retrieval or rewriting failed (reason: the step, round and error)."""
        failure = state.failure
        assert failure is not None
        reason = f"{failure.step} failed in round {failure.round}: {failure.message}"
        return self._review(run_id, state, reason, state.gap, state.verdict, _last_seq(state), rule="step_failed")

    @staticmethod
    def _fail(state: _Open, error: StepError, round: int, queries: Sequence[str]) -> None:
        """Mark one question as failed at a step; the round loop turns it into review."""
        state.failure = StepFailure(step=error.step, round=round, message=error.detail)
        state.trace.append(RoundTrace(round=round, route=error.step, reason=str(error), queries=list(queries)))

    # -- retrieval ----------------------------------------------------------------------
    def _rewrite(self, states: list[_Open], queries: dict[int, list[str]], round: int) -> None:
        rewriter = self.rewriter
        assert rewriter is not None
        requests = [RewriteRequest(s.item.question, tuple(queries[id(s)]), tuple(s.tried)) for s in states]
        for state, rewritten in zip(states, step_outcomes(rewriter.rewrite, requests, RewriteError), strict=True):
            if isinstance(rewritten, StepError):
                self._fail(state, rewritten, round, queries[id(state)])
            else:
                queries[id(state)] = rewritten

    def _retrieve(self, states: list[_Open], queries: dict[int, list[str]], round: int) -> None:
        """One retriever call for every question (split only if it fails); failed questions are marked."""
        requests = [
            RetrievalRequest(s.item.id, s.item.question, tuple(queries[id(s)]), round, self.config.width(round))
            for s in states
        ]
        found: list[list[RawChunk] | StepError] = step_outcomes(
            self.retriever.retrieve, requests, RetrievalError, self.config.retrieval_timeout_s
        )
        attempts: list[dict[str, Any]] = []
        for state, request, chunks in zip(states, requests, found, strict=True):
            attempt: dict[str, Any] = {
                "run_id": self._run_id,
                "item_id": state.item.id,
                "gate": self.gate.name,
                "round": round,
                "queries": list(request.queries),
                "width": request.width,
            }
            attempts.append(attempt)
            if isinstance(chunks, StepError):
                attempt["error"] = {"step": chunks.step, "message": chunks.detail}
                self._fail(state, chunks, round, request.queries)
                continue
            attempt["chunk_ids"] = _returned_ids(chunks)
            try:
                merged, added = merge_chunks(state.item.chunks, chunks, round)
            except InputError as exc:
                error = RetrievalError(f"malformed chunk: {exc}")
                attempt["error"] = {"step": error.step, "message": error.detail}
                self._fail(state, error, round, request.queries)
                continue
            attempt["new_chunks"] = added
            state.item = replace(state.item, chunks=tuple(merged))
            state.tried.extend(request.queries)
            state.trace.append(
                RoundTrace(
                    round=round,
                    route="retrieval",
                    reason=f"width {request.width}",
                    queries=list(request.queries),
                    new_chunks=added,
                    width=request.width,
                    chunk_ids=attempt["chunk_ids"],
                )
            )
        seqs = self.audit.record_retrievals(attempts)
        for state, seq in zip(states, seqs, strict=True):
            last = state.trace[-1]
            if last.route == RetrievalError.step and last.round == round:
                state.trace[-1] = last.model_copy(update={"audit_seq": seq})

    # -- generation ---------------------------------------------------------------------
    def _generate(self, states: list[_Open], round: int) -> None:
        """A new answer for each question from its evidence now; a failing generation fails only its question."""
        generator = self.generator
        assert generator is not None
        for state in states:
            try:
                answer = generator(state.item.question, state.item.chunks)
                if not isinstance(answer, str) or not answer.strip():
                    raise GenerationError(f"the generator returned {type(answer).__name__} {answer!r:.80}, not text")
            except Exception as exc:
                error = exc if isinstance(exc, GenerationError) else GenerationError(f"{type(exc).__name__}: {exc}")
                self._fail(state, error, round, [])
                continue
            state.item = replace(state.item, response=answer)
            state.generate_first = False
            reason = f"answer generated from {len(state.item.chunks)} chunk(s)"
            state.trace.append(RoundTrace(round=round, route=GenerationError.step, reason=reason))

    # -- a person's decision applied ------------------------------------------------------
    def resume(self, review_id: int, source: OutcomeSource | AuditLog | None = None) -> Outcome:
        """Act on what a person decided on review ``review_id``: ``answer`` delivers the answer the reviewers
        gave (without one, the response under review, else the answer its verdict wrote); ``refine_retrieval`` runs
        the loop again, its first retrieval the reviewers' queries (without them, their notes' lines; without
        those, the gap queued, else the question) added to the chunks they saw; ``unanswerable`` abstains with the
        reviewers' note.  The outcome says which review it applies (``resumed_from``), who decided (``decided_by``)
        and their ``note``.

        ``source``: where the review is, ``None`` for this pipeline's own audit log (an :attr:`Outcome.review_id`
        of :meth:`run`), another :class:`~suffice.audit.AuditLog`, or a :class:`~suffice.Client` of the
        ``suffice serve`` that queued it.  A review not decided yet gives a ``review`` outcome and writes nothing;
        an unknown id raises :class:`~suffice.exceptions.ReviewNotFoundError`.

        Applying writes one row to this pipeline's audit log (rule ``review_applied``: the review, its queue, the
        decision, who made it, the answer or queries it handed over, and the outcome given), after a refine's own
        rows.  A decision is applied once: resuming it again returns that row's outcome and writes nothing.  Two
        processes resuming the same review at the same moment may both apply it (their rows show it); within one
        pipeline, resumes take turns."""
        decided = self._decided(review_id, source)
        if not decided.decided:
            return Outcome(
                id=decided.item_id,
                kind="review",
                reason=f"review {review_id} is {decided.state}: no decision to apply yet",
                rounds=0,
                gap=list(decided.gap),
                review_id=review_id,
                rule=decided.rule,
            )
        with self._resuming:
            done = applied_outcome(self.audit, decided.log_id, review_id)
            if done is not None:
                return Outcome.model_validate_json(done)
            run_id = uuid.uuid4().hex
            self._run_id = run_id
            if decided.decision == "refine_retrieval":
                outcome = self._refined(run_id, decided)
            else:
                outcome = self._decided_outcome(decided)
            outcome = outcome.model_copy(
                update={"resumed_from": review_id, "decided_by": list(decided.decided_by), "note": decided.note}
            )
            self._record_applied(run_id, decided, outcome)
        return outcome

    def _decided(self, review_id: int, source: OutcomeSource | AuditLog | None) -> ReviewOutcome:
        """The outcome of review ``review_id`` where ``source`` keeps it."""
        if source is None or isinstance(source, AuditLog):
            log = source if source is not None else self.audit
            return review_outcome(log.review(review_id), review_log_id(log.db_id))
        return source.review_outcome(review_id)

    def _decided_outcome(self, decided: ReviewOutcome) -> Outcome:
        """``answer``: delivered, with the approved answer; ``unanswerable``: abstained, with the note."""
        record = decided.record or {}
        chunks = record.get("chunks")
        chunk_ids = [c.get("id") for c in chunks if isinstance(c, Mapping)] if isinstance(chunks, list) else []
        who = f"review {decided.review_id}, by {', '.join(decided.decided_by) or 'a reviewer'}"
        delivered = decided.decision == "answer"
        note = f": {decided.note}" if decided.note else ""
        if delivered:
            reason = f"a person {'wrote' if decided.answer_from == 'reviewers' else 'approved'} the answer ({who})"
        else:
            reason = f"a person decided no context will answer it ({who}){note}"
        return Outcome(
            id=decided.item_id,
            kind="delivered" if delivered else "abstained",
            reason=reason,
            rounds=0,
            gap=[] if delivered else list(decided.gap),
            answer=decided.answer if delivered else None,
            chunk_ids=chunk_ids,
        )

    def _refined(self, run_id: str, decided: ReviewOutcome) -> Outcome:
        """The loop again for the reviewed record: first the reviewers' queries, added to the chunks they saw."""
        record = decided.record or {}
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            reason = f"review {decided.review_id} asks to refine retrieval, but holds no question to retrieve for"
            gap = list(decided.gap)
            return self._review(run_id, None, reason, gap, None, None, rule="input_error", item_id=decided.item_id)
        chunks = record.get("chunks")
        given: dict[str, Any] = {
            "id": decided.item_id,
            "question": question,
            # As queued (review_record): a field with no value is left out, as a record without it reads.
            "chunks": [
                {k: v for k, v in c.items() if v is not None} if isinstance(c, Mapping) else c
                for c in (chunks if isinstance(chunks, list) else [])
            ],
        }
        if isinstance(record.get("response"), str):
            given["response"] = record["response"]
        try:
            state = self._open(0, given)
        except InputError as exc:
            reason = f"review {decided.review_id}: input error: {exc}"
            return self._review(run_id, None, reason, [], None, None, rule="input_error", item_id=decided.item_id)
        state.gap = list(decided.gap)
        state.queries = list(decided.queries or decided.gap) or [question]
        self._retrieve([state], {id(state): state.queries}, round=1)
        if state.failure is not None:
            return self._failed(run_id, state)
        if state.trace[-1].new_chunks == 0:
            return self._abstain(run_id, state, "the reviewers' retrieval found nothing new")
        if self.generator is not None and self.gate.needs_response:
            self._generate([state], round=1)  # new evidence: a new answer, as after any re-retrieval
            if state.failure is not None:
                return self._failed(run_id, state)
        outcomes: list[Outcome | None] = [None]
        self._loop(run_id, [state], outcomes)
        assert outcomes[0] is not None, "the loop ends the question"
        return outcomes[0]

    def _record_applied(self, run_id: str, decided: ReviewOutcome, outcome: Outcome) -> None:
        """The audit row of a decision applied: who decided what on which review (``verdict``: a person's), the
        route it took, and the outcome given (``raw_output``), which a second resume returns as it is."""
        question = (decided.record or {}).get("question")
        self.audit.record(
            run_id=run_id,
            item_id=decided.item_id,
            gate=decided.gate or self.gate.name,
            query_hash=sha256_text(question) if isinstance(question, str) else None,
            decision=_APPLIED_ROUTES[str(decided.decision)],
            rule=APPLIED_RULE,
            verdict=decided.model_dump(exclude=_NOT_APPLIED),
            raw_output=outcome.model_dump_json(),
        )


def _returned_ids(chunks: Sequence[RawChunk]) -> list[Any]:
    """The ids of the chunks a retriever returned, as it gave them (``None`` for a chunk without one)."""
    if isinstance(chunks, (str, bytes, Mapping)) or not isinstance(chunks, Sequence):
        return []
    return [c.id if isinstance(c, Chunk) else c.get("id") if isinstance(c, Mapping) else None for c in chunks]


def _rounds(trace: Sequence[RoundTrace]) -> int:
    """Gate evaluations in a trace (retrieval and rewrite steps are traced too)."""
    return sum(1 for t in trace if t.route not in _STEPS)


def _last_seq(state: _Open) -> int | None:
    """The audit row of the question's last gate evaluation (for its review entry)."""
    return next((t.audit_seq for t in reversed(state.trace) if t.audit_seq is not None), None)
