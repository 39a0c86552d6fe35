"""One result per input item: a verdict or an error, plus what produced it; and the results stream, where each judged
batch is published once to everything that counts results (the judge's statistics, a batch run's summary, the
service's ``/metrics``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

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


class JudgeResult(BaseModel):
    """Exactly one of ``verdict`` and ``error`` is set."""

    model_config = ConfigDict(frozen=True)

    id: str | None
    gate: str
    verdict: SerializeAsAny[BaseModel] | None = None
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

    def unsubscribe(self, observer: ResultsObserver) -> None:
        with self._lock:
            self._observers = tuple(o for o in self._observers if o is not observer)

    @property
    def observers(self) -> tuple[ResultsObserver, ...]:
        return self._observers

    def publish(self, judged: Judged) -> None:
        for observer in self._observers:  # a tuple replaced, never changed: no lock held while observers count
            observer.on_judged(judged)
