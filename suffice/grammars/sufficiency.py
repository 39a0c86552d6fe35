"""The sufficiency verdict (RAGFlow's ``sufficiency_select``) and its decode-time constraint.

Two shapes, on purpose:

* :class:`SufficiencyOutput` is what the model generates: a lean, compact form in
  which every seed requirement that a grammar can express holds by construction.
  Coverage is a list of ``{"entity", "covered"}`` pairs, so the coverage keys are
  exactly the required entities; usefulness is one letter ``Y``/``N`` per chunk
  shown, in label order (``chunk_useful``), so only chunks of the request can be
  named, each at most once.  That list is the only part that depends on the
  request (its length), so it is generated as a short second segment that
  continues the same sequence: the large first segment is one compiled form for
  every request (see :mod:`suffice.grammars.constraint`).
* :class:`SufficiencyVerdict` is what callers get: the user's own chunk ids, the
  prompt version and what the prompt had to cut.  :meth:`SufficiencyVerdict.to_ragflow`
  exports the seed's exact JSON shape for drop-in use.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import (
    JSON_BOOL,
    UNIT_INTERVAL,
    Rx,
    alt,
    flag_string,
    json_list,
    json_members,
    json_object,
    json_string,
    lit,
)

ChunkId = int | str


class SufficiencyBounds:
    """Every string and list the model writes is bounded; these are the bounds."""

    ENTITIES_MAX = 4
    ENTITY_CHARS = 40
    MISSING_MAX = 3
    MISSING_CHARS = 64
    CONTRADICTIONS_MAX = 2
    CONTRADICTION_CHARS = 64
    REASONING_CHARS = 200


B = SufficiencyBounds


class EntityCoverage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entity: str = Field(min_length=1, max_length=B.ENTITY_CHARS)
    covered: bool


class SufficiencyOutput(BaseModel):
    """The generated form, in generation order (entities, then the decision)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required_entities: list[EntityCoverage] = Field(min_length=1, max_length=B.ENTITIES_MAX)
    is_sufficient: bool
    missing_information: list[str] = Field(max_length=B.MISSING_MAX)
    contradictions: list[str] = Field(max_length=B.CONTRADICTIONS_MAX)
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = Field(min_length=1, max_length=B.REASONING_CHARS)
    #: One letter per chunk shown, in label order: ``Y`` useful, ``N`` not.
    chunk_useful: str = Field(pattern=r"^[YN]*$")


class CalibratedDecision(BaseModel):
    """``sufficient = score >= threshold`` for a threshold chosen on golden data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    score_name: str
    score: float | None
    threshold: float
    sufficient: bool
    reason: str


class SufficiencyVerdict(BaseModel):
    """A sufficiency verdict in the caller's terms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    is_sufficient: bool
    required_entities: list[str]
    coverage: dict[str, bool]
    missing_information: list[str]
    contradictions: list[str]
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str
    useful_chunk_ids: list[ChunkId]
    prompt_version: str
    truncated_chunk_ids: list[ChunkId] = Field(default_factory=list)
    omitted_chunk_ids: list[ChunkId] = Field(default_factory=list)
    question_truncated: bool = False
    model_called: bool = True
    #: P(is_sufficient = true) from the engine's log-probabilities at the decision.
    p_sufficient: float | None = Field(default=None, ge=0.0, le=1.0)
    #: Set when a calibrated gate config decides instead of the model's boolean.
    decision: CalibratedDecision | None = None

    def to_seed(self) -> dict[str, Any]:
        """The seed's (RAGFlow's) JSON shape; see :meth:`to_ragflow`."""
        return self.to_ragflow()

    def to_ragflow(self, sufficient: bool | None = None) -> dict[str, Any]:
        """The seed's JSON shape, both decision keys included (``sufficient``: the
        decision to write there, when it is not the model's own)."""
        decided = self.is_sufficient if sufficient is None else sufficient
        return {
            "Sufficient Context": decided,
            "is_sufficient": decided,
            "required_entities": list(self.required_entities),
            "coverage": dict(self.coverage),
            "missing_information": list(self.missing_information),
            "contradictions": list(self.contradictions),
            "confidence": self.confidence,
            "reasoning": self.reasoning,
            "useful_chunk_ids": list(self.useful_chunk_ids),
        }


def _string_list(max_items: int, max_chars: int, min_items: int = 0) -> Rx:
    return json_list(json_string(1, max_chars), min_items, max_items)


#: Where the decision starts, and where the request-independent segments end.
DECISION_KEY = '"is_sufficient":'
FLAGS_KEY = '"chunk_useful":'


def _entities() -> Rx:
    entity = json_object([("entity", json_string(1, B.ENTITY_CHARS)), ("covered", JSON_BOOL)])
    return lit('{"required_entities":') + json_list(entity, 1, B.ENTITIES_MAX) + lit("," + DECISION_KEY)


def _after(decision: bool) -> Rx:
    """What follows the decision value: ``true`` forces an empty ``missing_information``,
    ``false`` at least one item (seed requirements 2 and 7)."""
    missing = lit("[]") if decision else _string_list(B.MISSING_MAX, B.MISSING_CHARS, min_items=1)
    tail = json_members(
        [
            ("contradictions", _string_list(B.CONTRADICTIONS_MAX, B.CONTRADICTION_CHARS)),
            ("confidence", UNIT_INTERVAL),
            ("reasoning", json_string(1, B.REASONING_CHARS)),
        ]
    )
    return lit(',"missing_information":') + missing + lit(",") + tail + lit("," + FLAGS_KEY)


def _head() -> Rx:
    return _entities() + alt(lit("true") + _after(True), lit("false") + _after(False))


@lru_cache(maxsize=1)
def _segments() -> dict[str, Segment]:
    """The request-independent segments: compiled once per engine, whatever the input."""
    return {
        "entities": Segment.from_rx(_entities(), key="sufficiency/entities"),
        "decision": Segment.from_rx(JSON_BOOL, key="sufficiency/decision", logprobs=True),
        "true": Segment.from_rx(_after(True), key="sufficiency/after-true"),
        "false": Segment.from_rx(_after(False), key="sufficiency/after-false"),
    }


@lru_cache(maxsize=1024)
def flags_segment(n_chunks: int) -> Segment:
    """``"YNN...Y"}``: exactly one letter per chunk shown (linear in ``n``)."""
    return Segment.from_rx(flag_string(n_chunks) + lit("}"), key=f"flags/{n_chunks}", per_request=True)


@lru_cache(maxsize=1024)
def sufficiency_constraint(n_chunks: int) -> Constraint:
    """The constraint for a request showing ``n_chunks`` chunks (labelled ``0..n-1``).

    The entities come first (the seed's reasoning step 1), then the decision, which
    picks the branch.  Decoded in segments: the entities, the decision alone (the
    only segment with log-probabilities), the rest of the branch, then the flags for
    this chunk count (tiny); all but the flags are the same for every request.
    """
    flags = flags_segment(n_chunks)
    segments = _segments()

    def continuation(text: str) -> Segment | None:
        if text.endswith(FLAGS_KEY):
            return flags
        if text.endswith(DECISION_KEY):
            return segments["decision"]
        if text.endswith(DECISION_KEY + "true"):
            return segments["true"]
        if text.endswith(DECISION_KEY + "false"):
            return segments["false"]
        return None

    rx = _head() + flag_string(n_chunks) + lit("}")
    return Constraint.from_rx(
        rx,
        key=f"sufficiency/{n_chunks}",
        head=segments["entities"],
        continuation=continuation,
        coarse_head=_coarse_head(),
    )


@lru_cache(maxsize=1)
def _coarse_head() -> Segment:
    return Segment.from_rx(_head(), key="sufficiency/coarse-head", logprobs=True)


def to_verdict(
    output: SufficiencyOutput,
    chunk_ids: list[ChunkId],
    *,
    prompt_version: str,
    truncated_chunk_ids: list[ChunkId],
    omitted_chunk_ids: list[ChunkId],
    question_truncated: bool,
) -> SufficiencyVerdict:
    """Map prompt labels back to the caller's chunk ids.

    A repeated entity name keeps its first coverage mark, so ``coverage`` keys and
    ``required_entities`` stay exactly the same set (a grammar cannot compare
    generated strings with each other).
    """
    coverage: dict[str, bool] = {}
    for item in output.required_entities:
        coverage.setdefault(item.entity, item.covered)
    return SufficiencyVerdict(
        is_sufficient=output.is_sufficient,
        required_entities=list(coverage),
        coverage=coverage,
        missing_information=list(output.missing_information),
        contradictions=list(output.contradictions),
        confidence=output.confidence,
        reasoning=output.reasoning,
        useful_chunk_ids=[
            chunk_id for chunk_id, flag in zip(chunk_ids, output.chunk_useful, strict=True) if flag == "Y"
        ],
        prompt_version=prompt_version,
        truncated_chunk_ids=truncated_chunk_ids,
        omitted_chunk_ids=omitted_chunk_ids,
        question_truncated=question_truncated,
    )


#: JSON schema of the seed's exported shape, for consumers that validate it.
RAGFLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "Sufficient Context",
        "is_sufficient",
        "required_entities",
        "coverage",
        "missing_information",
        "contradictions",
        "confidence",
        "reasoning",
        "useful_chunk_ids",
    ],
    "properties": {
        "Sufficient Context": {"type": "boolean"},
        "is_sufficient": {"type": "boolean"},
        "required_entities": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "coverage": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "missing_information": {"type": "array", "items": {"type": "string"}},
        "contradictions": {"type": "array", "items": {"type": "string"}},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reasoning": {"type": "string"},
        "useful_chunk_ids": {
            "type": "array",
            "items": {"type": ["integer", "string"]},
            "uniqueItems": True,
        },
    },
}
