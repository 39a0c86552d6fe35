"""The recovery verdict (evidence insufficiency recovery, post-generation) and its constraint.

By construction: the answer exists only for SUFFICIENT and carries at least one
``[CITATION:k]`` marker whose ``k`` is a source shown in the request (sources are
numbered ``0..m-1``, so the pattern depends on ``m`` only; suffice rewrites the
markers to the caller's source ids); the abstention notice and the suggested
queries exist only otherwise; SUFFICIENT has no unsupported claim, the others at
least one; every string and list is bounded.

Decoded in segments (see :mod:`suffice.grammars.constraint`): the key, the
classification alone (the only segment with log-probabilities), the rest of that
branch up to the first ``[CITATION:`` (or the end of an abstention); then a tiny
segment picks each citation's source label and closes the marker, and a
request-independent one goes on with the next sentence or closes the answer.  Only
the label segment depends on the request (its source count); the large segments
are compiled once per engine.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import Rx, alt, json_list, json_members, json_string, lit, repeat, seq
from suffice.grammars.routes import Route


class RecoveryBounds:
    CLAIMS_MAX = 3
    CLAIM_CHARS = 64
    ANSWER_SENTENCES = 3
    SENTENCE_CHARS = 100
    NOTICE_CHARS = 160
    QUERIES_MAX = 3
    QUERY_CHARS = 64


B = RecoveryBounds


class Classification(StrEnum):
    SUFFICIENT = "SUFFICIENT"
    PARTIALLY_SUFFICIENT = "PARTIALLY_SUFFICIENT"
    INSUFFICIENT = "INSUFFICIENT"


#: Answer text: no quote, backslash or square bracket, so a marker cannot be faked.
_ANSWER_CHAR = "[ !#-Z^-~\u00a0-\ud7ff\ue000-\ufffd]"
CITATION = re.compile(r"\[CITATION:([^\]]+)\]")


CITATION_OPEN = "[CITATION:"


def _citation_label(n_sources: int) -> Rx:
    return alt(*[lit(str(i)) for i in range(n_sources)])


def _sentence() -> Rx:
    return repeat(Rx(_ANSWER_CHAR, 3), 1, B.SENTENCE_CHARS)


def _claims(lo: int) -> Rx:
    return json_list(json_string(1, B.CLAIM_CHARS), lo, B.CLAIMS_MAX)


CLASSIFICATION_KEY = '{"classification":"'


def _rest(classification: Classification, answer: Rx, *, answer_closed: bool = True) -> Rx:
    """Everything after the classification value; with ``answer_closed=False`` an
    answering verdict stops right after ``answer`` (no closing ``}``)."""
    if classification is Classification.SUFFICIENT:
        return seq(
            lit('",'),
            json_members(
                [
                    ("supported_claims", _claims(1)),
                    ("unsupported_claims", lit("[]")),
                    ("answer", answer),
                ]
            ),
            lit("}") if answer_closed else Rx("", 0),
        )
    return seq(
        lit('",'),
        json_members(
            [
                ("supported_claims", _claims(0)),
                ("unsupported_claims", _claims(1)),
                ("abstention_notice", json_string(1, B.NOTICE_CHARS)),
                ("suggested_retrieval_queries", json_list(json_string(1, B.QUERY_CHARS), 1, B.QUERIES_MAX)),
            ]
        ),
        lit("}"),
    )


def _recovery(answer: Rx) -> Rx:
    """The whole verdict with ``answer`` as the SUFFICIENT branch's answer."""
    return seq(lit(CLASSIFICATION_KEY), alt(*[seq(lit(c.value), _rest(c, answer)) for c in Classification]))


def _answer_start() -> Rx:
    return seq(lit('"'), _sentence(), lit(CITATION_OPEN))


@lru_cache(maxsize=1)
def _segments() -> dict[str, Segment]:
    """The request-independent segments, compiled once per engine."""
    segments = {
        "key": Segment.from_rx(lit(CLASSIFICATION_KEY), key="recovery/key"),
        "decision": Segment.from_rx(
            alt(*[lit(c.value) for c in Classification]), key="recovery/decision", logprobs=True
        ),
    }
    for c in Classification:
        rx = _rest(c, _answer_start(), answer_closed=False)
        segments[c.value] = Segment.from_rx(rx, key=f"recovery/after-{c.value}")
    return segments


@lru_cache(maxsize=1)
def _more() -> Segment:
    """After a citation, when another sentence is allowed: a sentence up to its marker,
    or the end of the answer."""
    rx = alt(seq(_sentence(), lit(CITATION_OPEN)), lit('"}'))
    return Segment.from_rx(rx, key="recovery/more")


@lru_cache(maxsize=1)
def _close() -> Segment:
    return Segment.from_rx(lit('"}'), key="recovery/close")


@lru_cache(maxsize=1024)
def citation_segment(n_sources: int) -> Segment:
    """A source label from ``0..m-1`` and the marker's closing bracket (tiny)."""
    return Segment.from_rx(seq(_citation_label(n_sources), lit("]")), key=f"citation/{n_sources}", per_request=True)


def _answer(n_sources: int) -> Rx:
    cited = seq(_sentence(), lit(CITATION_OPEN), _citation_label(n_sources), lit("]"))
    return seq(lit('"'), repeat(cited, 1, B.ANSWER_SENTENCES), lit('"'))


@lru_cache(maxsize=1024)
def recovery_constraint(n_sources: int) -> Constraint:
    if n_sources < 1:
        raise ValueError(f"a recovery request shows at least one source, got n_sources={n_sources}")
    cite = citation_segment(n_sources)
    segments = _segments()

    def continuation(text: str) -> Segment | None:
        if text == CLASSIFICATION_KEY:
            return segments["decision"]
        if text.startswith(CLASSIFICATION_KEY) and text[len(CLASSIFICATION_KEY) :] in segments:
            return segments[text[len(CLASSIFICATION_KEY) :]]
        if text.endswith(CITATION_OPEN):
            return cite
        if text.endswith("]") and '"answer":"' in text:
            # Answer text cannot contain brackets, so "]" here closed a citation.
            cited = text.split('"answer":"', 1)[1].count(CITATION_OPEN)
            return _more() if cited < B.ANSWER_SENTENCES else _close()
        return None

    rx = _recovery(_answer(n_sources))
    return Constraint.from_rx(
        rx, key=f"recovery/{n_sources}", head=_segments()["key"], continuation=continuation, coarse_head=_coarse_head()
    )


@lru_cache(maxsize=1)
def _coarse_head() -> Segment:
    """A whole abstention, or an answering verdict up to its first ``[CITATION:``."""
    rx = seq(
        lit(CLASSIFICATION_KEY),
        alt(*[seq(lit(c.value), _rest(c, _answer_start(), answer_closed=False)) for c in Classification]),
    )
    return Segment.from_rx(rx, key="recovery/coarse-head", logprobs=True)


class RecoveryOutput(BaseModel):
    """The generated form (citations name source labels)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    classification: Classification
    supported_claims: list[str] = Field(max_length=B.CLAIMS_MAX)
    unsupported_claims: list[str] = Field(max_length=B.CLAIMS_MAX)
    answer: str | None = None
    abstention_notice: str | None = None
    suggested_retrieval_queries: list[str] | None = Field(default=None, max_length=B.QUERIES_MAX)

    @model_validator(mode="after")
    def _conditional_fields(self) -> RecoveryOutput:
        if self.classification is Classification.SUFFICIENT:
            if self.answer is None or self.abstention_notice is not None or self.suggested_retrieval_queries:
                raise ValueError("SUFFICIENT needs an answer and no abstention fields")
            if not CITATION.search(self.answer):
                raise ValueError("a SUFFICIENT answer needs at least one [CITATION:source_id]")
        elif self.answer is not None or self.abstention_notice is None or not self.suggested_retrieval_queries:
            raise ValueError(f"{self.classification.value} needs an abstention notice and queries, no answer")
        return self


class RecoveryDecision(BaseModel):
    """The routing decision computed in code from a verdict and a threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    route: Route
    reason: str
    supporting_passages: int
    cumulative_score: float
    support_ratio: float
    queries: list[str] = Field(default_factory=list)
    gap: list[str] = Field(default_factory=list)
    threshold: str


class RecoveryVerdict(BaseModel):
    """The verdict in the caller's terms: citations name the caller's source ids."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    classification: Classification
    supported_claims: list[str]
    unsupported_claims: list[str]
    answer: str | None = None
    abstention_notice: str | None = None
    suggested_retrieval_queries: list[str] | None = None
    cited_sources: list[str] = Field(default_factory=list)
    prompt_version: str
    truncated_chunk_ids: list[int | str] = Field(default_factory=list)
    omitted_chunk_ids: list[int | str] = Field(default_factory=list)
    question_truncated: bool = False
    response_truncated: bool = False
    decision: RecoveryDecision | None = None
    #: Probability of each classification from the engine's log-probabilities.
    class_probabilities: dict[str, float] | None = None

    def to_seed(self) -> dict[str, Any]:
        """The seed's output schema: conditional fields present only where allowed."""
        out: dict[str, Any] = {
            "classification": self.classification.value,
            "supported_claims": list(self.supported_claims),
            "unsupported_claims": list(self.unsupported_claims),
        }
        if self.classification is Classification.SUFFICIENT:
            out["answer"] = self.answer
        else:
            out["abstention_notice"] = self.abstention_notice
            out["suggested_retrieval_queries"] = list(self.suggested_retrieval_queries or [])
        return out


def relabel_citations(answer: str, sources: list[str]) -> tuple[str, list[str]]:
    """``[CITATION:k]`` → ``[CITATION:<source id>]``, and the cited ids in order."""
    cited: list[str] = []

    def swap(match: re.Match[str]) -> str:
        source = sources[int(match.group(1))]
        if source not in cited:
            cited.append(source)
        return f"[CITATION:{source}]"

    return CITATION.sub(swap, answer), cited


SEED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["classification", "supported_claims", "unsupported_claims"],
    "properties": {
        "classification": {"enum": [c.value for c in Classification]},
        "supported_claims": {"type": "array", "items": {"type": "string"}},
        "unsupported_claims": {"type": "array", "items": {"type": "string"}},
        "answer": {"type": "string", "pattern": r"\[CITATION:[^\]]+\]"},
        "abstention_notice": {"type": "string"},
        "suggested_retrieval_queries": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "additionalProperties": False,
    "if": {"properties": {"classification": {"const": "SUFFICIENT"}}},
    "then": {"required": ["answer"], "not": {"anyOf": [{"required": ["abstention_notice"]}]}},
    "else": {"required": ["abstention_notice", "suggested_retrieval_queries"], "not": {"required": ["answer"]}},
}
