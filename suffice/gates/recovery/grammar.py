"""The recovery verdict (evidence insufficiency recovery, post-generation): a label for every segment of the
response, and its constraint.

The response is cut into segments in code (:mod:`suffice.gates.recovery.segments`) and shown numbered; the model
writes its classification, then for each segment, in order, ``[index,"label",[sources]]``: the index is prefilled,
so the model cannot skip, repeat or invent a segment; ``supported`` and ``partial`` name 1 to
``max_sources_per_segment`` source numbers among those shown, ``unsupported`` and ``no_claim`` none.  An abstention
notice and retrieval queries follow exactly when the classification computed from the labels is not SUFFICIENT.

Decoded in segments: the classification (with log-probabilities), one tiny per-request segment per response segment,
then the close or the abstention (request-independent, compiled once).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, ClassVar, Literal
from urllib.parse import quote, unquote_to_bytes

from pydantic import BaseModel, ConfigDict, Field

from suffice.exceptions import CitationError, ConfigError
from suffice.gates.recovery.segments import SegmentKind
from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import Rx, alt, json_list, json_string, lit, seq
from suffice.grammars.routes import Route
from suffice.prompts.windows import WINDOW_SEGMENTS


@dataclass(frozen=True)
class RecoveryBounds:
    """Every list and string the model writes is bounded; these are the bounds.

    ``max_sources_per_segment`` is a gate option (an instance holds it; ``SOURCES_MAX`` is its default).
    ``WINDOW_SEGMENTS`` is the most segments one request judges: a response with more is judged in windows (each
    segment's entry costs up to ~25 tokens of the constraint's worst case, which the prompt must leave room for).
    """

    #: Default of ``max_sources_per_segment``.
    SOURCES_MAX: ClassVar[int] = 3
    SOURCES_RANGE: ClassVar[tuple[int, int]] = (1, 8)
    WINDOW_SEGMENTS: ClassVar[int] = WINDOW_SEGMENTS
    NOTICE_CHARS: ClassVar[int] = 160
    QUERIES_MAX: ClassVar[int] = 3
    QUERY_CHARS: ClassVar[int] = 64

    sources_max: int = 3

    def __post_init__(self) -> None:
        lo, hi = self.SOURCES_RANGE
        value = self.sources_max
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError("max_sources_per_segment", value, f"must be a whole number from {lo} to {hi}")

    @property
    def suffix(self) -> str:
        """What the bounds add to a compiled form's key: nothing at the defaults."""
        return "" if self.sources_max == self.SOURCES_MAX else f"/k{self.sources_max}"

    def for_prompt(self) -> dict[str, int]:
        """The bounds by the names the templates use: an option's value under its default's name."""
        names = ("SOURCES_MAX", "NOTICE_CHARS", "QUERIES_MAX", "QUERY_CHARS")
        return {name: getattr(self, name.lower(), getattr(self, name)) for name in names}


B = RecoveryBounds
DEFAULT_BOUNDS = RecoveryBounds()


class Classification(StrEnum):
    SUFFICIENT = "SUFFICIENT"
    PARTIALLY_SUFFICIENT = "PARTIALLY_SUFFICIENT"
    INSUFFICIENT = "INSUFFICIENT"


#: What the model says of one segment: ``partial`` is partially supported, ``no_claim`` carries no factual claim
#: (a greeting, a heading, a transition).
SegmentLabel = Literal["supported", "partial", "unsupported", "no_claim"]
LABELS: tuple[SegmentLabel, ...] = ("supported", "partial", "unsupported", "no_claim")
#: The labels that name sources.
CITING: frozenset[str] = frozenset({"supported", "partial"})
#: Weakest first: how two classifications combine (windows) and how a disagreement settles.
_ORDER = (Classification.INSUFFICIENT, Classification.PARTIALLY_SUFFICIENT, Classification.SUFFICIENT)


def tally(labels: Sequence[str]) -> Classification:
    """The classification the seed's definitions give the labels: SUFFICIENT when every claim is supported,
    INSUFFICIENT when there is no claim or most claims are unsupported ("lacks support for most or all"),
    PARTIALLY_SUFFICIENT otherwise (a ``partial`` label is not support)."""
    claims = [label for label in labels if label != "no_claim"]
    if not claims:
        return Classification.INSUFFICIENT
    if all(label == "supported" for label in claims):
        return Classification.SUFFICIENT
    if 2 * claims.count("unsupported") > len(claims):
        return Classification.INSUFFICIENT
    return Classification.PARTIALLY_SUFFICIENT


def weakest(*classes: Classification) -> Classification:
    return min(classes, key=_ORDER.index)


def settle(computed: Classification, model: Classification) -> Classification:
    """The classification that routes: the one computed from the labels, except that a SUFFICIENT tally the model
    did not also call SUFFICIENT is PARTIALLY_SUFFICIENT (the seed: "if you are unsure about support for any claim,
    classify as PARTIALLY_SUFFICIENT").  A model more confident than its labels never raises the tally."""
    if computed is Classification.SUFFICIENT and model is not Classification.SUFFICIENT:
        return Classification.PARTIALLY_SUFFICIENT
    return computed


CLASSIFICATION_KEY = '{"classification":"'
SEGMENTS_KEY = '","segments":['
_ENTRY = re.compile(r'\[(\d+),"(supported|partial|unsupported|no_claim)",')
ABSTENTION_KEY = '],"abstention_notice":'
CLOSE = "]}"
QUERIES_KEY = ',"suggested_retrieval_queries":'


def _entry_body(n_sources: int, bounds: RecoveryBounds) -> Rx:
    """One segment's entry after its prefilled ``[index``: the comma, a label, its sources, the entry's close.  The
    comma is decoded, not prefilled: tokenizers read ``,"`` as one token, and a prefix ends where they split."""
    sources = json_list(alt(*[lit(str(i)) for i in range(n_sources)]), 1, bounds.sources_max)
    return alt(
        seq(lit(',"supported",'), sources, lit("]")),
        seq(lit(',"partial",'), sources, lit("]")),
        lit(',"unsupported",[]]'),
        lit(',"no_claim",[]]'),
    )


def _abstention_body() -> Rx:
    return seq(
        json_string(1, B.NOTICE_CHARS),
        lit(QUERIES_KEY),
        json_list(json_string(1, B.QUERY_CHARS), 1, B.QUERIES_MAX),
        lit("}"),
    )


def _entry_prefix(index: int, first: bool) -> str:
    return (SEGMENTS_KEY if first else ",") + f"[{index}"


_HEAD = Segment.from_rx(
    alt(*[lit(c.value) for c in Classification]), key="recovery/decision", logprobs=True, prefix=CLASSIFICATION_KEY
)
_CLOSE = Segment.from_rx(lit(CLOSE), key="recovery/close")
# Decoded whole: its key's quotes merge with the colon and the notice's opening quote in one token, so no prefix
# could end at a token boundary there.
_ABSTENTION = Segment.from_rx(seq(lit(ABSTENTION_KEY), _abstention_body()), key="recovery/abstention")


@lru_cache(maxsize=4096)
def _entry(n_sources: int, bounds: RecoveryBounds, index: int, first: bool) -> Segment:
    """Segment ``index``'s entry: the same pattern (one compiled form) for every index, its prefix naming it."""
    return Segment.from_rx(
        _entry_body(n_sources, bounds),
        key=f"recovery/entry/{n_sources}{bounds.suffix}",
        per_request=True,
        prefix=_entry_prefix(index, first),
    )


def read_labels(text: str) -> list[tuple[int, str]]:
    """The ``(index, label)`` of every segment entry in a (partial) output."""
    return [(int(m.group(1)), m.group(2)) for m in _ENTRY.finditer(text)]


def _model_class(text: str) -> Classification | None:
    value = text[len(CLASSIFICATION_KEY) :].split('"', 1)[0]
    return Classification(value) if value in Classification.__members__ else None


def _abstains(text: str) -> bool:
    """Whether an output with every entry written must go on with an abstention (its settled class is not
    SUFFICIENT)."""
    model = _model_class(text)
    labels = [label for _, label in read_labels(text)]
    return model is None or settle(tally(labels), model) is not Classification.SUFFICIENT


@lru_cache(maxsize=4096)
def recovery_constraint(n_sources: int, first: int, count: int, bounds: RecoveryBounds = DEFAULT_BOUNDS) -> Constraint:
    """The constraint for a window of ``count`` segments, numbered from ``first``, judged against ``n_sources``
    sources.  The key names the shape (sources, segments), not where the window starts: windows of one shape decode
    alike (what the KV budget learns from)."""
    if n_sources < 1:
        raise ValueError(f"a recovery request shows at least one source, got n_sources={n_sources}")
    if count < 1:
        raise ValueError(f"a recovery request judges at least one segment, got count={count}")
    entries = [seq(lit(_entry_prefix(first + i, i == 0)), _entry_body(n_sources, bounds)) for i in range(count)]
    rx = seq(
        lit(CLASSIFICATION_KEY),
        alt(*[lit(c.value) for c in Classification]),
        *entries,
        alt(lit(CLOSE), seq(lit(ABSTENTION_KEY), _abstention_body())),
    )

    def continuation(text: str) -> Segment | None:
        if text.endswith("}"):
            return None
        done = len(read_labels(text))
        if done < count:
            return _entry(n_sources, bounds, first + done, done == 0)
        return _ABSTENTION if _abstains(text) else _CLOSE

    def check(text: str) -> bool:
        # What the pattern cannot say: an abstention (ending in its queries' '"]}') follows exactly the outputs
        # whose labels do not settle SUFFICIENT.
        return _abstains(text) == text.endswith('"]}')

    entry = _entry(n_sources, bounds, first, True).max_tokens
    bound = _HEAD.max_tokens + count * entry + max(_CLOSE.max_tokens, _ABSTENTION.max_tokens)
    return Constraint.from_rx(
        rx,
        key=f"recovery/{n_sources}/n{count}{bounds.suffix}",
        head=_HEAD,
        continuation=continuation,
        check=check,
        completion_bound=bound,
    )


class RecoveryOutput(BaseModel):
    """One window's generated form (sources are source numbers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    classification: Classification
    segments: list[tuple[int, SegmentLabel, list[int]]]
    abstention_notice: str | None = None
    suggested_retrieval_queries: list[str] | None = Field(default=None, max_length=B.QUERIES_MAX)


#: The seed harness's verdict (``sufficiency_verdict``).
SeedVerdict = Literal["SUFFICIENT", "INSUFFICIENT", "ABSTAIN"]


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
    #: For a partial delivery only: what the delivered answer must be shown with.
    caveats: list[str] = Field(default_factory=list)
    threshold: str
    #: For a ``human_review`` route: the rule that sent it (see :data:`suffice.grammars.routes.REVIEW_RULES`).
    rule: str | None = None


class JudgedSegment(BaseModel):
    """One segment of the response with the model's label: ``response[start:end] == text``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    start: int
    end: int
    kind: SegmentKind
    text: str
    label: SegmentLabel
    #: The caller's source ids that support it (``supported`` and ``partial`` only), in the order the model named
    #: them, each once.
    sources: list[str] = Field(default_factory=list)


class RecoveryVerdict(BaseModel):
    """The verdict in the caller's terms: sources are the caller's source ids.

    ``classification`` is computed from the segments' labels (:func:`tally`, :func:`settle`); the model's own is
    ``model_classification``, and ``disagreement`` says they differ.  ``supported_claims`` and
    ``unsupported_claims`` are the segments' exact text (``partial`` among the unsupported: it is not support);
    ``cited_answer`` is the response byte for byte with ``[CITATION:source_id]`` after each segment that names
    sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    classification: Classification
    model_classification: Classification
    disagreement: bool = False
    segments: list[JudgedSegment]
    supported_claims: list[str]
    unsupported_claims: list[str]
    cited_answer: str
    abstention_notice: str | None = None
    suggested_retrieval_queries: list[str] | None = None
    cited_sources: list[str] = Field(default_factory=list)
    prompt_version: str
    #: Requests the response was judged in (a window each, the same context in each).
    windows: int = 1
    truncated_chunk_ids: list[int | str] = Field(default_factory=list)
    omitted_chunk_ids: list[int | str] = Field(default_factory=list)
    question_truncated: bool = False
    #: Never true: every segment of the response is judged (kept for the rows every gate shares).
    response_truncated: bool = False
    decision: RecoveryDecision | None = None
    #: Probability of each classification from the engine's log-probabilities (the first window's).
    class_probabilities: dict[str, float] | None = None
    #: What a ``deliver`` decision hands to the user: ``cited_answer``, with the unsupported marker after each
    #: segment not fully supported where a partial answer is delivered; ``None`` for any other route.
    answer: str | None = None

    @property
    def delivered(self) -> bool:
        return self.decision is not None and self.decision.route == "deliver"

    @property
    def delivered_answer(self) -> str | None:
        return self.answer if self.delivered else None

    @property
    def sufficiency_verdict(self) -> SeedVerdict:
        """The seed harness's verdict: SUFFICIENT when the decision delivers, ABSTAIN when it abstains (no
        retrieval can help, also when high stakes send the abstention to a person), INSUFFICIENT otherwise
        (retrieve more, or a person decides)."""
        if self.decision is None:
            return "SUFFICIENT" if self.classification is Classification.SUFFICIENT else "INSUFFICIENT"
        if self.decision.route == "deliver":
            return "SUFFICIENT"
        if self.decision.route == "abstain" or self.decision.rule == "abstained_high_stakes":
            return "ABSTAIN"
        return "INSUFFICIENT"

    @property
    def gap_description(self) -> str:
        """What is missing, in words: the gap the decision names, then the abstention notice."""
        gap = list(self.decision.gap) if self.decision is not None else list(self.unsupported_claims)
        if self.abstention_notice and self.abstention_notice not in gap:
            gap.append(self.abstention_notice)
        return "; ".join(gap)

    @property
    def retrieval_queries(self) -> list[str]:
        """The queries for an expanded search: the decision's, else the model's suggestions."""
        if self.decision is not None and self.decision.queries:
            return list(self.decision.queries)
        return list(self.suggested_retrieval_queries or [])

    def to_seed(self) -> dict[str, Any]:
        """The seed's schemas with the seed's names: the prompt's output (conditional fields present only where
        allowed; the answer is the response with its citations) and the harness's ``sufficiency_verdict``,
        ``gap_description`` and ``retrieval_queries``."""
        out: dict[str, Any] = {
            "classification": self.classification.value,
            "supported_claims": list(self.supported_claims),
            "unsupported_claims": list(self.unsupported_claims),
        }
        if self.classification is Classification.SUFFICIENT:
            out["answer"] = self.cited_answer
        else:
            out["abstention_notice"] = self.abstention_notice or "; ".join(self.unsupported_claims)
            out["suggested_retrieval_queries"] = list(self.suggested_retrieval_queries or [])
        out["sufficiency_verdict"] = self.sufficiency_verdict
        out["gap_description"] = self.gap_description
        out["retrieval_queries"] = self.retrieval_queries
        return out


CITATION = re.compile(r"\[CITATION:([^\]]+)\]")


#: Characters of a source id written as ``%XX`` (UTF-8 bytes) in a citation, besides non-printable ones.
_ESCAPED = frozenset("%[]")
#: An empty source id: no escaped id is a lone ``%`` (``%`` itself is always escaped).
EMPTY_SOURCE = "%"
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _escaped(char: str) -> bool:
    return char in _ESCAPED or not char.isprintable()


def cite_source(source: str) -> str:
    """A source id as written in ``[CITATION:...]``, read back exactly by :func:`parse_citations`: ``%``,
    ``[``, ``]`` and non-printable characters become ``%XX`` UTF-8 bytes; the empty id is a lone ``%``."""
    if not source:
        return EMPTY_SOURCE
    return "".join(quote(c, safe="", errors="surrogatepass") if _escaped(c) else c for c in source)


def _read_source(marker: str, text: str) -> str:
    """Undo :func:`cite_source`; reject anything it cannot have written."""
    if text == EMPTY_SOURCE:
        return ""
    for char in _ESCAPE.sub("", text):
        if _escaped(char):
            raise CitationError(marker, f"{char!r} must be %-escaped")
    try:
        return unquote_to_bytes(text).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise CitationError(marker, f"its %-escapes are not UTF-8: {exc.reason}") from exc


def parse_citations(answer: str) -> list[str]:
    """The source ids of every ``[CITATION:...]`` marker in an exported answer, in order (repeats kept);
    raises :class:`CitationError` for a damaged marker."""
    return [_read_source(match.group(0), match.group(1)) for match in CITATION.finditer(answer)]


_SEED_PROPERTIES: dict[str, Any] = {
    "classification": {"enum": [c.value for c in Classification]},
    "supported_claims": {"type": "array", "items": {"type": "string"}},
    "unsupported_claims": {"type": "array", "items": {"type": "string"}},
    "answer": {"type": "string", "pattern": r"\[CITATION:[^\]]+\]"},
    "abstention_notice": {"type": "string"},
    "suggested_retrieval_queries": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "sufficiency_verdict": {"enum": ["SUFFICIENT", "INSUFFICIENT", "ABSTAIN"]},
    "gap_description": {"type": "string"},
    "retrieval_queries": {"type": "array", "items": {"type": "string"}},
}
#: Every property but the three that depend on the classification is required.
_CONDITIONAL = ("answer", "abstention_notice", "suggested_retrieval_queries")
SEED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [name for name in _SEED_PROPERTIES if name not in _CONDITIONAL],
    "properties": _SEED_PROPERTIES,
    "additionalProperties": False,
    "if": {"properties": {"classification": {"const": "SUFFICIENT"}}},
    "then": {"required": ["answer"], "not": {"anyOf": [{"required": ["abstention_notice"]}]}},
    "else": {"required": ["abstention_notice", "suggested_retrieval_queries"], "not": {"required": ["answer"]}},
}
