"""The decision-only verdict (``--detail decision``) and its constraint.

For batch scoring of millions of traces, what is needed per trace is a calibrated
number, not prose: the model writes only ``{"<key>":<value>}`` (one short
constrained step, a handful of tokens after the prompt), and the probability of
each value comes from the log-probabilities at that position.  The prompt still
carries the gate's full instructions, so prefill dominates the cost.
"""

from __future__ import annotations

import json
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import alt, lit, seq


class DecisionVerdict(BaseModel):
    """Only the decision, whether it says "enough evidence", and its probability."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    detail: str = "decision"
    #: The value as the gate writes it: ``true``, ``"SUFFICIENT"``, ``"PASS"``...
    decision: str
    #: Whether the decision says "enough evidence" (the gate's positive value).
    positive: bool
    #: P(positive) from the engine's log-probabilities, when it reports them.
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    probabilities: dict[str, float] | None = None
    prompt_version: str
    truncated_chunk_ids: list[int | str] = Field(default_factory=list)
    omitted_chunk_ids: list[int | str] = Field(default_factory=list)
    question_truncated: bool = False
    response_truncated: bool = False
    model_called: bool = True
    #: Whether the record is judged under high stakes (its gate's ``high_stakes``): there a negative decision may
    #: be one the full verdict sends to a person, so it goes to one (or to the full verdict under ``auto``).
    high_stakes: bool = False

    def to_seed(self) -> dict[str, object]:
        """The decision alone, in the seed's key."""
        return {"decision": json.loads(self.decision), "probability": self.probability}


def decision_marker(key: str) -> str:
    return json.dumps(key) + ":"


@lru_cache(maxsize=16)
def decision_constraint(key: str, values: tuple[str, ...]) -> Constraint:
    """``{"key":v}`` for one of ``values`` (JSON texts): the same for every request.
    One segment; ``{"key`` is prefilled, so only ``":``, the value and ``}`` are
    decoded (the tokenizer writes ``":`` or ``":"`` as one token: the prefix stops
    before it, so the model continues a split it knows)."""
    opening = "{" + decision_marker(key)
    value = seq(alt(*[lit(v) for v in values]), lit("}"))
    head = Segment.from_rx(lit(opening[-2:]) + value, key=f"decision/{key}", logprobs=True, prefix=opening[:-2])
    return Constraint.from_rx(lit(opening) + value, key=f"decision/{key}", head=head)


def decision_format(key: str, values: tuple[str, ...]) -> str:
    """How the prompt shows the allowed outputs, e.g. ``{"is_sufficient": true} or {...}``."""
    return " or ".join("{" + json.dumps(key) + ": " + v + "}" for v in values)
