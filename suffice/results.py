"""One result per input item: a verdict or an error, plus what produced it."""

from __future__ import annotations

from typing import Literal

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

    @property
    def ok(self) -> bool:
        return self.error is None
