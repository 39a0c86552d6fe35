"""The recovery verdict (evidence insufficiency recovery, post-generation) and its constraint.

By construction: only SUFFICIENT has an answer, with at least one ``[CITATION:k]`` for a source ``k`` shown
(``0..m-1``); the abstention and suggested queries exist only otherwise.  Segments: the classification (with
log-probabilities), the branch up to the first ``[CITATION:``, then a tiny per-request label segment per citation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from suffice.exceptions import CitationError, ConfigError
from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import Rx, alt, json_list, json_members, json_string, lit, repeat, seq
from suffice.grammars.routes import Route


@dataclass(frozen=True)
class RecoveryBounds:
    """Every string and list the model writes is bounded; these are the bounds.

    Two are gate options (``max_claims``: claims per list, ``max_cited_sentences``: sentences of a SUFFICIENT
    answer, each ending in one citation): an instance holds them, and the upper-case names are their defaults.
    A list filled to its bound is named in the verdict's ``at_limit``: the model may have had more to say.
    """

    #: Default of ``max_claims``.
    CLAIMS_MAX: ClassVar[int] = 3
    CLAIMS_RANGE: ClassVar[tuple[int, int]] = (1, 8)
    CLAIM_CHARS: ClassVar[int] = 64
    #: Default of ``max_cited_sentences``.
    ANSWER_SENTENCES: ClassVar[int] = 3
    SENTENCES_RANGE: ClassVar[tuple[int, int]] = (1, 8)
    SENTENCE_CHARS: ClassVar[int] = 100
    NOTICE_CHARS: ClassVar[int] = 160
    QUERIES_MAX: ClassVar[int] = 3
    QUERY_CHARS: ClassVar[int] = 64

    claims_max: int = 3
    sentences: int = 3

    def __post_init__(self) -> None:
        for name, value, (lo, hi) in (
            ("max_claims", self.claims_max, self.CLAIMS_RANGE),
            ("max_cited_sentences", self.sentences, self.SENTENCES_RANGE),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(name, value, f"must be a whole number from {lo} to {hi}")

    @property
    def claims_suffix(self) -> str:
        """What the claim bound adds to a compiled form's key: nothing at the default."""
        return "" if self.claims_max == self.CLAIMS_MAX else f"/c{self.claims_max}"

    @property
    def suffix(self) -> str:
        """What the bounds add to a compiled form's key: nothing at the defaults."""
        sentences = "" if self.sentences == self.ANSWER_SENTENCES else f"/s{self.sentences}"
        return self.claims_suffix + sentences

    def for_prompt(self) -> dict[str, int]:
        """The bounds by the names the templates use."""
        return {
            "CLAIMS_MAX": self.claims_max,
            "CLAIM_CHARS": self.CLAIM_CHARS,
            "ANSWER_SENTENCES": self.sentences,
            "SENTENCE_CHARS": self.SENTENCE_CHARS,
            "NOTICE_CHARS": self.NOTICE_CHARS,
            "QUERIES_MAX": self.QUERIES_MAX,
            "QUERY_CHARS": self.QUERY_CHARS,
        }


B = RecoveryBounds
DEFAULT_BOUNDS = RecoveryBounds()


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


#: The answer's first character: visible, so the answer has text besides its citations.
_VISIBLE_CHAR = (
    "[!#-Z^-~\u00a1-\u00ac\u00ae-\u167f\u1681-\u1fff\u2010-\u2027\u2030-\u205e"
    "\u2070-\u2fff\u3001-\ud7ff\ue000-\ufefe\uff00-\ufffd]"
)


def _sentence() -> Rx:
    return repeat(Rx(_ANSWER_CHAR, 3), 1, B.SENTENCE_CHARS)


def _first_sentence() -> Rx:
    """The answer's first sentence starts with a visible character: never only citations."""
    return seq(Rx(_VISIBLE_CHAR, 3), repeat(Rx(_ANSWER_CHAR, 3), 0, B.SENTENCE_CHARS - 1))


def _claims(lo: int, bounds: RecoveryBounds) -> Rx:
    return json_list(json_string(1, B.CLAIM_CHARS), lo, bounds.claims_max)


CLASSIFICATION_KEY = '{"classification":"'
#: What follows every classification value up to the first thing the model chooses (prefilled).
AFTER_PREFIX = '","supported_claims":'


def _rest(classification: Classification, answer: Rx, bounds: RecoveryBounds, *, answer_closed: bool = True) -> Rx:
    """Everything after the classification value; ``answer_closed=False`` stops right after ``answer``."""
    return lit(AFTER_PREFIX) + _rest_body(classification, answer, bounds, answer_closed=answer_closed)


def _rest_body(classification: Classification, answer: Rx, bounds: RecoveryBounds, *, answer_closed: bool = True) -> Rx:
    """:func:`_rest` after :data:`AFTER_PREFIX`: the supported claims' list on."""
    if classification is Classification.SUFFICIENT:
        return seq(
            _claims(1, bounds),
            lit(","),
            json_members([("unsupported_claims", lit("[]")), ("answer", answer)]),
            lit("}") if answer_closed else Rx("", 0),
        )
    return seq(
        _claims(0, bounds),
        lit(","),
        json_members(
            [
                ("unsupported_claims", _claims(1, bounds)),
                ("abstention_notice", json_string(1, B.NOTICE_CHARS)),
                ("suggested_retrieval_queries", json_list(json_string(1, B.QUERY_CHARS), 1, B.QUERIES_MAX)),
            ]
        ),
        lit("}"),
    )


def _recovery(answer: Rx, bounds: RecoveryBounds) -> Rx:
    """The whole verdict with ``answer`` as the SUFFICIENT branch's answer."""
    return seq(lit(CLASSIFICATION_KEY), alt(*[seq(lit(c.value), _rest(c, answer, bounds)) for c in Classification]))


def _answer_start() -> Rx:
    return seq(lit('"'), _first_sentence(), lit(CITATION_OPEN))


@lru_cache(maxsize=8)
def _segments(bounds: RecoveryBounds = DEFAULT_BOUNDS) -> dict[str, Segment]:
    """The request-independent segments, compiled once per engine and claim bound."""
    segments = {
        "decision": Segment.from_rx(
            alt(*[lit(c.value) for c in Classification]),
            key="recovery/decision",
            logprobs=True,
            prefix=CLASSIFICATION_KEY,
        ),
    }
    for c in Classification:
        rx = _rest_body(c, _answer_start(), bounds, answer_closed=False)
        key = f"recovery/after-{c.value}{bounds.claims_suffix}"
        segments[c.value] = Segment.from_rx(rx, key=key, prefix=AFTER_PREFIX)
    return segments


@lru_cache(maxsize=1)
def _more() -> Segment:
    """After a citation: a sentence up to its marker, or the end of the answer."""
    rx = alt(seq(_sentence(), lit(CITATION_OPEN)), lit('"}'))
    return Segment.from_rx(rx, key="recovery/more")


@lru_cache(maxsize=1)
def _close() -> Segment:
    return Segment.from_rx(lit('"}'), key="recovery/close")


@lru_cache(maxsize=1024)
def citation_segment(n_sources: int) -> Segment:
    """A source label from ``0..m-1`` and the marker's closing bracket (tiny)."""
    return Segment.from_rx(seq(_citation_label(n_sources), lit("]")), key=f"citation/{n_sources}", per_request=True)


def _answer(n_sources: int, bounds: RecoveryBounds) -> Rx:
    label = seq(lit(CITATION_OPEN), _citation_label(n_sources), lit("]"))
    first = seq(_first_sentence(), label)
    more = repeat(seq(_sentence(), label), 0, bounds.sentences - 1)
    return seq(lit('"'), first, more, lit('"'))


@lru_cache(maxsize=1024)
def recovery_constraint(n_sources: int, bounds: RecoveryBounds = DEFAULT_BOUNDS) -> Constraint:
    if n_sources < 1:
        raise ValueError(f"a recovery request shows at least one source, got n_sources={n_sources}")
    cite = citation_segment(n_sources)
    segments = _segments(bounds)

    def continuation(text: str) -> Segment | None:
        if text.startswith(CLASSIFICATION_KEY) and text[len(CLASSIFICATION_KEY) :] in segments:
            return segments[text[len(CLASSIFICATION_KEY) :]]
        if text.endswith(CITATION_OPEN):
            return cite
        if text.endswith("]") and '"answer":"' in text:
            # Answer text cannot contain brackets, so "]" here closed a citation.
            cited = text.split('"answer":"', 1)[1].count(CITATION_OPEN)
            return _more() if cited < bounds.sentences else _close()
        return None

    rx = _recovery(_answer(n_sources, bounds), bounds)
    return Constraint.from_rx(
        rx,
        key=f"recovery/{n_sources}{bounds.suffix}",
        head=segments["decision"],
        continuation=continuation,
        coarse_head=_coarse_head(bounds),
        completion_bound=_completion_bound(cite, bounds),
    )


def _completion_bound(cite: Segment, bounds: RecoveryBounds) -> int:
    """The most tokens a verdict decodes (:attr:`Constraint.max_completion_tokens`): the classification, then an
    abstention in one segment, or an answer up to its first citation followed by, for each of its sentences, the
    citation's label and either the next sentence up to its marker or (after the last) the answer's close."""
    segments = _segments(bounds)
    abstentions = [segments[c.value].max_tokens for c in Classification if c is not Classification.SUFFICIENT]
    sentences = bounds.sentences
    answer = (
        segments[Classification.SUFFICIENT.value].max_tokens
        + sentences * cite.max_tokens
        + (sentences - 1) * _more().max_tokens
        + _close().max_tokens
    )
    return segments["decision"].max_tokens + max(*abstentions, answer)


@lru_cache(maxsize=8)
def _coarse_head(bounds: RecoveryBounds = DEFAULT_BOUNDS) -> Segment:
    """A whole abstention, or an answering verdict up to its first ``[CITATION:``."""
    rx = seq(
        lit('"'),
        alt(*[seq(lit(c.value), _rest(c, _answer_start(), bounds, answer_closed=False)) for c in Classification]),
    )
    # The prefix stops before the value's quote: large patterns open outside strings (see Segment).
    key = "recovery/coarse-head" + bounds.claims_suffix
    return Segment.from_rx(rx, key=key, logprobs=True, prefix=CLASSIFICATION_KEY[:-1])


class RecoveryOutput(BaseModel):
    """The generated form (citations name source labels)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    classification: Classification
    #: At most ``max_claims`` each (checked against the bounds in the validation context, else the defaults).
    supported_claims: list[str] = Field(max_length=B.CLAIMS_RANGE[1])
    unsupported_claims: list[str] = Field(max_length=B.CLAIMS_RANGE[1])
    answer: str | None = None
    abstention_notice: str | None = None
    suggested_retrieval_queries: list[str] | None = Field(default=None, max_length=B.QUERIES_MAX)

    @model_validator(mode="after")
    def _conditional_fields(self, info: ValidationInfo) -> RecoveryOutput:
        context = info.context if isinstance(info.context, dict) else {}
        bounds = context.get("bounds", DEFAULT_BOUNDS)
        for name in ("supported_claims", "unsupported_claims"):
            if len(getattr(self, name)) > bounds.claims_max:
                raise ValueError(f"{name} holds more than max_claims={bounds.claims_max}")
        if self.answer is not None and len(CITATION.findall(self.answer)) > bounds.sentences:
            raise ValueError(f"the answer cites more than max_cited_sentences={bounds.sentences} times")
        if self.classification is Classification.SUFFICIENT:
            if self.answer is None or self.abstention_notice is not None or self.suggested_retrieval_queries:
                raise ValueError("SUFFICIENT needs an answer and no abstention fields")
            if not CITATION.search(self.answer):
                raise ValueError("a SUFFICIENT answer needs at least one [CITATION:source_id]")
        elif self.answer is not None or self.abstention_notice is None or not self.suggested_retrieval_queries:
            raise ValueError(f"{self.classification.value} needs an abstention notice and queries, no answer")
        return self


def at_limit(output: RecoveryOutput, bounds: RecoveryBounds = DEFAULT_BOUNDS) -> list[str]:
    """The lists ``output`` filled to their bound (``answer``: its cited sentences): the model may have had more
    to name, so a shortfall it did not list may be missing."""
    sizes = (
        ("supported_claims", len(output.supported_claims), bounds.claims_max),
        ("unsupported_claims", len(output.unsupported_claims), bounds.claims_max),
        ("answer", len(CITATION.findall(output.answer or "")), bounds.sentences),
        ("suggested_retrieval_queries", len(output.suggested_retrieval_queries or []), B.QUERIES_MAX),
    )
    return [name for name, size, most in sizes if size >= most]


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
    #: The response's length and how much of it the model was shown (characters, as the prompt shows text):
    #: equal unless ``response_truncated``; ``None`` for a record without a response, or where the model was not
    #: called.
    response_chars: int | None = None
    response_chars_checked: int | None = None
    #: The lists filled to their bound (see :func:`at_limit`).
    at_limit: list[str] = Field(default_factory=list)
    decision: RecoveryDecision | None = None
    #: Probability of each classification from the engine's log-probabilities.
    class_probabilities: dict[str, float] | None = None
    #: The checked answer, set only when a PARTIALLY_SUFFICIENT verdict is delivered (with ``decision.caveats``).
    partial_answer: str | None = None
    #: The checked answer (the record's ``response``, as given), set only when a SUFFICIENT verdict is delivered:
    #: what goes out, with ``cited_sources`` beside it.  ``answer`` is the judge's own cited wording.
    checked_answer: str | None = None

    @model_validator(mode="after")
    def _partial_only_when_partial(self) -> RecoveryVerdict:
        if self.partial_answer is not None and self.classification is not Classification.PARTIALLY_SUFFICIENT:
            raise ValueError("partial_answer is only for PARTIALLY_SUFFICIENT verdicts")
        if self.checked_answer is not None and self.classification is not Classification.SUFFICIENT:
            raise ValueError("checked_answer is only for SUFFICIENT verdicts")
        return self

    @property
    def delivered(self) -> bool:
        return self.decision is not None and self.decision.route == "deliver"

    @property
    def delivered_answer(self) -> str | None:
        """What a ``deliver`` decision hands to the user: the checked answer as it was given (the seed: "accept
        the answer as-is"), never the judge's own wording; ``None`` for any other route, and for a record
        without a response (see :attr:`judge_answer`)."""
        if not self.delivered:
            return None
        return self.checked_answer if self.classification is Classification.SUFFICIENT else self.partial_answer

    @property
    def judge_answer(self) -> str | None:
        """The judge's own cited answer, offered only when a SUFFICIENT verdict is delivered for a record that
        had no response to deliver."""
        if not self.delivered or self.classification is not Classification.SUFFICIENT:
            return None
        return self.answer if self.checked_answer is None else None

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
        allowed) and the harness's ``sufficiency_verdict``, ``gap_description`` and ``retrieval_queries``."""
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
        out["sufficiency_verdict"] = self.sufficiency_verdict
        out["gap_description"] = self.gap_description
        out["retrieval_queries"] = self.retrieval_queries
        return out


#: Characters of a source id written as ``%XX`` (UTF-8 bytes) in a citation, besides non-printable ones.
_ESCAPED = frozenset("%[]")
#: An empty source id: no escaped id is a lone ``%`` (``%`` itself is always escaped).
EMPTY_SOURCE = "%"
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _escape_char(char: str) -> str:
    if char in _ESCAPED or not char.isprintable():
        return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    return char


def cite_source(source: str) -> str:
    """A source id as written in ``[CITATION:...]``, read back exactly by :func:`parse_citations`: ``%``,
    ``[``, ``]`` and non-printable characters become ``%XX`` UTF-8 bytes; the empty id is a lone ``%``."""
    if not source:
        return EMPTY_SOURCE
    return "".join(_escape_char(c) for c in source)


def _read_source(marker: str, text: str) -> str:
    """Undo :func:`cite_source`; reject anything it cannot have written."""
    if text == EMPTY_SOURCE:
        return ""
    out = bytearray()
    at = 0
    for match in _ESCAPE.finditer(text):
        out += _literal(marker, text[at : match.start()])
        out.append(int(match.group(1), 16))
        at = match.end()
    out += _literal(marker, text[at:])
    try:
        return out.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise CitationError(marker, f"its %-escapes are not UTF-8: {exc.reason}") from exc


def _literal(marker: str, text: str) -> bytes:
    for char in text:
        if char in _ESCAPED or not char.isprintable():
            raise CitationError(marker, f"{char!r} must be %-escaped")
    return text.encode("utf-8", "surrogatepass")


def parse_citations(answer: str) -> list[str]:
    """The source ids of every ``[CITATION:...]`` marker in an exported answer, in order (repeats kept);
    raises :class:`CitationError` for a damaged marker."""
    return [_read_source(match.group(0), match.group(1)) for match in CITATION.finditer(answer)]


def relabel_citations(answer: str, sources: list[str]) -> tuple[str, list[str]]:
    """``[CITATION:k]`` → ``[CITATION:<escaped source id>]``, and the cited ids in order of first citation."""
    cited: list[str] = []

    def swap(match: re.Match[str]) -> str:
        source = sources[int(match.group(1))]
        if source not in cited:
            cited.append(source)
        return f"[CITATION:{cite_source(source)}]"

    return CITATION.sub(swap, answer), cited


SEED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "classification",
        "supported_claims",
        "unsupported_claims",
        "sufficiency_verdict",
        "gap_description",
        "retrieval_queries",
    ],
    "properties": {
        "classification": {"enum": [c.value for c in Classification]},
        "supported_claims": {"type": "array", "items": {"type": "string"}},
        "unsupported_claims": {"type": "array", "items": {"type": "string"}},
        "answer": {"type": "string", "pattern": r"\[CITATION:[^\]]+\]"},
        "abstention_notice": {"type": "string"},
        "suggested_retrieval_queries": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "sufficiency_verdict": {"enum": ["SUFFICIENT", "INSUFFICIENT", "ABSTAIN"]},
        "gap_description": {"type": "string"},
        "retrieval_queries": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
    "if": {"properties": {"classification": {"const": "SUFFICIENT"}}},
    "then": {"required": ["answer"], "not": {"anyOf": [{"required": ["abstention_notice"]}]}},
    "else": {"required": ["abstention_notice", "suggested_retrieval_queries"], "not": {"required": ["answer"]}},
}
