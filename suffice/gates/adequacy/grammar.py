"""The adequacy verdict (context adequacy evaluation against a rubric) and its constraint.

The model writes the seed's exact schema: a decision and score of its own, five
scored dimensions with assessments, missing information, a recommendation and a
rationale.  Every score is a number in [0, 1] with at most two decimals, every
string and list is bounded.  Nothing depends on the request, so one compiled
form serves every item.  The decision that routes is computed in code
(:mod:`suffice.gates.adequacy.decision`) and stored beside the model's own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import UNIT_INTERVAL, Rx, alt, json_list, json_members, json_object, json_string, lit, seq
from suffice.grammars.routes import Route

DIMENSIONS = (
    "factual_coverage",
    "temporal_relevance",
    "source_authority",
    "entity_completeness",
    "rubric_alignment",
)
RECOMMENDATIONS = ("PROCEED_WITH_ANSWER", "RETRIEVE_MORE", "ESCALATE_TO_HUMAN", "FLAG_AS_UNANSWERABLE")


class AdequacyBounds:
    ASSESSMENT_CHARS = 100
    MISSING_MAX = 3
    MISSING_CHARS = 64
    RATIONALE_CHARS = 200


B = AdequacyBounds


DECISION_KEY = '{"adequacy_decision":'
#: Prefilled, not decoded, each ending where the tokenizer's own split of a verdict
#: has a boundary (SmolLM2: ``decision`` | ``":"`` | ``P``; ``PASS`` | ``","``): the
#: decision's key up to its closing quote, and from the value's closing quote to the score.
DECISION_PREFIX = DECISION_KEY[:-2]
REST_PREFIX = '","adequacy_score":'


def _rest() -> Rx:
    """Everything after ``"PASS"`` / ``"FAIL"``."""
    return lit(REST_PREFIX[1:]) + _rest_body()


def _rest_body() -> Rx:
    """The verdict after :data:`REST_PREFIX`: the score on."""
    dimension = json_object([("score", UNIT_INTERVAL), ("assessment", json_string(1, B.ASSESSMENT_CHARS))])
    return seq(
        UNIT_INTERVAL,
        lit(","),
        json_members(
            [
                ("dimensions", json_object([(d, dimension) for d in DIMENSIONS])),
                ("missing_information", json_list(json_string(1, B.MISSING_CHARS), 0, B.MISSING_MAX)),
                ("recommendation", alt(*[lit(f'"{r}"') for r in RECOMMENDATIONS])),
                ("rationale", json_string(1, B.RATIONALE_CHARS)),
            ]
        ),
        lit("}"),
    )


_DECISION = alt(lit('"PASS"'), lit('"FAIL"'))


@lru_cache(maxsize=1)
def adequacy_constraint() -> Constraint:
    """Two segments, neither depending on the request: the decision alone (the only
    one with log-probabilities; the key before it prefilled), then the rest (its
    opening key prefilled)."""
    values = alt(lit("PASS"), lit("FAIL"))
    decision = Segment.from_rx(
        lit(DECISION_KEY[-2:] + '"') + values, key="adequacy/decision", logprobs=True, prefix=DECISION_PREFIX
    )
    rest = Segment.from_rx(_rest_body(), key="adequacy/rest", prefix=REST_PREFIX)

    def continuation(text: str) -> Segment | None:
        if text in (DECISION_KEY + '"PASS', DECISION_KEY + '"FAIL'):
            return rest
        return None

    coarse = Segment.from_rx(seq(_DECISION, _rest()), key="adequacy/whole", logprobs=True, prefix=DECISION_KEY)
    rx = seq(lit(DECISION_KEY), _DECISION, _rest())
    return Constraint.from_rx(rx, key="adequacy", head=decision, continuation=continuation, coarse_head=coarse)


class Dimension(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float = Field(ge=0.0, le=1.0)
    assessment: str = Field(min_length=1, max_length=B.ASSESSMENT_CHARS)


class Dimensions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    factual_coverage: Dimension
    temporal_relevance: Dimension
    source_authority: Dimension
    entity_completeness: Dimension
    rubric_alignment: Dimension

    def scores(self) -> dict[str, float]:
        return {d: getattr(self, d).score for d in DIMENSIONS}


Recommendation = Literal["PROCEED_WITH_ANSWER", "RETRIEVE_MORE", "ESCALATE_TO_HUMAN", "FLAG_AS_UNANSWERABLE"]


class AdequacyOutput(BaseModel):
    """The generated form: the seed's output schema, field for field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    adequacy_decision: Literal["PASS", "FAIL"]
    adequacy_score: float = Field(ge=0.0, le=1.0)
    dimensions: Dimensions
    missing_information: list[str] = Field(max_length=B.MISSING_MAX)
    recommendation: Recommendation
    rationale: str = Field(min_length=1, max_length=B.RATIONALE_CHARS)


class AdequacyDecision(BaseModel):
    """Computed in code from the dimension scores and the rubric; this one routes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Literal["PASS", "FAIL"]
    composite_score: float
    threshold: float
    failed_critical: dict[str, float] = Field(default_factory=dict)
    conservative_vetoes: list[str] = Field(default_factory=list)
    route: Route
    reason: str
    agrees_with_model: bool


class AdequacyVerdict(AdequacyOutput):
    """The model's opinion (the seed's fields) plus the computed decision."""

    rubric: str
    risk_level: Literal["HIGH", "MEDIUM", "LOW"]
    prompt_version: str
    truncated_chunk_ids: list[int | str] = Field(default_factory=list)
    omitted_chunk_ids: list[int | str] = Field(default_factory=list)
    question_truncated: bool = False
    decision: AdequacyDecision
    #: P(the model's adequacy_decision = PASS) from the engine's log-probabilities.
    p_model_pass: float | None = Field(default=None, ge=0.0, le=1.0)

    def to_seed(self) -> dict[str, Any]:
        """The seed's output schema alone (the model's opinion, not the computed decision)."""
        return AdequacyOutput.model_validate(self.model_dump(include=set(AdequacyOutput.model_fields))).model_dump(
            mode="json"
        )
