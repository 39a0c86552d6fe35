"""One result per input item: a verdict or an error, plus what produced it; the results stream, where each judged
batch is published once to everything that counts results; and :class:`Tally`, the one rule they are counted by (the
judge's statistics, a batch run's summary and the service's ``/metrics`` are views of tallies); and what a person
decided on a review, as the application that sent the record reads it (:class:`ReviewOutcome`, :class:`ReviewEvents`:
the service answers them, the client reads them, ``Pipeline.resume`` acts on them)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny
from typing_extensions import TypeVar

from suffice.exceptions import ItemError, VerdictError


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: str
    message: str
    field: str | None = None
    raw_text: str | None = None
    #: False when the engine, not the record, may be at fault: a resumed run judges it again.
    final: bool = True

    @classmethod
    def from_exception(cls, exc: ItemError) -> ErrorInfo:
        raw = exc.raw_text if isinstance(exc, VerdictError) else None
        return cls(type=type(exc).__name__, message=str(exc), field=exc.field, raw_text=raw, final=exc.final)


#: The most characters of a failed output an attempt keeps: a runaway output (cut off at ``max_tokens``) would
#: otherwise put the whole completion budget into every row; the head shows how it went wrong.
ATTEMPT_TEXT_CHARS = 4000
#: The most characters of a failed output's error message an attempt keeps: a validation error lists every field
#: at fault, quoting the output (the sufficiency verdict's, every field missing: 1,500).
ATTEMPT_ERROR_CHARS = 2000


class FailedAttempt(BaseModel):
    """One generation whose output failed validation: what the model wrote and why it was refused.  A result
    carries one per failed output behind it, in the order generated (see :attr:`JudgeResult.attempts`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    message: str
    #: The output, its first :data:`ATTEMPT_TEXT_CHARS` characters (``None``: the error held none).
    raw_text: str | None = None
    #: The output's whole length in characters: more than ``len(raw_text)`` when it was cut.
    raw_chars: int = 0

    @classmethod
    def from_exception(cls, exc: ItemError) -> FailedAttempt:
        raw = exc.raw_text if isinstance(exc, VerdictError) else None
        message = str(exc)
        if len(message) > ATTEMPT_ERROR_CHARS:
            # suffice's own text: marked where cut.  The output below is the model's, cut unmarked (a mark would
            # read as the model's): raw_chars says how long it was.
            message = message[:ATTEMPT_ERROR_CHARS] + "…"
        return cls(
            type=type(exc).__name__,
            message=message,
            raw_text=raw[:ATTEMPT_TEXT_CHARS] if raw is not None else None,
            raw_chars=len(raw) if raw is not None else 0,
        )


class TokenCounts(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt: int = 0
    completion: int = 0


class CacheHit(BaseModel):
    """A result the verdict cache returned (:mod:`suffice.cache`): identical to the one first judged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: When the verdict was first judged (UTC, ISO 8601, seconds).
    first_judged: str


class Cascade(BaseModel):
    """How ``detail="auto"`` judged a record: the decision pass's answer, and whether a full verdict followed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: ``decision``: the decision-only verdict stands; ``full``: the row's verdict is the full one.
    detail: Literal["decision", "full"]
    #: Why a full verdict followed (``not deliver``, ``within margin``, ``no probability``); ``None`` when none did.
    reason: str | None = None
    #: The decision pass's probability of the positive decision (``None``: the engine reported none).
    probability: float | None = None
    #: The margin around the decision threshold the record was judged under.
    margin: float


#: The verdict class of a result: a gate's (:mod:`suffice.verdicts`).  ``Any`` where the judge cannot know it (a gate
#: named by a string), so that ``r.verdict.is_sufficient`` type-checks; ``JudgeResult[SufficiencyVerdict]`` checks it.
V = TypeVar("V", bound=BaseModel, default=Any)


class JudgeResult(BaseModel, Generic[V]):
    """Exactly one of ``verdict`` and ``error`` is set."""

    model_config = ConfigDict(frozen=True)

    id: str | None
    gate: str
    verdict: SerializeAsAny[V] | None = None
    error: ErrorInfo | None = None
    model: str
    backend: str
    prompt_version: str
    tokens: TokenCounts = TokenCounts()
    retries: int = 0
    #: The model's text behind the verdict (None when the model was not called).
    raw_text: str | None = None
    #: The fence token of the verdict's prompt (None when the model was not called): a replay of the
    #: prompt needs it, and the audit log keeps it; never dumped (an output row, a served answer).
    fence: str | None = Field(default=None, exclude=True)
    #: Set when the verdict cache returned this result instead of the engine.
    cached: CacheHit | None = None
    #: Set under ``detail="auto"``: which detail the verdict is, and why.
    cascade: Cascade | None = None
    #: Every output behind this result that failed validation, in order (the one a retry followed, and for an error
    #: result the retry's own too): the audit log keeps them; never dumped (an output row's and a served answer's
    #: columns are fixed, and ``retries`` counts them there).
    attempts: tuple[FailedAttempt, ...] = Field(default=(), exclude=True)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Judged:
    """One judged batch as the results stream publishes it: the records, one result each in their order, the seconds
    they took, and the gate that judged them (it routes each verdict; ``None``: not known to the publisher)."""

    records: Sequence[object]
    results: Sequence[JudgeResult]
    seconds: float = 0.0
    #: A ``suffice.gates.Gate`` (typed loosely: the gates sit above this module).
    gate: Any = None
    #: The name the results are counted under (the gate asked for).
    name: str = ""


class ResultsObserver(Protocol):
    """What counts results: told each judged batch once, on the thread that judged it (so it counts under a lock
    of its own where batches are judged at once)."""

    def on_judged(self, judged: Judged) -> None: ...


class ResultsStream:
    """The one place a judge, a batch run or the service publishes its results; every observer subscribed hears each
    batch once, in the order subscribed."""

    def __init__(self, observers: Iterable[ResultsObserver] = ()) -> None:
        self._observers: tuple[ResultsObserver, ...] = tuple(observers)
        self._lock = threading.Lock()

    def subscribe(self, observer: ResultsObserver) -> None:
        with self._lock:
            if not any(o is observer for o in self._observers):
                self._observers = (*self._observers, observer)

    @property
    def observers(self) -> tuple[ResultsObserver, ...]:
        return self._observers

    def publish(self, judged: Judged) -> None:
        for observer in self._observers:  # a tuple replaced, never changed: no lock held while observers count
            observer.on_judged(judged)


@dataclass
class OutputTokens:
    """Completion tokens per verdict the model generated (a verdict made without the model decodes nothing and is
    not counted): how many verdicts took each count, and from them how many, their mean and their largest."""

    counts: Counter[int] = field(default_factory=Counter)

    def add(self, completion: int) -> None:
        if completion > 0:
            self.counts[completion] += 1

    @property
    def verdicts(self) -> int:
        return self.counts.total()

    @property
    def total(self) -> int:
        return sum(n * k for n, k in self.counts.items())

    @property
    def mean(self) -> float | None:
        return self.total / self.verdicts if self.counts else None

    @property
    def max(self) -> int | None:
        return max(self.counts, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {"verdicts": self.verdicts, "mean": self.mean, "max": self.max}


@dataclass
class Tally:
    """Results counted by the one rule every count of them follows, a :class:`ResultsObserver`.

    A cache hit counts no tokens (the engine did no work for it; its first judging counted them), and a verdict's
    output tokens count when the model generated it.  A verdict counts by its route where it has one (a verdict sent
    to a person is not "sufficient"), else by ``positive``; where the model has a decision of its own
    (``model_positive``) and the counted one differs, the code's decision overrode the model's.  ``positive``,
    ``route`` and ``model_positive`` are the batch's gate's (``Judged.gate``) unless given here."""

    positive: Callable[[BaseModel], bool] | None = field(default=None, repr=False, compare=False)
    route: Callable[[BaseModel], str | None] | None = field(default=None, repr=False, compare=False)
    model_positive: Callable[[BaseModel], bool | None] | None = field(default=None, repr=False, compare=False)
    items: int = 0
    verdicts: int = 0
    errors: int = 0
    error_types: dict[str, int] = field(default_factory=dict)
    #: Verdicts the verdict cache returned (no engine work).
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Completion tokens of each verdict the model generated.
    output_tokens: OutputTokens = field(default_factory=OutputTokens)
    #: Verdicts counted "sufficient" (or PASS), and by the route they took.
    sufficient: int = 0
    routes: dict[str, int] = field(default_factory=dict)
    #: Verdicts with a model decision of their own, and those whose counted decision differs from it.
    model_decided: int = 0
    overrides: int = 0
    #: Verdicts of records labeled ``sufficient``, and those whose decision agrees with the label.
    labeled: int = 0
    agree: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def on_judged(self, judged: Judged) -> None:
        """Count each result with its record, under a lock (batches may be judged on several threads at once)."""
        gate = judged.gate
        positive = self.positive or getattr(gate, "is_positive", None)
        route = self.route or (None if gate is None else lambda verdict: gate.route(verdict).route)
        model_positive = self.model_positive or getattr(gate, "model_positive", None)
        with self._lock:
            for record, result in zip(judged.records, judged.results, strict=True):
                self.items += 1
                hit = result.cached is not None
                self.cache_hits += hit
                if not hit:
                    self.prompt_tokens += result.tokens.prompt
                    self.completion_tokens += result.tokens.completion
                if result.verdict is None:
                    kind = result.error.type if result.error is not None else "unknown"
                    self.errors += 1
                    self.error_types[kind] = self.error_types.get(kind, 0) + 1
                    continue
                self.verdicts += 1
                if not hit:
                    self.output_tokens.add(result.tokens.completion)
                try:
                    where = route(result.verdict) if route is not None else None
                    decision = where == "deliver" if where is not None else bool(positive and positive(result.verdict))
                    model = model_positive(result.verdict) if model_positive is not None else None
                except TypeError:  # a plug-in gate that routes no such verdict: counted nowhere, as telemetry does
                    continue
                self.sufficient += decision
                if where is not None:
                    self.routes[where] = self.routes.get(where, 0) + 1
                if model is not None:
                    self.model_decided += 1
                    self.overrides += model != decision
                label = record.get("sufficient") if isinstance(record, Mapping) else None
                if isinstance(label, bool):
                    self.labeled += 1
                    self.agree += decision == label


@dataclass
class JudgeStats(Tally):
    """Counters over the judge's lifetime; retries should stay at zero under a constraint.

    The results are counted off the judge's results stream (a :class:`~suffice.results.Tally`, once per record);
    the work a result does not show (retries, failed retries, cut-offs) by the judge as it does it, with :meth:`add`.
    """

    retries: int = 0
    retry_failures: int = 0
    length_cutoffs: int = 0

    def add(self, counter: str, n: int = 1) -> None:
        """Count under a lock: ``judge_batch`` may run on several threads at once."""
        with self._lock:
            setattr(self, counter, getattr(self, counter) + n)


#: The longest ``wait`` of ``GET /v1/reviews/events``, in seconds: a long poll holds a connection, never for long.
MAX_EVENTS_WAIT_S = 30.0
#: The most events one answer of ``GET /v1/reviews/events`` holds; ``next`` continues past them.
MAX_EVENTS = 100
#: A reviewer's decision fields (:meth:`~suffice.audit.AuditLog.resolve_review`): the longest ``answer``, in
#: characters; the most ``queries`` and the longest query.  A decision with all of them and a note still fits the
#: review routes' body limit (``suffice.server.reviews.REVIEW_BODY_BYTES``).
MAX_ANSWER_CHARS = 10_000
MAX_QUERIES = 10
MAX_QUERY_CHARS = 500

Decision = Literal["answer", "refine_retrieval", "unanswerable"]
ReviewState = Literal["open", "awaiting", "disputed", "resolved"]
#: Where an outcome's ``answer`` came from: the reviewers wrote it, the response under review, its verdict's answer.
AnswerFrom = Literal["reviewers", "response", "verdict"]
#: Where an outcome's ``queries`` came from: the reviewers' queries field, or their notes (one query a line).
QueriesFrom = Literal["reviewers", "notes"]


class ReviewOutcome(BaseModel):
    """A review's outcome: pending (``decided`` false: open, awaiting a further reviewer, or disputed) or the
    decision the reviewers agreed on, with who and when.

    What each decision hands the application: ``answer`` the answer to deliver (the one the reviewers wrote, else the
    response under review, else the answer its verdict wrote: ``answer_from`` says which); ``queries`` for
    ``refine_retrieval``, what to search (the reviewers' queries, else their notes' lines: ``queries_from``);
    ``note`` the reviewers' notes (an ``unanswerable`` abstention shows it).  ``record`` is the record as queued
    (question, response, chunks): what the application sent, which a re-retrieval starts from."""

    model_config = ConfigDict(frozen=True)

    review_id: int
    #: Which review queue: a review id is unique within one audit log only (a digest of its database id).
    log_id: str
    state: ReviewState
    decided: bool
    item_id: str | None = None
    #: The request (``suffice serve``: its ``X-Request-ID``) or harness run that queued it.
    run_id: str | None = None
    gate: str | None = None
    #: The rule that sent it to a person (``suffice.grammars.routes.REVIEW_RULES``).
    rule: str | None = None
    decision: Decision | None = None
    label: Literal["sufficient", "insufficient"] | None = None
    #: The reviewers who agree (two or more where the review needed them).
    decided_by: list[str] = Field(default_factory=list)
    decided_at: str | None = None
    note: str | None = None
    answer: str | None = None
    answer_from: AnswerFrom | None = None
    queries: list[str] = Field(default_factory=list)
    queries_from: QueriesFrom | None = None
    #: What the gate said was missing, as queued.
    gap: list[str] = Field(default_factory=list)
    record: dict[str, Any] | None = None


class ReviewEvent(BaseModel):
    """One review decided: ``cursor`` orders the events (pass the last one seen as ``since``)."""

    model_config = ConfigDict(frozen=True)

    cursor: int
    review_id: int
    item_id: str | None = None
    run_id: str | None = None
    gate: str | None = None
    rule: str | None = None
    decision: Decision
    label: Literal["sufficient", "insufficient"] | None = None
    decided_by: list[str] = Field(default_factory=list)
    decided_at: str | None = None


class ReviewEvents(BaseModel):
    """The reviews decided after ``since``, oldest first, at most :data:`MAX_EVENTS`; ``next`` is the ``since`` of
    the following call (past every event looked at, so a call that found none moves on too)."""

    model_config = ConfigDict(frozen=True)

    log_id: str
    events: list[ReviewEvent]
    next: int
