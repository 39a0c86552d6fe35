"""The adequacy verdict (context adequacy evaluation against a rubric) and its constraint.

The model writes the seed's schema: a decision and score of its own, then each of
the rubric's criteria scored and assessed (numbered 1 to n, in the rubric's order),
the rubric's scored dimensions with assessments (the seed's five unless the rubric
names its own), missing information, a recommendation and a rationale.  Every
score is a number in [0, 1] with at most two decimals, every string and list is
bounded.  Only the dimension names and the number of criteria depend on the request
(on its rubric), so one compiled form serves every item whose rubric scores the same
dimensions and has as many criteria.  The decision that routes is computed in code
(:mod:`suffice.gates.adequacy.decision`) and stored beside the model's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal, get_args

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
#: The most criteria a rubric may list: each is scored and assessed in every verdict, so each adds to the
#: output's worst case (the window every prompt must leave) and to the compiled pattern.
MAX_CRITERIA = 8


def check_dimension_names(names: Sequence[str]) -> None:
    """Raise :class:`ValueError` unless ``names`` are 2 to 8 distinct names of lower-case letters and ``_``."""
    if not MIN_DIMENSIONS <= len(names) <= MAX_DIMENSIONS:
        raise ValueError(f"must name {MIN_DIMENSIONS} to {MAX_DIMENSIONS} dimensions, got {len(names)}")
    bad = [n for n in names if not DIMENSION_NAME.match(n) or n.strip("_") == ""]
    if bad:
        raise ValueError(f"dimension names are lower-case letters and '_' (at most 40), not {bad}")
    if len(set(names)) != len(names):
        raise ValueError("dimension names must be distinct")


Recommendation = Literal["PROCEED_WITH_ANSWER", "RETRIEVE_MORE", "ESCALATE_TO_HUMAN", "FLAG_AS_UNANSWERABLE"]


class AdequacyBounds:
    ASSESSMENT_CHARS = 100
    #: A criterion's assessment: shorter than a dimension's, as every criterion of the rubric gets one (four on
    #: the clinical rubric) and each of its characters may cost 3 tokens of the worst case the window must leave.
    CRITERION_ASSESSMENT_CHARS = 60
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
            "CRITERION_ASSESSMENT_CHARS": cls.CRITERION_ASSESSMENT_CHARS,
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


def _criteria(count: int) -> Rx:
    """Criteria 1 to ``count``, each number a literal: the model cannot skip, repeat, reorder or add one, only
    score and assess each."""
    entries = [
        json_object(
            [
                ("criterion", lit(str(number))),
                ("score", UNIT_INTERVAL),
                ("assessment", json_string(1, B.CRITERION_ASSESSMENT_CHARS)),
            ]
        )
        for number in range(1, count + 1)
    ]
    return seq(lit("["), entries[0], *[seq(lit(","), entry) for entry in entries[1:]], lit("]"))


def _rest_body(dimensions: tuple[str, ...], criteria: int, rationale_chars: int) -> Rx:
    """The verdict after :data:`REST_PREFIX`: the score on, with exactly ``criteria`` criteria and ``dimensions``.
    The criteria come before the dimensions: each is judged on its own before ``rubric_alignment`` sums them up."""
    dimension = json_object([("score", UNIT_INTERVAL), ("assessment", json_string(1, B.ASSESSMENT_CHARS))])
    return seq(
        UNIT_INTERVAL,
        lit(","),
        json_members(
            [
                ("criteria", _criteria(criteria)),
                ("dimensions", json_object([(d, dimension) for d in dimensions])),
                ("missing_information", json_list(json_string(1, B.MISSING_CHARS), 0, B.MISSING_MAX)),
                ("recommendation", alt(*[lit(f'"{r}"') for r in get_args(Recommendation)])),
                ("rationale", json_string(1, rationale_chars)),
            ]
        ),
        lit("}"),
    )


_DECISION = alt(lit('"PASS"'), lit('"FAIL"'))


def check_criteria_count(count: int) -> None:
    """Raise :class:`ValueError` unless a rubric of ``count`` criteria can be judged (1 to :data:`MAX_CRITERIA`)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_CRITERIA:
        raise ValueError(f"must list 1 to {MAX_CRITERIA} criteria, got {count!r}")


def adequacy_constraint(
    dimensions: Sequence[str] = DIMENSIONS, rationale_chars: int = B.RATIONALE_CHARS, *, criteria: int
) -> Constraint:
    """Two segments: the decision alone (the only one with log-probabilities; the key before it prefilled), then
    the rest (its opening key prefilled): criteria 1 to ``criteria`` in order, exactly ``dimensions`` in their order,
    the rationale bounded at ``rationale_chars``.  Keyed by the dimension names, the number of criteria and a
    rationale bound other than the default: rubrics scoring the same dimensions with as many criteria share one."""
    # Checked before the cache: ``True`` hashes as ``1`` and would find its form.
    check_criteria_count(criteria)
    return _constraint(tuple(dimensions), criteria, rationale_chars)


@lru_cache(maxsize=32)
def _constraint(dimensions: tuple[str, ...], criteria: int, rationale_chars: int) -> Constraint:
    check_dimension_names(dimensions)
    lo, hi = B.RATIONALE_RANGE
    if not lo <= rationale_chars <= hi:
        raise ValueError(f"reasoning_chars must be between {lo} and {hi}, got {rationale_chars}")
    suffix = ("" if dimensions == DIMENSIONS else "/" + ",".join(dimensions)) + f"/c{criteria}"
    suffix += "" if rationale_chars == B.RATIONALE_CHARS else f"/r{rationale_chars}"
    values = alt(lit("PASS"), lit("FAIL"))
    decision = Segment.from_rx(
        lit(DECISION_KEY[-2:] + '"') + values, key="adequacy/decision", logprobs=True, prefix=DECISION_PREFIX
    )
    body = _rest_body(dimensions, criteria, rationale_chars)
    rest = Segment.from_rx(body, key="adequacy/rest" + suffix, prefix=REST_PREFIX)
    # Everything after ``"PASS"`` / ``"FAIL"``.
    after = seq(lit(REST_PREFIX[1:]), body)

    def continuation(text: str) -> Segment | None:
        return rest if text in (DECISION_KEY + '"PASS', DECISION_KEY + '"FAIL') else None

    coarse = Segment.from_rx(seq(_DECISION, after), key="adequacy/whole" + suffix, logprobs=True, prefix=DECISION_KEY)
    rx = seq(lit(DECISION_KEY), _DECISION, after)
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


class CriterionScore(BaseModel):
    """One rubric criterion as the model writes it: its number (1-based, the prompt's; the constraint writes
    each in turn), a score and a short assessment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    criterion: int = Field(ge=1, le=MAX_CRITERIA)
    score: float = Field(ge=0.0, le=1.0)
    assessment: str = Field(min_length=1, max_length=B.CRITERION_ASSESSMENT_CHARS)


class JudgedCriterion(CriterionScore):
    """A criterion in the verdict: the model's score and assessment beside what the rubric says of it, and whether
    it is met, computed in code (:func:`suffice.gates.adequacy.decision.judge_criteria`)."""

    text: str
    critical: bool
    #: The score at which it is met (the rubric's).
    minimum: float = Field(ge=0.0, le=1.0)
    met: bool


class AdequacyOutput(BaseModel):
    """The generated form: the seed's output schema, field for field, and each rubric criterion scored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    adequacy_decision: Literal["PASS", "FAIL"]
    adequacy_score: float = Field(ge=0.0, le=1.0)
    #: The rubric's criteria numbered 1 to n in order (that n is the rubric's is checked against it when parsed).
    #: A ``Sequence``: the verdict holds :class:`JudgedCriterion` entries here.
    criteria: Sequence[CriterionScore] = Field(min_length=1, max_length=MAX_CRITERIA)
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

    @field_validator("criteria")
    @classmethod
    def _criteria_in_order(cls, value: Sequence[CriterionScore]) -> Sequence[CriterionScore]:
        # The constraint writes them so; an output from an engine without it is held to the same.
        numbers = [c.criterion for c in value]
        if numbers != list(range(1, len(numbers) + 1)):
            raise ValueError(f"criteria must be numbered 1 to {len(numbers)} in order, got {numbers}")
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
    #: The numbers of the critical criteria not met (the seed: "Partial coverage that fails any critical criterion
    #: must result in FAIL").
    failed_critical_criteria: list[int] = Field(default_factory=list)
    #: The numbers of the other criteria not met (the seed: "A PASS decision requires all rubric criteria to be
    #: met").
    unmet_criteria: list[int] = Field(default_factory=list)
    #: The plain mean of the criteria's scores: beside the composite (which weighs the dimensions, as calibrated
    #: thresholds were fitted on), for tuning and for reading against ``rubric_alignment``.
    criteria_score: float


class AdequacyVerdict(AdequacyOutput):
    """The model's opinion (the seed's fields) plus the computed decision."""

    #: Each rubric criterion, in the rubric's order: the model's score and assessment, the rubric's text, whether
    #: it is critical, and whether it is met (computed).
    criteria: list[JudgedCriterion] = Field(min_length=1, max_length=MAX_CRITERIA)
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
        """The seed's output schema alone (the model's opinion, not the computed decision); the criteria, which the
        seed's schema has no field for, go beside it (the gate's ``seed_extras``)."""
        return self.model_dump(mode="json", include=set(AdequacyOutput.model_fields) - {"criteria"})

    def criteria_rows(self) -> list[dict[str, Any]]:
        """The criteria as JSON: what a seed-shaped row carries beside the seed's schema."""
        return [c.model_dump(mode="json") for c in self.criteria]
