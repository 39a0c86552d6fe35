"""JSONL in and out, whatever the lines hold.

Reading: every non-blank line becomes one record, or an :class:`InvalidRecord`
saying why it is not one (not UTF-8, not JSON, a number too long to convert, nesting
too deep for the parser), so that it still gets its own error line and the run goes
on.  A byte-order mark and CRLF line ends are accepted.

Writing: a row is one line of UTF-8 JSON.  Strings that cannot be encoded as UTF-8
(a lone surrogate such as ``"\\ud800"`` read from an input's escape) are written as
JSON escapes instead, so the line is valid and reads back to the same string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.records.compressed import numbered_lines
from suffice.records.item import InvalidRecord, RepeatedKeys

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SourceLine:
    """One non-blank input line: its 1-based line number and its parsed record."""

    line: int
    record: object


def _marking_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` keeps the last of two equal keys (``{"id": "b", "id": "c"}``
    would be judged as ``c``), so such an object is marked
    (:class:`~suffice.records.item.RepeatedKeys`), and reading a record or chunk from it
    is that record's error (42 us a line more on the bundled records, against
    seconds a verdict; an HTTP body of many items still judges the others)."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    repeated: set[str] = set()
    for key, _ in pairs:
        (repeated if key in seen else seen).add(key)
    marked = RepeatedKeys(pairs)
    marked.repeated = frozenset(repeated)
    return marked


#: A JSON string, escapes included (possessive: linear, no backtracking).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')


def containers(raw: bytes) -> int:
    """The objects and arrays in JSON text ``raw`` (its brackets outside strings), counted in C without parsing:
    what a parse would build, bounded before anything is built."""
    outside = _STRING.sub(b"", raw)
    return outside.count(b"{") + outside.count(b"[")


def parse_line(raw: bytes, number: int, max_containers: int | None = None) -> object:
    """The JSON value of one input line, or an :class:`InvalidRecord` saying why not (also when it holds more than
    ``max_containers`` objects and arrays: refused before it is parsed, so its memory is never spent)."""
    if max_containers is not None and (found := containers(raw)) > max_containers:
        return InvalidRecord(line=number, message=f"holds {found} objects and arrays: at most {max_containers}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start : exc.start + 1]
        return InvalidRecord(line=number, message=f"is not UTF-8 (byte {exc.start}: {byte!r})")
    try:
        # Without its line end, so a position in the message is on this line.
        return json.loads(text.rstrip("\r\n"), object_pairs_hook=_marking_repeats)
    except json.JSONDecodeError as exc:
        return InvalidRecord(line=number, message=f"is not valid JSON: {exc}")
    except ValueError as exc:  # e.g. an integer longer than Python converts (4,300 digits)
        return InvalidRecord(line=number, message=f"holds an unreadable value: {exc}")
    except RecursionError:
        return InvalidRecord(line=number, message="is nested too deeply to parse")


def read_lines(path: Path) -> Iterator[SourceLine]:
    """Every non-blank line of ``path`` (gzip, bzip2 or xz too) with its line number;
    a compressed file that cannot be read to its end raises
    :class:`~suffice.exceptions.ConfigError` naming ``input`` and the last line read."""
    for number, raw in numbered_lines(path):
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if raw.strip():
            yield SourceLine(number, parse_line(raw, number))


def read_records(path: Path) -> Iterator[object]:
    """Each non-blank line as parsed JSON, or :class:`InvalidRecord` if it is not JSON."""
    for source in read_lines(path):
        yield source.record


def dump_line(row: dict[str, Any]) -> bytes:
    """One row as a UTF-8 JSON line; strings UTF-8 cannot hold are escaped, not lost."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(row, ensure_ascii=True) + "\n").encode("ascii")
