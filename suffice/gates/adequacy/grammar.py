"""The adequacy verdict (context adequacy evaluation against a rubric) and its constraint.

The model writes the seed's exact schema: a decision and score of its own, the
rubric's scored dimensions with assessments (the seed's five unless the rubric
names its own), missing information, a recommendation and a rationale.  Every
score is a number in [0, 1] with at most two decimals, every string and list is
bounded.  Only the dimension names depend on the request (on its rubric), so one
compiled form serves every item whose rubric scores the same dimensions.  The decision that routes is computed in code
(:mod:`suffice.gates.adequacy.decision`) and stored beside the model's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from suffice.gates.base import REASONING_CHARS, REASONING_CHARS_RANGE
from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import UNIT_INTERVAL, Rx, alt, json_list, json_members, json_object, json_string, lit, seq
from suffice.grammars.routes import Route

DIMENSIONS = ("factual_coverage", "temporal_relevance", "source_authority", "entity_completeness", "rubric_alignment")
#: A rubric's own dimension names: lower-case letters and ``_``, 2 to 8 of them.
DIMENSION_NAME = re.compile(r"^[a-z_]{1,40}$")
MIN_DIMENSIONS = 2
MAX_DIMENSIONS = 8


def check_dimension_names(names: Sequence[str]) -> None:
    """Raise :class:`ValueError` unless ``names`` are 2 to 8 distinct names of lower-case letters and ``_``."""
    if not MIN_DIMENSIONS <= len(names) <= MAX_DIMENSIONS:
        raise ValueError(f"must name {MIN_DIMENSIONS} to {MAX_DIMENSIONS} dimensions, got {len(names)}")
    bad = [n for n in names if not DIMENSION_NAME.match(n) or n.strip("_") == ""]
    if bad:
        raise ValueError(f"dimension names are lower-case letters and '_' (at most 40), not {bad}")
    if len(set(names)) != len(names):
        raise ValueError("dimension names must be distinct")


RECOMMENDATIONS = ("PROCEED_WITH_ANSWER", "RETRIEVE_MORE", "ESCALATE_TO_HUMAN", "FLAG_AS_UNANSWERABLE")


class AdequacyBounds:
    ASSESSMENT_CHARS = 100
    MISSING_MAX = 3
    MISSING_CHARS = 64
    #: The rationale's default bound: the gate's ``reasoning_chars`` option sets it.
    RATIONALE_CHARS = REASONING_CHARS
    RATIONALE_RANGE = REASONING_CHARS_RANGE

    @classmethod
    def for_prompt(cls, rationale_chars: int = RATIONALE_CHARS) -> dict[str, int]:
        """The bounds by the names the templates use, the rationale's as set."""
        return {
            "ASSESSMENT_CHARS": cls.ASSESSMENT_CHARS,
            "MISSING_MAX": cls.MISSING_MAX,
            "MISSING_CHARS": cls.MISSING_CHARS,
            "RATIONALE_CHARS": rationale_chars,
        }


B = AdequacyBounds


DECISION_KEY = '{"adequacy_decision":'
#: Prefilled, not decoded, each ending where the tokenizer's own split of a verdict
#: has a boundary (SmolLM2: ``decision`` | ``":"`` | ``P``; ``PASS`` | ``","``): the
#: decision's key up to its closing quote, and from the value's closing quote to the score.
DECISION_PREFIX = DECISION_KEY[:-2]
REST_PREFIX = '","adequacy_score":'


def _rest(dimensions: tuple[str, ...], rationale_chars: int) -> Rx:
    """Everything after ``"PASS"`` / ``"FAIL"``."""
    return lit(REST_PREFIX[1:]) + _rest_body(dimensions, rationale_chars)


def _rest_body(dimensions: tuple[str, ...], rationale_chars: int) -> Rx:
    """The verdict after :data:`REST_PREFIX`: the score on, with exactly ``dimensions``."""
    dimension = json_object([("score", UNIT_INTERVAL), ("assessment", json_string(1, B.ASSESSMENT_CHARS))])
    return seq(
        UNIT_INTERVAL,
        lit(","),
        json_members(
            [
                ("dimensions", json_object([(d, dimension) for d in dimensions])),
                ("missing_information", json_list(json_string(1, B.MISSING_CHARS), 0, B.MISSING_MAX)),
                ("recommendation", alt(*[lit(f'"{r}"') for r in RECOMMENDATIONS])),
                ("rationale", json_string(1, rationale_chars)),
            ]
        ),
        lit("}"),
    )


_DECISION = alt(lit('"PASS"'), lit('"FAIL"'))


def adequacy_constraint(dimensions: Sequence[str] = DIMENSIONS, rationale_chars: int = B.RATIONALE_CHARS) -> Constraint:
    """Two segments: the decision alone (the only one with log-probabilities; the key
    before it prefilled), then the rest (its opening key prefilled), which scores
    exactly ``dimensions`` in their order and bounds the rationale at ``rationale_chars``.
    Keyed by the dimension names and a rationale bound other than the default: rubrics
    scoring the same dimensions share one compiled form (the seed's five keep the
    keys they always had)."""
    return _constraint(tuple(dimensions), rationale_chars)


@lru_cache(maxsize=32)
def _constraint(dimensions: tuple[str, ...], rationale_chars: int) -> Constraint:
    check_dimension_names(dimensions)
    lo, hi = B.RATIONALE_RANGE
    if not lo <= rationale_chars <= hi:
        raise ValueError(f"reasoning_chars must be between {lo} and {hi}, got {rationale_chars}")
    suffix = "" if dimensions == DIMENSIONS else "/" + ",".join(dimensions)
    if rationale_chars != B.RATIONALE_CHARS:
        suffix += f"/r{rationale_chars}"
    values = alt(lit("PASS"), lit("FAIL"))
    decision = Segment.from_rx(
        lit(DECISION_KEY[-2:] + '"') + values, key="adequacy/decision", logprobs=True, prefix=DECISION_PREFIX
    )
    rest = Segment.from_rx(_rest_body(dimensions, rationale_chars), key="adequacy/rest" + suffix, prefix=REST_PREFIX)

    def continuation(text: str) -> Segment | None:
        if text in (DECISION_KEY + '"PASS', DECISION_KEY + '"FAIL'):
            return rest
        return None

    coarse = Segment.from_rx(
        seq(_DECISION, _rest(dimensions, rationale_chars)),
        key="adequacy/whole" + suffix,
        logprobs=True,
        prefix=DECISION_KEY,
    )
    rx = seq(lit(DECISION_KEY), _DECISION, _rest(dimensions, rationale_chars))
    return Constraint.from_rx(
        rx,
        key="adequacy" + suffix,
        head=decision,
        continuation=continuation,
        coarse_head=coarse,
        # The decision, then the rest: nothing else follows.
        completion_bound=decision.max_tokens + rest.max_tokens,
    )


class Dimension(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float = Field(ge=0.0, le=1.0)
    assessment: str = Field(min_length=1, max_length=B.ASSESSMENT_CHARS)


Recommendation = Literal["PROCEED_WITH_ANSWER", "RETRIEVE_MORE", "ESCALATE_TO_HUMAN", "FLAG_AS_UNANSWERABLE"]


class AdequacyOutput(BaseModel):
    """The generated form: the seed's output schema, field for field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    adequacy_decision: Literal["PASS", "FAIL"]
    adequacy_score: float = Field(ge=0.0, le=1.0)
    #: The rubric's dimensions by name (the seed's five unless the rubric names its own);
    #: that they are exactly the rubric's is checked against it when parsed.
    dimensions: dict[str, Dimension]
    missing_information: list[str] = Field(max_length=B.MISSING_MAX)
    recommendation: Recommendation
    #: At most the gate's ``reasoning_chars`` (checked by the gate; this is the option's largest value).
    rationale: str = Field(min_length=1, max_length=B.RATIONALE_RANGE[1])

    @field_validator("dimensions")
    @classmethod
    def _dimension_names(cls, value: dict[str, Dimension]) -> dict[str, Dimension]:
        check_dimension_names(list(value))
        return value

    def scores(self) -> dict[str, float]:
        """Each dimension's score, in the order written."""
        return {d: dim.score for d, dim in self.dimensions.items()}


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
    #: Dimensions under their minimum (the seed's "all rubric criteria met"), with their scores.
    below_minimum: dict[str, float] = Field(default_factory=dict)
    #: For a ``human_review`` route: the rule that sent it (see :data:`suffice.grammars.routes.REVIEW_RULES`).
    rule: str | None = None
    #: The model's ESCALATE_TO_HUMAN or FLAG_AS_UNANSWERABLE that a rubric's ``trust_computed_pass`` overrode.
    overrode_recommendation: str | None = None


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
