"""The sufficiency verdict (RAGFlow's ``sufficiency_select``) and its decode-time constraint.

* :class:`SufficiencyOutput` is what the model generates: a compact form in which every seed requirement a
  grammar can express holds by construction; ``useful_chunk_ids`` are ascending prompt labels.  Only the id
  list depends on the request (one tiny segment, continued one id at a time if out of order).
* :class:`SufficiencyVerdict` is what callers get, in their own chunk ids; ``to_ragflow`` exports the seed's shape.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from suffice.gates.base import REASONING_CHARS, REASONING_CHARS_RANGE
from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import (
    JSON_BOOL,
    STRING_CHAR_CLASS,
    STRING_CHAR_MAX_BYTES,
    STRING_FIRST_CHAR_CLASS,
    UNIT_INTERVAL,
    Rx,
    alt,
    json_list,
    json_members,
    json_object,
    lit,
    opt,
    repeat,
    seq,
)

ChunkId = int | str


def ascending(ids: list[int]) -> bool:
    """Strictly ascending, so no id repeats."""
    return all(a < b for a, b in itertools.pairwise(ids))


@dataclass(frozen=True)
class SufficiencyBounds:
    """Every string and list the model writes is bounded; these are the bounds.

    Four are gate options (``max_entities``, ``max_useful_chunks``, ``reasoning_chars``,
    ``max_retrieval_queries``): an instance holds them, and the upper-case names are their defaults.
    Defaults measured on the labeled data in ``shared/data``
    (``scripts/measure_sufficiency_bounds.py``; see docs/gates.md): 5 entities cover 99.25% of all
    questions (HotpotQA's p90), 8 useful chunks cover 100% (the most labeled is 4).
    """

    #: Default of ``max_entities``.
    ENTITIES_MAX: ClassVar[int] = 5
    ENTITIES_RANGE: ClassVar[tuple[int, int]] = (1, 16)
    ENTITY_CHARS: ClassVar[int] = 40
    MISSING_MAX: ClassVar[int] = 3
    MISSING_CHARS: ClassVar[int] = 64
    CONTRADICTIONS_MAX: ClassVar[int] = 2
    CONTRADICTION_CHARS: ClassVar[int] = 64
    #: Default of ``reasoning_chars`` (the option of every gate with a reasoning field).
    REASONING_CHARS: ClassVar[int] = REASONING_CHARS
    REASONING_RANGE: ClassVar[tuple[int, int]] = REASONING_CHARS_RANGE
    #: Default of ``max_useful_chunks``: the list's cost is its length, and the seed asks only for the useful ones.
    USEFUL_MAX: ClassVar[int] = 8
    USEFUL_RANGE: ClassVar[tuple[int, int]] = (1, 64)
    #: Default of ``max_retrieval_queries``: off, so the verdict and its constraint stay as they were.
    QUERIES_MAX: ClassVar[int] = 0
    QUERIES_RANGE: ClassVar[tuple[int, int]] = (0, 5)
    #: A query is a search string, as short as the recovery gate's and the rewriter's.
    QUERY_CHARS: ClassVar[int] = 64

    entities_max: int = 5
    useful_max: int = 8
    reasoning_chars: int = REASONING_CHARS
    queries_max: int = 0

    def __post_init__(self) -> None:
        for name, value, (lo, hi) in (
            ("max_entities", self.entities_max, self.ENTITIES_RANGE),
            ("max_useful_chunks", self.useful_max, self.USEFUL_RANGE),
            ("reasoning_chars", self.reasoning_chars, self.REASONING_RANGE),
            ("max_retrieval_queries", self.queries_max, self.QUERIES_RANGE),
        ):
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be between {lo} and {hi}, got {value}")

    @property
    def head_suffix(self) -> str:
        """What the bounds add to the head's key (entities and reasoning): nothing at the defaults."""
        entities = "" if self.entities_max == self.ENTITIES_MAX else f"/e{self.entities_max}"
        reasoning = "" if self.reasoning_chars == self.REASONING_CHARS else f"/r{self.reasoning_chars}"
        return entities + reasoning

    @property
    def queries_suffix(self) -> str:
        """What ``max_retrieval_queries`` adds to the key of a form holding the branch after the decision."""
        return "" if self.queries_max == self.QUERIES_MAX else f"/q{self.queries_max}"

    @property
    def suffix(self) -> str:
        """What the bounds add to a compiled form's key: nothing at the defaults."""
        useful = "" if self.useful_max == self.USEFUL_MAX else f"/u{self.useful_max}"
        return self.head_suffix + useful + self.queries_suffix

    def for_prompt(self) -> dict[str, int]:
        """The bounds by the names the templates use: an option's value under its default's name."""
        names = "ENTITIES_MAX ENTITY_CHARS MISSING_MAX MISSING_CHARS CONTRADICTIONS_MAX CONTRADICTION_CHARS"
        names += " REASONING_CHARS USEFUL_MAX QUERIES_MAX QUERY_CHARS"
        return {name: getattr(self, name.lower(), getattr(self, name)) for name in names.split()}


B = SufficiencyBounds
DEFAULT_BOUNDS = SufficiencyBounds()

#: A letter or digit: ASCII ones, Latin-1 and Latin Extended letters, the other scripts of the Basic
#: Multilingual Plane (Greek to CJK and Hangul), fullwidth digits and letters.  Not punctuation or symbols.
WORD_CHAR_CLASS = (
    "[0-9A-Za-z\u00aa\u00b5\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u1fff"
    "\u2c00-\u2dff\u3040-\ud7ff\uf900-\ufdff\ufe70-\ufefc\uff10-\uff19\uff21-\uff3a"
    "\uff41-\uff5a\uff66-\uffdc]"
)
#: Free text holds a letter or digit among its first this many characters.  Why not anywhere: a bounded
#: string with a word anywhere is O(length²) automaton states to compile; within the first few, O(length).
WORD_WITHIN = 4
_WORD = re.compile(WORD_CHAR_CLASS)


def _ranges(char_class: str) -> list[tuple[int, int]]:
    """The code point ranges of a bracket class as this module writes them (no negation)."""
    pairs = re.findall(r"(\\.|[^\\])(?:-(\\.|[^\\]))?", char_class[1:-1])
    return [(ord(lo[-1]), ord((hi or lo)[-1])) for lo, hi in pairs]


def _without(char_class: str, removed: str) -> str:
    """``char_class`` less the characters of ``removed``, as a bracket class."""
    drop = _ranges(removed)
    kept = [c for lo, hi in _ranges(char_class) for c in range(lo, hi + 1) if not any(a <= c <= b for a, b in drop)]
    parts = []
    for _, run in itertools.groupby(enumerate(kept), lambda pair: pair[1] - pair[0]):
        codes = [chr(c) for _, c in run]
        lo, hi = ("\\" + c if c in "\\]-^[" else c for c in (codes[0], codes[-1]))
        parts.append(lo if len(codes) == 1 else lo + "-" + hi)
    return "[" + "".join(parts) + "]"


#: Characters of a string that are not a letter or digit (the first without the space): the alternatives
#: of :func:`word_string` are disjoint, so a backtracking matcher (Python's ``re``) stays linear.
_NON_WORD = _without(STRING_CHAR_CLASS, WORD_CHAR_CLASS)
_NON_WORD_FIRST = _without(STRING_FIRST_CHAR_CLASS, WORD_CHAR_CLASS)


def has_word(text: str) -> bool:
    """Whether ``text`` holds a letter or digit where the constraint asks for one (its first characters)."""
    return any(_WORD.fullmatch(char) for char in text[:WORD_WITHIN])


def word_string(max_len: int) -> Rx:
    """A JSON string of 1..``max_len`` characters, not starting with a space, with a letter or digit among
    its first :data:`WORD_WITHIN` characters: ``","`` or ``"--"`` names nothing.  The alternatives are
    split at the first letter or digit, so at most one matches a string."""
    char = Rx(STRING_CHAR_CLASS, STRING_CHAR_MAX_BYTES)
    word = Rx(WORD_CHAR_CLASS, STRING_CHAR_MAX_BYTES)
    options = [seq(word, repeat(char, 0, max_len - 1))]
    for at in range(1, min(WORD_WITHIN, max_len)):
        before = seq(
            Rx(_NON_WORD_FIRST, STRING_CHAR_MAX_BYTES), repeat(Rx(_NON_WORD, STRING_CHAR_MAX_BYTES), at - 1, at - 1)
        )
        options.append(seq(before, word, repeat(char, 0, max_len - 1 - at)))
    return seq(lit('"'), alt(*options), lit('"'))


def _worded(value: str, field: str) -> str:
    if not has_word(value):
        raise ValueError(f"{field} {value!r} names nothing: no letter or digit in its first {WORD_WITHIN} characters")
    return value


class EntityCoverage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entity: str = Field(min_length=1, max_length=B.ENTITY_CHARS)
    covered: bool


class SufficiencyOutput(BaseModel):
    """The generated form, in generation order: entities, contradictions and reasoning, then the decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: At most ``max_entities`` (checked against the bounds in the validation context, else the defaults).
    required_entities: list[EntityCoverage] = Field(min_length=1, max_length=B.ENTITIES_RANGE[1])
    contradictions: list[str] = Field(max_length=B.CONTRADICTIONS_MAX)
    #: At most ``reasoning_chars`` (checked against the bounds in the validation context, else the default).
    reasoning: str = Field(min_length=1, max_length=B.REASONING_RANGE[1])
    is_sufficient: bool
    missing_information: list[str] = Field(max_length=B.MISSING_MAX)
    #: Search queries for what is missing: only under ``max_retrieval_queries`` > 0 (absent, not empty, when off).
    retrieval_queries: list[str] | None = Field(default=None, max_length=B.QUERIES_RANGE[1])
    confidence: float = Field(ge=0.0, le=1.0)
    #: Prompt labels (``0..n-1``) of the useful chunks, ascending.
    useful_chunk_ids: list[int] = Field(max_length=B.USEFUL_RANGE[1])

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> SufficiencyOutput:
        """The rules the constraint enforces, checked again for outputs made without it.

        ``bounds`` in the validation context (a :class:`SufficiencyBounds`) sets the list and reasoning limits."""
        context = info.context if isinstance(info.context, dict) else {}
        bounds = context.get("bounds", DEFAULT_BOUNDS)
        if len(self.required_entities) > bounds.entities_max:
            raise ValueError(f"more than max_entities={bounds.entities_max} required entities")
        if len(self.useful_chunk_ids) > bounds.useful_max:
            raise ValueError(f"more than max_useful_chunks={bounds.useful_max} useful chunk ids")
        if len(self.reasoning) > bounds.reasoning_chars:
            raise ValueError(f"reasoning longer than reasoning_chars={bounds.reasoning_chars}")
        self._check_queries(bounds)
        for item in self.required_entities:
            _worded(item.entity, "entity")
        for text in self.missing_information:
            _worded(text, "missing_information item")
        for text in self.contradictions:
            _worded(text, "contradiction")
        _worded(self.reasoning, "reasoning")
        if self.is_sufficient and not all(e.covered for e in self.required_entities):
            raise ValueError("a required entity is not covered, so the context cannot be sufficient")
        if self.is_sufficient and self.missing_information:
            raise ValueError("a sufficient verdict has no missing_information")
        if not self.is_sufficient and not self.missing_information:
            raise ValueError("an insufficient verdict lists what is missing")
        if self.is_sufficient and not self.useful_chunk_ids:
            raise ValueError("a sufficient verdict names at least one useful chunk")
        ids = self.useful_chunk_ids
        if any(i < 0 for i in ids) or not ascending(ids):
            raise ValueError(f"useful_chunk_ids must be distinct labels in ascending order, got {ids}")
        return self

    def _check_queries(self, bounds: SufficiencyBounds) -> None:
        queries = self.retrieval_queries
        if bounds.queries_max == 0:
            if queries is not None:
                raise ValueError("retrieval_queries given, but max_retrieval_queries is 0 (off)")
            return
        if queries is None:
            raise ValueError(f"retrieval_queries missing (max_retrieval_queries={bounds.queries_max})")
        if len(queries) > bounds.queries_max:
            raise ValueError(f"more than max_retrieval_queries={bounds.queries_max} retrieval queries")
        for text in queries:
            if not 1 <= len(text) <= B.QUERY_CHARS:
                raise ValueError(f"a retrieval query holds 1 to {B.QUERY_CHARS} characters, got {len(text)}")
            _worded(text, "retrieval query")
        if self.is_sufficient and queries:
            raise ValueError("a sufficient verdict has no retrieval_queries")
        if not self.is_sufficient and not queries:
            raise ValueError("an insufficient verdict under max_retrieval_queries lists at least one query")


class CalibratedDecision(BaseModel):
    """``sufficient = score >= threshold`` for a threshold chosen on golden data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    score_name: str
    score: float | None
    threshold: float
    sufficient: bool
    reason: str
    #: Where the threshold turned the model's ``true`` into insufficient: what is missing and what to search for,
    #: derived from the verdict (the model, having said sufficient, named nothing missing).  Empty otherwise.
    gap: list[str] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)


class SufficiencyVerdict(BaseModel):
    """A sufficiency verdict in the caller's terms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Fields left out of the verdict's JSON while ``None`` (an option that is off); a Parquet file, whose schema
    #: holds them, drops them again on reading (:func:`suffice.rows.tables.result_schema`).
    omitted_when_none: ClassVar[tuple[str, ...]] = ("retrieval_queries",)

    is_sufficient: bool
    required_entities: list[str]
    coverage: dict[str, bool]
    missing_information: list[str]
    #: Search queries for the missing information (``max_retrieval_queries`` > 0); ``None`` when the option is off,
    #: and then left out of the verdict's JSON, which stays as it was without the option.
    retrieval_queries: list[str] | None = None
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
    #: Why the constraint left the model only ``false`` (then ``p_sufficient`` is still the model's own
    #: probability of ``true``, and the forced ``false`` is what routes).
    forced_by: Literal["uncovered_entity", "no_chunks_shown"] | None = None
    #: The lists the model filled to their limit (``max_entities``, ``max_useful_chunks``, ...): it may have
    #: had more to name.
    at_limit: list[str] = Field(default_factory=list)

    # No return annotation: pydantic would take it for the serialized schema and lose the fields' own.
    @model_serializer(mode="wrap")
    def _without_queries_when_off(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        off = {name for name in self.omitted_when_none if getattr(self, name) is None}
        return {key: value for key, value in handler(self).items() if key not in off}

    def to_seed(self) -> dict[str, Any]:
        """The seed's (RAGFlow's) JSON shape; see :meth:`to_ragflow`."""
        return self.to_ragflow()

    def missing(self, sufficient: bool) -> list[str]:
        """What is missing under the decision ``sufficient`` (the one that routes): none when sufficient, even
        where the model listed some before a calibrated threshold overrode it; the calibrated decision's gap
        where the threshold overrode the model's ``true``."""
        if sufficient:
            return []
        if self.decision is not None and self.decision.gap:
            return list(self.decision.gap)
        return list(self.missing_information)

    def to_ragflow(self, sufficient: bool | None = None) -> dict[str, Any]:
        """The seed's JSON shape, both decision keys included (``sufficient`` overrides the model's decision, and
        ``missing_information`` follows it: see :meth:`missing`)."""
        decided = self.is_sufficient if sufficient is None else sufficient
        return {
            "Sufficient Context": decided,
            "is_sufficient": decided,
            "required_entities": list(self.required_entities),
            "coverage": dict(self.coverage),
            "missing_information": self.missing(decided),
            "contradictions": list(self.contradictions),
            "confidence": self.confidence,
            "reasoning": self.reasoning,
            "useful_chunk_ids": list(self.useful_chunk_ids),
        }


def _string_list(max_items: int, max_chars: int, min_items: int = 0) -> Rx:
    return json_list(word_string(max_chars), min_items, max_items)


#: Where the decision starts, and where the request-independent segments end.
DECISION_KEY = '"is_sufficient":'
IDS_KEY = '"useful_chunk_ids":['
UNCOVERED = '"covered":false'


#: Where every verdict starts: prefilled, not decoded; each prefix ends at a token boundary of a typical verdict.
HEAD_PREFIX = '{"required_entities":['
#: What follows each decision value up to the first thing the model chooses.
AFTER_PREFIX = {True: ',"missing_information":[],"confidence":', False: ',"missing_information":'}
#: The same under ``max_retrieval_queries`` > 0: a sufficient verdict's query list is empty.
AFTER_PREFIX_QUERIES = {
    True: ',"missing_information":[],"retrieval_queries":[],"confidence":',
    False: AFTER_PREFIX[False],
}


def after_prefix(decision: bool, bounds: SufficiencyBounds) -> str:
    return (AFTER_PREFIX_QUERIES if bounds.queries_max else AFTER_PREFIX)[decision]


def _entity(covered: Rx) -> Rx:
    return json_object([("entity", word_string(B.ENTITY_CHARS)), ("covered", covered)])


def _entities_open(all_covered: bool | None, bounds: SufficiencyBounds) -> Rx:
    """The entity list after its ``[``: any (``None``), all covered (``True``), or one not covered (``False``)."""
    most = bounds.entities_max
    if all_covered is not False:
        covered = JSON_BOOL if all_covered is None else lit("true")
        return seq(_entity(covered), repeat(seq(lit(","), _entity(covered)), 0, most - 1), lit("]"))
    options = []
    for before in range(most):
        earlier = [seq(_entity(lit("true")), lit(","))] * before
        after = repeat(seq(lit(","), _entity(JSON_BOOL)), 0, most - 1 - before)
        options.append(seq(*earlier, _entity(lit("false")), after, lit("]")))
    return alt(*options)


def _head_body(all_covered: bool | None, bounds: SufficiencyBounds) -> Rx:
    """The head after :data:`HEAD_PREFIX`: entities, contradictions and the reasoning, up to the decision."""
    return seq(
        _entities_open(all_covered, bounds),
        lit(',"contradictions":'),
        _string_list(B.CONTRADICTIONS_MAX, B.CONTRADICTION_CHARS),
        lit(',"reasoning":'),
        word_string(bounds.reasoning_chars),
        lit("," + DECISION_KEY),
    )


def _head(all_covered: bool | None, bounds: SufficiencyBounds) -> Rx:
    return lit(HEAD_PREFIX) + _head_body(all_covered, bounds)


def _after_body(decision: bool, bounds: SufficiencyBounds) -> Rx:
    """What follows :func:`after_prefix` up to the id list.  ``false`` names what is missing: at least one
    item, each with a word (:func:`word_string`), whether or not an entity is uncovered; under
    ``max_retrieval_queries`` > 0, then 1 to that many search queries for it."""
    ids = lit("," + IDS_KEY)
    if decision:
        return seq(UNIT_INTERVAL, ids)
    missing = _string_list(B.MISSING_MAX, B.MISSING_CHARS, min_items=1)
    members: list[tuple[str, Rx]] = [("confidence", UNIT_INTERVAL)]
    if bounds.queries_max:
        members.insert(0, ("retrieval_queries", _string_list(bounds.queries_max, B.QUERY_CHARS, min_items=1)))
    return seq(missing, lit(","), json_members(members), ids)


def _after(decision: bool, bounds: SufficiencyBounds) -> Rx:
    return lit(after_prefix(decision, bounds)) + _after_body(decision, bounds)


def _ids(n_chunks: int, at_least_one: bool, useful_max: int) -> Rx:
    """The id list after its ``[`` and the closing ``]}``, in any order (:func:`ascending_ids` checks order)."""
    most = min(useful_max, n_chunks)
    if most == 0:
        return lit("]}")
    label = alt(*[lit(str(k)) for k in range(n_chunks)])
    listed = seq(label, repeat(seq(lit(","), label), 0, most - 1))
    return seq(listed if at_least_one else opt(listed), lit("]}"))


def _whole(n_chunks: int, bounds: SufficiencyBounds) -> Rx:
    """Every output the segments can produce but for the ids' order, in one pattern."""
    useful = bounds.useful_max
    insufficient = seq(lit("false"), _after(False, bounds), _ids(n_chunks, at_least_one=False, useful_max=useful))
    if n_chunks == 0:  # nothing to rest an answer on
        return seq(_head(None, bounds), insufficient)
    sufficient = seq(lit("true"), _after(True, bounds), _ids(n_chunks, at_least_one=True, useful_max=useful))
    return alt(seq(_head(True, bounds), alt(sufficient, insufficient)), seq(_head(False, bounds), insufficient))


@lru_cache(maxsize=16)
def _segments(bounds: SufficiencyBounds) -> dict[str, Segment]:
    """The request-independent segments: compiled once per engine and bounds, whatever the input.
    The head depends on ``max_entities`` and ``reasoning_chars``, the branches after the decision on
    ``max_retrieval_queries``: their keys name them unless they are the defaults."""
    queries = bounds.queries_suffix
    return {
        "head": Segment.from_rx(
            _head_body(None, bounds), key="sufficiency/head" + bounds.head_suffix, prefix=HEAD_PREFIX
        ),
        "decision": Segment.from_rx(JSON_BOOL, key="sufficiency/decision", logprobs=True),
        "forced-false": Segment.from_rx(lit("false"), key="sufficiency/forced-false", logprobs=True),
        "true": Segment.from_rx(
            _after_body(True, bounds), key="sufficiency/after-true" + queries, prefix=after_prefix(True, bounds)
        ),
        "false": Segment.from_rx(
            _after_body(False, bounds), key="sufficiency/after-false" + queries, prefix=after_prefix(False, bounds)
        ),
    }


@lru_cache(maxsize=1024)
def id_list_segment(n_chunks: int, *, required: bool, useful_max: int = B.USEFUL_MAX) -> Segment:
    """The whole id list in one speculative segment, any order; a list out of order is cut by
    :func:`settle_ids` and continued by :func:`id_segment`.  ``required``: at least one id."""
    most = min(useful_max, n_chunks)
    bound = "" if most == min(B.USEFUL_MAX, n_chunks) else f"/u{most}"  # the same pattern, the same key
    return Segment.from_rx(
        _ids(n_chunks, at_least_one=required and n_chunks > 0, useful_max=useful_max),
        key=f"ids/{n_chunks}/list" + ("/some" if required else "") + bound,
        per_request=True,
        speculative=True,
    )


def settle_ids(text: str, *, n_chunks: int) -> str:
    """``text`` up to the last id of its list's ascending start (closed there if that id is the last label)."""
    ids = listed_ids(text)
    if ids is None or ascending(ids):
        return text
    keep = next(k for k in range(1, len(ids)) if ids[k - 1] >= ids[k])
    kept = text.rsplit(IDS_KEY, 1)[0] + IDS_KEY + ",".join(str(k) for k in ids[:keep])
    return kept + "]}" if ids[keep - 1] == n_chunks - 1 else kept


@lru_cache(maxsize=4096)
def id_segment(lo: int, n_chunks: int, *, last: bool) -> Segment:
    """After a list cut by :func:`settle_ids`: the next id from ``lo..n-1``, or the end of the list.
    ``last``: the bound is reached, so the id closes the list too."""
    options = [lit("," + str(k) + ("]}" if last or k == n_chunks - 1 else "")) for k in range(lo, n_chunks)]
    return Segment.from_rx(
        alt(*options, lit("]}")), key=f"ids/{n_chunks}/{lo}" + ("/last" if last else ""), per_request=True
    )


def listed_ids(text: str) -> list[int] | None:
    """The ids listed so far in ``text`` (``None`` before the list starts)."""
    if IDS_KEY not in text:
        return None
    body = text.rsplit(IDS_KEY, 1)[1].rstrip("]}")
    return [int(part) for part in body.split(",") if part]  # a list cut off after a comma too


def ascending_ids(text: str) -> bool:
    """What the whole pattern cannot say: the listed ids ascend (so none repeats)."""
    return ascending(listed_ids(text) or [])


def forced_insufficient(text: str) -> bool:
    """Whether the entities generated so far leave only ``is_sufficient: false``."""
    return UNCOVERED in text.split(DECISION_KEY, 1)[0]


def sufficiency_constraint(n_chunks: int, bounds: SufficiencyBounds = DEFAULT_BOUNDS) -> Constraint:
    """The constraint for a request showing ``n_chunks`` chunks (labelled ``0..n-1``) under ``bounds``.

    Segments: the head, the decision alone (with log-probabilities), the branch up to the id list, the ids.
    An uncovered entity leaves only ``false``; ``false`` names what is missing; ``true`` names at least one
    useful chunk.  Different bounds are different compiled forms: their keys say which (the defaults add
    nothing), and ``max_bytes`` grows with them.
    """
    return _constraint(n_chunks, bounds)


@lru_cache(maxsize=1024)
def _constraint(n_chunks: int, bounds: SufficiencyBounds) -> Constraint:
    """One compiled form per chunk count and bounds (the defaults passed or not)."""
    segments = _segments(bounds)
    useful = bounds.useful_max

    def continuation(text: str) -> Segment | None:
        if text.endswith("]}"):
            return None
        ids = listed_ids(text)
        if ids is not None:
            if text.endswith(IDS_KEY):
                return id_list_segment(n_chunks, required=DECISION_KEY + "true" in text, useful_max=useful)
            return id_segment(ids[-1] + 1, n_chunks, last=len(ids) + 1 >= useful)
        if text.endswith(DECISION_KEY):
            return segments["forced-false" if n_chunks == 0 or forced_insufficient(text) else "decision"]
        if text.endswith(DECISION_KEY + "true"):
            return segments["true"]
        if text.endswith(DECISION_KEY + "false"):
            return segments["false"]
        return None

    return Constraint.from_rx(
        _whole(n_chunks, bounds),
        key=f"sufficiency/{n_chunks}{bounds.suffix}",
        head=segments["head"],
        continuation=continuation,
        coarse_head=_coarse_head(bounds),
        check=ascending_ids,
        settle=partial(settle_ids, n_chunks=n_chunks),
        completion_bound=_completion_bound(n_chunks, bounds),
    )


def _completion_bound(n_chunks: int, bounds: SufficiencyBounds) -> int:
    """The most tokens a verdict decodes (:attr:`Constraint.max_completion_tokens`): the head, the decision, the
    branch after it, the id list (speculative: decoded whole, even where it is cut back) and, after a cut (at least
    one id kept), one segment per further id up to the list's bound, the last closing it.  The coarse path (one head
    segment up to the ids) decodes the same text with fewer end-of-sequence tokens."""
    segments = _segments(bounds)
    tokens = segments["head"].max_tokens
    tokens += max(segments["decision"].max_tokens, segments["forced-false"].max_tokens)
    tokens += max(segments["true"].max_tokens, segments["false"].max_tokens)
    tokens += max(
        id_list_segment(n_chunks, required=required, useful_max=bounds.useful_max).max_tokens
        for required in (False, True)
    )
    most = min(bounds.useful_max, n_chunks)
    if most > 1:
        tokens += (most - 1) * id_segment(0, n_chunks, last=True).max_tokens
    return tokens


@lru_cache(maxsize=16)
def _coarse_head(bounds: SufficiencyBounds) -> Segment:
    """For engines without a KV cache across calls: everything up to the id list in one segment."""
    rx = alt(
        seq(_head_body(True, bounds), alt(lit("true") + _after(True, bounds), lit("false") + _after(False, bounds))),
        seq(_head_body(False, bounds), lit("false") + _after(False, bounds)),
    )
    key = "sufficiency/coarse-head" + bounds.head_suffix + bounds.queries_suffix
    return Segment.from_rx(rx, key=key, logprobs=True, prefix=HEAD_PREFIX)


def at_limit(output: SufficiencyOutput, bounds: SufficiencyBounds = DEFAULT_BOUNDS) -> list[str]:
    """The lists ``output`` filled to their bound: the model may have had more to name."""
    sizes = [
        ("required_entities", len(output.required_entities), bounds.entities_max),
        ("contradictions", len(output.contradictions), B.CONTRADICTIONS_MAX),
        ("missing_information", len(output.missing_information), B.MISSING_MAX),
        ("useful_chunk_ids", len(output.useful_chunk_ids), bounds.useful_max),
    ]
    if bounds.queries_max:
        sizes.append(("retrieval_queries", len(output.retrieval_queries or []), bounds.queries_max))
    return [name for name, size, most in sizes if size >= most]


def to_verdict(
    output: SufficiencyOutput,
    chunk_ids: list[ChunkId],
    *,
    prompt_version: str,
    truncated_chunk_ids: list[ChunkId],
    omitted_chunk_ids: list[ChunkId],
    question_truncated: bool,
    bounds: SufficiencyBounds = DEFAULT_BOUNDS,
) -> SufficiencyVerdict:
    """Map prompt labels back to the caller's chunk ids; a repeated entity is covered only if every mark says so.

    ``forced_by`` records why the constraint allowed only ``false`` (an uncovered entity, or no chunk shown)."""
    coverage: dict[str, bool] = {}
    for item in output.required_entities:
        coverage[item.entity] = coverage.get(item.entity, True) and item.covered
    forced_by: Literal["uncovered_entity", "no_chunks_shown"] | None = (
        "uncovered_entity" if not all(coverage.values()) else None if chunk_ids else "no_chunks_shown"
    )
    return SufficiencyVerdict(
        is_sufficient=output.is_sufficient,
        required_entities=list(coverage),
        coverage=coverage,
        missing_information=list(output.missing_information),
        retrieval_queries=None if output.retrieval_queries is None else list(output.retrieval_queries),
        contradictions=list(output.contradictions),
        confidence=output.confidence,
        reasoning=output.reasoning,
        useful_chunk_ids=[chunk_ids[label] for label in output.useful_chunk_ids],
        prompt_version=prompt_version,
        truncated_chunk_ids=truncated_chunk_ids,
        omitted_chunk_ids=omitted_chunk_ids,
        question_truncated=question_truncated,
        forced_by=forced_by,
        at_limit=at_limit(output, bounds),
    )


_RAGFLOW_PROPERTIES: dict[str, Any] = {
    "Sufficient Context": {"type": "boolean"},
    "is_sufficient": {"type": "boolean"},
    "required_entities": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "coverage": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "missing_information": {"type": "array", "items": {"type": "string"}},
    "contradictions": {"type": "array", "items": {"type": "string"}},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "reasoning": {"type": "string"},
    "useful_chunk_ids": {"type": "array", "items": {"type": ["integer", "string"]}, "uniqueItems": True},
}
#: JSON schema of the seed's exported shape, for consumers that validate it: every property required.
RAGFLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": list(_RAGFLOW_PROPERTIES),
    "properties": _RAGFLOW_PROPERTIES,
}
