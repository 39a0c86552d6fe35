"""A response cut into the sentences and claims that are judged one by one.

:func:`segment` is deterministic and pure: the same response always gives the same
segments, in order, without overlap, each one's ``text`` exactly
``response[start:end]`` (surrounding whitespace left out).  Every non-whitespace
character of the response is in exactly one segment, except those of lines that are
markup only and carry no claim: a code fence (```` ``` ````, ``~~~``, with its info
string), a table's delimiter row (``|---|:--:|``) and a thematic break or setext
underline (``---``, ``***``, ``___``, ``===``).

Blocks first, line by line (lines end at every break :meth:`str.splitlines` knows, the
breaks a model may read as new lines):

- a fenced code block gives one ``code_line`` segment per non-blank line (an unclosed
  fence runs to the end, as in CommonMark);
- a heading (``#`` to ``######``, or a one-line paragraph over a ``===`` / ``---``
  underline) is one ``heading``;
- a table row (a line starting with ``|``, or a line with a ``|`` above or below a
  delimiter row) is one ``table_row``;
- a list item (``-``, ``*``, ``+``, ``•``, ``1.``, ``1)``) is one ``list_item`` with the
  lines that continue it (indented, or after a line that ends mid-sentence; up to a blank
  line or the start of another block), whatever sentences it holds: an item is one
  claim, as a table row is, and cutting it would leave fragments such as a lone
  ``Dosage:`` to judge;
- a paragraph (lines up to a blank line or another block; a run of ``>`` lines is a
  paragraph of its own) is cut into ``sentence`` segments.

A sentence ends after ``.``, ``!``, ``?``, ``…`` (a run of them: ``?!``, ``...``) and the
closing quotes, brackets and emphasis marks right after them (``."``, ``.)``, ``.**``)
and an adjacent citation (``.[1]``), when whitespace or the paragraph's end follows, and not:

- inside a number, version, URL, e-mail or file name (no whitespace follows the ``.``);
- before a lowercase letter (``e.g. the``, ``approx. three``, ``Really? yes``);
- after a title or connective that never ends one (``Dr.``, ``Mr.``, ``Mrs.``, ``Ms.``,
  ``Prof.``, ``St.``, ``vs.``, ``e.g.``, ``i.e.``, ``cf.``, ``et al.``, ``U.S.``, ...) or a single
  capital initial (``J. K. Rowling``; so ``vitamin C. The`` stays one segment);
- after ``No.``, ``Fig.``, ``Eq.``, ``Vol.``, ``p.``, ``pp.``, ``approx.`` ... before a digit (``No. 5``);
- after ``etc.``, ``Inc.``, ``Ltd.``, ``Jr.``, ``a.m.`` ... unless an uppercase letter follows
  (``etc.) and``, ``Inc. 2024`` do not end one; ``etc. The`` does);
- inside a quotation or bracket closed in the same paragraph (``"Stop. Now." and``,
  ``(One. Two.)``), or an inline code span: a quote is one claim, attributed.  One never
  closed (a lone ``"`` for inches, a stray ``(``) protects nothing.

CJK sentences end after ``。``, ``！``, ``？`` (and ``｡``) whether or not whitespace follows,
except when a closing quote after the mark is followed by more of the sentence
(``他说：「好。」然后走了。`` is one).

No segment is longer than ``max_chars`` (default :data:`MAX_SEGMENT_CHARS`): a longer one
is cut into pieces of the same kind, each at the last whitespace after ``,``, ``;`` or
``:`` (or right after ``，``, ``、``, ``；``, ``：``) in the second half of the limit, else at the
last whitespace (or CJK clause mark), else (none at all) at exactly ``max_chars`` characters.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["MAX_SEGMENT_CHARS", "Segment", "SegmentKind", "segment"]

#: The default longest segment, in characters: far above a sentence (a sentence of
#: 1,000 characters is ~200 words), so only a response with no sentence end is cut.
MAX_SEGMENT_CHARS = 1000

SegmentKind = Literal["sentence", "list_item", "table_row", "code_line", "heading"]


class Segment(BaseModel):
    """One sentence or claim of a response: ``response[start:end] == text``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: 0-based position among the response's segments.
    index: int
    start: int
    end: int
    #: The segment's characters, without surrounding whitespace (never empty).
    text: str
    kind: SegmentKind

    @model_validator(mode="after")
    def _consistent(self) -> Segment:
        # A segment read back from a row must still point at its own text.
        if self.index < 0 or self.start < 0:
            raise ValueError("index and start must be >= 0")
        if self.end - self.start != len(self.text):
            raise ValueError(f"end - start = {self.end - self.start}, but the text has {len(self.text)} characters")
        if not self.text or self.text != self.text.strip():
            raise ValueError("text must be non-empty and carry no surrounding whitespace")
        return self


# --- blocks -----------------------------------------------------------------------------

_FENCE = re.compile(r"\s*(`{3,}(?=[^`]*$)|~{3,})")
_DELIMITER_ROW = re.compile(r"\s*\|?(?:\s*:?-+:?\s*\|)+(?:\s*:?-+:?)?\s*")
_THEMATIC_BREAK = re.compile(r"\s*(?:([-*_])(?:\s*\1){2,}|={3,})\s*")
_UNDERLINE = re.compile(r"\s*(?:-{3,}|={3,})\s*")
_HEADING = re.compile(r"\s*#{1,6}(?:\s|$)")
_LIST_ITEM = re.compile(r"\s*(?:[-*+•]|\d{1,9}[.)])(?:\s|$)")

# Line types.  Markup lines are in no segment; code, heading and table lines are one each;
# items take the text lines after them; text and quote lines make paragraphs.
_BLANK, _MARKUP, _CODE, _HEADING_LINE, _TABLE, _ITEM, _QUOTE, _TEXT = range(8)


def _lines(response: str) -> list[tuple[int, int]]:
    """(start, end) of each line, its break left out."""
    lines = response.splitlines(keepends=True)
    starts = itertools.accumulate(map(len, lines), initial=0)
    return [(start, start + len(line.splitlines()[0])) for start, line in zip(starts, lines, strict=False)]


def _types(response: str, lines: list[tuple[int, int]]) -> list[int]:
    types: list[int] = []
    fence: str | None = None
    table = False
    for start, end in lines:
        line = response[start:end]
        stripped = line.strip()
        if fence is not None:
            # A fence closes on a line of the same character, at least as long, and nothing else.
            closes = stripped.startswith(fence) and not stripped.strip(fence[0])
            types.append(_MARKUP if closes else _CODE if stripped else _BLANK)
            fence = None if closes else fence
            continue
        delimiter = False
        if not stripped:
            kind = _BLANK
        elif opening := _FENCE.match(line):
            kind, fence = _MARKUP, opening.group(1)
        elif "|" in line and _DELIMITER_ROW.fullmatch(line):
            kind, delimiter = _MARKUP, True
            # A GFM table's header row needs no leading pipe: the delimiter row under it says it is one.
            if types and types[-1] == _TEXT and "|" in response[slice(*lines[len(types) - 1])]:
                types[-1] = _TABLE
        elif _THEMATIC_BREAK.fullmatch(line):
            kind = _MARKUP
        elif _HEADING.match(line):
            kind = _HEADING_LINE
        elif stripped.startswith("|") or (table and "|" in line and not _LIST_ITEM.match(line)):
            kind = _TABLE
        elif _LIST_ITEM.match(line):
            kind = _ITEM
        else:
            kind = _QUOTE if stripped.startswith(">") else _TEXT
        types.append(kind)
        # A table runs from its delimiter row over the rows under it.
        table = delimiter or (table and kind == _TABLE)
    return types


def _blocks(response: str) -> Iterator[tuple[int, int, SegmentKind | None]]:
    """(start, end, kind) of each block; kind None for a paragraph, to be cut into sentences."""
    lines = _lines(response)
    types = _types(response, lines)
    one_line: dict[int, SegmentKind] = {_CODE: "code_line", _HEADING_LINE: "heading", _TABLE: "table_row"}
    i = 0
    while i < len(lines):
        kind = types[i]
        if kind in (_BLANK, _MARKUP):
            i += 1
            continue
        if kind in one_line:
            yield lines[i][0], lines[i][1], one_line[kind]
            i += 1
            continue
        # A paragraph runs on over lines of its own type.  An item over the text lines after it that are indented
        # or continue a sentence it left open: CommonMark would take an unindented line after ``- Fact.`` too
        # (a lazy line), but a model writing one means a new paragraph (``In summary, ...``), another claim.
        follows = _TEXT if kind == _ITEM else kind
        j = i + 1
        while j < len(lines) and types[j] == follows:
            line, above = response[slice(*lines[j])], response[slice(*lines[j - 1])]
            if kind == _ITEM and not line[:1].isspace() and _ENDS_A_SENTENCE.search(above):
                break
            j += 1
        if kind == _ITEM:
            yield lines[i][0], lines[j - 1][1], "list_item"
        elif kind == _TEXT and j == i + 1 and j < len(lines) and _UNDERLINE.fullmatch(response[slice(*lines[j])]):
            yield lines[i][0], lines[i][1], "heading"
        else:
            yield lines[i][0], lines[j - 1][1], None
        i = j


# --- sentences --------------------------------------------------------------------------

_TERMINATORS = ".!?…‼⁇⁈⁉"
_CJK_TERMINATORS = "。！？｡"
_ALL_TERMINATORS = _TERMINATORS + _CJK_TERMINATORS
# What may close a sentence after its mark and still belong to it: quotes, brackets, emphasis and code marks.
_CLOSERS = "\"'”’»」』）】》〉)]}*_`"
_PAIRS = dict(zip("([{（【「『《〈“«", ")]}）】」』》〉”»", strict=True))
_OPENERS = set(_PAIRS) | {'"'}
_CLOSING = {close: open_ for open_, close in _PAIRS.items()}
_CITATION = re.compile(r"\[[^\[\]\s]{1,64}\](?!\()")
_BACKTICKS = re.compile("`+")
_ENDS_A_SENTENCE = re.compile(f"[{re.escape(_ALL_TERMINATORS)}][{re.escape(_CLOSERS)}]*(?:{_CITATION.pattern})*\\s*$")
_TOKEN = re.compile(r"[\w.]*$")

# Abbreviations, as lowercase tokens without their last period.
_NEVER_ENDS = frozenset(
    {"dr", "mr", "mrs", "ms", "mx", "prof", "st", "mt", "ft", "gen", "col", "capt", "lt", "sgt", "rev", "hon"}
    | {"gov", "sen", "vs", "v", "e.g", "i.e", "cf", "viz", "al", "u.s", "u.k", "u.n"}
)
_BEFORE_NUMBER = frozenset(
    {"no", "nos", "fig", "figs", "eq", "eqs", "vol", "vols", "p", "pp", "ch", "sec", "art", "approx", "ca", "nr"}
)
_ENDS_BEFORE_CAPITAL = frozenset({"etc", "inc", "ltd", "co", "corp", "jr", "sr", "a.m", "p.m"})


def _protected(span: str) -> list[int]:
    """For each position k, how many quotations, brackets or code spans closed in ``span`` hold it strictly
    inside (a cut between k-1 and k would break one)."""
    depth = [0] * (len(span) + 1)

    def hold(first: int, last: int) -> None:
        depth[first + 1] += 1
        depth[last + 1] -= 1

    # A code span opens at a run of backticks and closes at the next run of the same length (CommonMark); a run
    # with none after it is literal.
    in_code = [False] * len(span)
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(span)]
    i = 0
    while i < len(runs):
        first, length = runs[i][0], runs[i][1] - runs[i][0]
        closing = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == length), None)
        if closing is not None:
            hold(first, runs[closing][1] - 1)
            in_code[first : runs[closing][1]] = [True] * (runs[closing][1] - first)
        i = i + 1 if closing is None else closing + 1
    stack: list[tuple[str, int]] = []
    # How many of each opener the stack holds, so that a closer with none open is ignored without a search.
    open_count: dict[str, int] = {}

    def push(opener: str, k: int) -> None:
        stack.append((opener, k))
        open_count[opener] = open_count.get(opener, 0) + 1

    def close(opener: str, k: int) -> None:
        # Openers left unclosed inside this pair never close: they protect nothing.
        while True:
            char, first = stack.pop()
            open_count[char] -= 1
            if char == opener:
                hold(first, k)
                return

    for k, char in enumerate(span):
        if in_code[k]:
            continue
        if char == '"':
            # A straight quote opens where a word starts after it, else closes.
            before = span[k - 1] if k else " "
            after = span[k + 1] if k + 1 < len(span) else " "
            if (before.isspace() or before in _OPENERS) and not after.isspace():
                push(char, k)
            elif open_count.get(char):
                close(char, k)
        elif char in _PAIRS:
            push(char, k)
        elif char in _CLOSING and open_count.get(_CLOSING[char]):
            close(_CLOSING[char], k)
    for k in range(1, len(depth)):
        depth[k] += depth[k - 1]
    return depth


def _ends_here(span: str, mark: int, after: int, cut: int, inside: list[int]) -> bool:
    """Whether a sentence ends at ``cut``: its marks are ``span[mark:after]``, closers after them up to ``cut``."""
    if cut >= len(span) or inside[cut]:
        return False
    cjk = any(c in _CJK_TERMINATORS for c in span[mark:after])
    following = span[cut]
    if not following.isspace():
        # CJK runs on without spaces, but a quote closed after the mark and followed by text is mid-sentence.
        return cjk and (cut == after or following in _OPENERS or following in _ALL_TERMINATORS)
    if cjk:
        return True
    next_word = cut
    while next_word < len(span) and span[next_word].isspace():
        next_word += 1
    if next_word == len(span):
        return False
    following = span[next_word]
    if following.islower():
        return False
    if span[mark:after] != ".":
        return True
    token = _TOKEN.search(span, max(0, mark - 32), mark)
    word = token.group().lstrip(".").lower() if token else ""
    if word in _NEVER_ENDS or (len(word) == 1 and span[mark - 1].isupper()):
        return False
    if word in _BEFORE_NUMBER and following.isdigit():
        return False
    return not (word in _ENDS_BEFORE_CAPITAL and not following.isupper())


def _sentences(span: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the sentences of a paragraph, relative to it, whitespace included."""
    inside = _protected(span)
    start = 0
    k = 0
    while k < len(span):
        if span[k] not in _ALL_TERMINATORS:
            k += 1
            continue
        mark = k
        while k < len(span) and span[k] in _ALL_TERMINATORS:
            k += 1
        after = k
        while k < len(span) and span[k] in _CLOSERS:
            k += 1
        while citation := _CITATION.match(span, k):
            k = citation.end()
        if _ends_here(span, mark, after, k, inside):
            yield start, k
            start = k
    yield start, len(span)


# --- the whole ----------------------------------------------------------------------------


def _stripped(response: str, start: int, end: int) -> tuple[int, int]:
    while start < end and response[start].isspace():
        start += 1
    while end > start and response[end - 1].isspace():
        end -= 1
    return start, end


_CJK_CLAUSE_ENDS = "，、；："
_CLAUSE_ENDS = ",;:" + _CJK_CLAUSE_ENDS


def _bounded(response: str, start: int, end: int, max_chars: int) -> Iterator[tuple[int, int]]:
    """``response[start:end]`` (stripped, non-empty) in pieces of at most ``max_chars`` characters."""
    while end - start > max_chars:
        # A cut at whitespace offset w leaves a piece of w characters: w may be max_chars itself.
        # CJK clause marks need no whitespace after them to be a place to cut.
        breaks = [
            w
            for w in range(max_chars, 0, -1)
            if response[start + w].isspace() or response[start + w - 1] in _CJK_CLAUSE_ENDS
        ]
        clause = next((w for w in breaks if w > max_chars // 2 and response[start + w - 1] in _CLAUSE_ENDS), None)
        cut = clause or (breaks[0] if breaks else max_chars)
        yield _stripped(response, start, start + cut)
        start = _stripped(response, start + cut, end)[0]
    yield start, end


def segment(response: str, *, max_chars: int = MAX_SEGMENT_CHARS) -> list[Segment]:
    """The sentences and claims of ``response``, in order, with their offsets into it.

    The rules are the module's (:mod:`suffice.gates.recovery.segments`).  No segment is longer than
    ``max_chars``: a longer sentence, item, row or line is cut, at whitespace where there is any.  A response with
    no sentence end is one segment; one of only whitespace and markup has none.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a whole number >= 1, not {max_chars!r}")
    pieces: list[tuple[int, int, SegmentKind]] = []
    for block_start, block_end, kind in _blocks(response):
        parts = (
            [(block_start, block_end)]
            if kind is not None
            else [(block_start + s, block_start + e) for s, e in _sentences(response[block_start:block_end])]
        )
        for part_start, part_end in parts:
            start, end = _stripped(response, part_start, part_end)
            if start < end:
                pieces.extend((s, e, kind or "sentence") for s, e in _bounded(response, start, end, max_chars))
    return [
        Segment(index=i, start=start, end=end, text=response[start:end], kind=kind)
        for i, (start, end, kind) in enumerate(pieces)
    ]
