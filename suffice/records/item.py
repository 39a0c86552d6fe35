"""Input records: the ``../shared/data`` JSONL format, checked field by field (a bad one is one error line)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date as Date
from datetime import datetime
from typing import Any

from suffice.exceptions import InputError
from suffice.records.text import normalise

ChunkId = int | str

# C0 controls other than tab/newline/CR, DEL and C1 controls: some tokenizers choke on them.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Lone surrogates (e.g. "\\ud800" with no partner): tokenizers and UTF-8 writers reject them.
_SURROGATE = re.compile("[\ud800-\udfff]")


#: A chunk's metadata value: a JSON scalar.
MetadataValue = str | int | float | bool | None
#: Bounds on a chunk's ``metadata``: entries, characters of a key, of a string value.
METADATA_MAX_KEYS = 16
METADATA_KEY_CHARS = 64
METADATA_VALUE_CHARS = 256
#: The most characters a chunk's ``date`` may have.
DATE_CHARS = 40


@dataclass(frozen=True)
class Chunk:
    id: ChunkId
    text: str
    source: str | None = None
    score: float | None = None
    #: When the chunk's content dates from: ISO 8601 (a date or a date and time), as given.
    date: str | None = None
    #: Free attributes (a JSON object of scalars), as ``(key, value)`` pairs in order: a tuple keeps it hashable.
    metadata: tuple[tuple[str, MetadataValue], ...] | None = None

    @property
    def metadata_dict(self) -> dict[str, MetadataValue] | None:
        return None if self.metadata is None else dict(self.metadata)


@dataclass(frozen=True)
class Item:
    """A record that passed validation.  ``response`` is for post-generation gates."""

    id: str
    question: str
    chunks: tuple[Chunk, ...]
    response: str | None = None
    #: A per-record rubric reference (``name[@version]``) for rubric-driven gates.
    rubric: str | None = None
    #: The caller can retrieve nothing more for this question (no retriever, or its budget is spent): a gate
    #: routes what more retrieval would have fixed to abstention or a person instead.
    retrieval_exhausted: bool = False

    @property
    def has_evidence(self) -> bool:
        """Whether any chunk holds text: all-blank chunks are answered without the model, like no chunks."""
        return any(chunk.text.strip() for chunk in self.chunks)


def item_record(item: Item) -> dict[str, Any]:
    """``item`` as the JSON record it was read from (``parse_record`` gives the same item back): what a judge
    behind a service, which takes records only, is sent."""
    fields = ("id", "text", "source", "score", "date", "metadata")
    chunks = [
        {
            key: dict(value) if key == "metadata" else value
            for key in fields
            if (value := getattr(chunk, key)) is not None
        }
        for chunk in item.chunks
    ]
    record: dict[str, Any] = {"id": item.id, "question": item.question, "chunks": chunks}
    if item.response is not None:
        record["response"] = item.response
    if item.rubric is not None:
        record["rubric"] = item.rubric
    if item.retrieval_exhausted:
        record["retrieval_exhausted"] = True
    return record


def clean_text(text: str) -> str:
    return _SURROGATE.sub("\ufffd", _CONTROL.sub("", text))


def record_id(record: object) -> str | None:
    """The record's id if it has a usable one (for error lines of bad records)."""
    if isinstance(record, Item):
        return record.id
    if isinstance(record, Mapping):
        value = record.get("id")
        if isinstance(value, str) or (isinstance(value, int) and _int_id(value)):
            return str(value)
    return None


#: An integer id may have this many bits (a 128-bit hash fits); ``str(10**5000)`` raises.
ID_BITS = 128


def _int_id(value: int) -> bool:
    return not isinstance(value, bool) and value.bit_length() <= ID_BITS


def _bad_id(value: object) -> str:
    """Why ``value`` is not an id ("" when it is one), never printing a huge integer."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        return f"must be a non-empty string or integer, got {_short(value)}"
    if isinstance(value, int) and not _int_id(value):
        return f"is an integer of {value.bit_length()} bits; at most {ID_BITS} (give a longer one as a string)"
    return ""


def _finite(number: float) -> bool:
    """Whether ``number`` is a finite float; an integer too large for one (10**400) is not."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _text_field(value: object, name: str) -> str:
    """A required text: a string with something left once control characters are removed."""
    if not isinstance(value, str) or not clean_text(value).strip():
        raise InputError(name, "must be a non-empty string")
    return value


def parse_chunk(raw: object, index: int) -> Chunk:
    where = f"chunks[{index}]"
    if not isinstance(raw, Mapping):
        raise InputError(where, f"must be an object, got {type(raw).__name__}")
    _check_keys(raw, where, CHUNK_FIELDS)
    cid = raw.get("id")
    problem = _bad_id(cid)
    if problem or not isinstance(cid, (int, str)):
        raise InputError(f"{where}.id", problem)
    text = raw.get("text")
    if not isinstance(text, str):
        raise InputError(f"{where}.text", f"must be a string, got {type(text).__name__}")
    source = raw.get("source")
    if source is not None and not isinstance(source, str):
        raise InputError(f"{where}.source", f"must be a string, got {type(source).__name__}")
    score = raw.get("score")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not _finite(score):
            raise InputError(f"{where}.score", f"must be a finite number, got {_short(score)}")
        score = float(score)
    return Chunk(
        id=cid,
        text=clean_text(text),
        source=None if source is None else clean_text(source),
        score=score,
        date=_date(raw.get("date"), f"{where}.date"),
        metadata=_metadata(raw.get("metadata"), f"{where}.metadata"),
    )


def _date(value: object, field: str) -> str | None:
    """An ISO 8601 date (``2024-03-01``) or date and time (``2024-03-01T12:00:00Z``), as given."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > DATE_CHARS:
        raise InputError(field, f"must be an ISO 8601 date such as '2024-03-01', got {_short(value)}")
    try:
        (Date if len(value) == 10 else datetime).fromisoformat(value)
    except ValueError:
        raise InputError(
            field, f"must be an ISO 8601 date such as '2024-03-01' or '2024-03-01T12:00:00Z', got {_short(value)}"
        ) from None
    return value


def _metadata(value: object, field: str) -> tuple[tuple[str, MetadataValue], ...] | None:
    """A JSON object of at most :data:`METADATA_MAX_KEYS` scalars (strings bounded), as pairs."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be a JSON object of scalars, got {type(value).__name__}")
    if isinstance(value, RepeatedKeys) and value.repeated:
        raise InputError(f"{field}.{sorted(value.repeated)[0]}", "is given twice in one object")
    if len(value) > METADATA_MAX_KEYS:
        raise InputError(field, f"has {len(value)} entries; at most {METADATA_MAX_KEYS}")
    pairs: list[tuple[str, MetadataValue]] = []
    shown: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not normalise(key).strip() or len(key) > METADATA_KEY_CHARS:
            raise InputError(field, f"keys are non-empty strings of at most {METADATA_KEY_CHARS} characters")
        where = f"{field}.{key}"
        # The prompt shows keys normalised: two that read alike there would be one key to the model.
        if (alike := shown.setdefault(normalise(key), key)) != key:
            raise InputError(where, f"reads as the key {alike!r} once normalised (the prompt shows it so)")
        if isinstance(item, str):
            if len(item) > METADATA_VALUE_CHARS:
                raise InputError(where, f"has {len(item)} characters; at most {METADATA_VALUE_CHARS}")
            item = clean_text(item)
        elif isinstance(item, float) and not _finite(item):
            raise InputError(where, f"must be a finite number, got {_short(item)}")
        elif isinstance(item, int) and not isinstance(item, bool) and not _int_id(item):
            raise InputError(where, "is an integer too large; give it as a string")
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise InputError(where, f"must be a string, number, boolean or null, got {type(item).__name__}")
        pairs.append((clean_text(key), item))
    return tuple(pairs)


def check_sources(chunks: tuple[Chunk, ...] | list[Chunk]) -> None:
    """Refuse a ``source`` that spells a sourceless chunk's id (which cites it), or that looks like another source
    without being it: a citation of either would credit both chunks.  Names are compared as the prompt shows them
    (:func:`~suffice.records.text.normalise`), so a full-width or zero-width-spaced look-alike is the same name."""
    sourceless = {normalise(str(c.id)): i for i, c in enumerate(chunks) if c.source is None}
    shown: dict[str, int] = {}
    for i, chunk in enumerate(chunks):
        if chunk.source is None:
            continue
        name = normalise(chunk.source)
        if (other := sourceless.get(name)) is not None:
            raise InputError(
                f"chunks[{i}].source",
                f"{_short(chunk.source)} is the id of chunks[{other}], which has no source, so a citation could not "
                f"tell them apart: give chunks[{other}] its source",
            )
        first = shown.setdefault(name, i)
        if chunks[first].source != chunk.source:
            raise InputError(
                f"chunks[{i}].source",
                f"{_short(chunk.source)} looks like chunks[{first}].source {_short(chunks[first].source)} as the "
                "prompt shows it (Unicode normalisation), so a citation could not tell them apart",
            )


def parse_record(record: object, *, need_response: bool = False) -> Item:
    """Validate one raw record; raise :class:`InputError` naming the first bad field (an :class:`Item` passes
    through, checked only for what this gate needs)."""
    if isinstance(record, Item):
        if need_response and not record.response:
            raise InputError("response", "is missing (this gate checks a generated answer)")
        check_sources(record.chunks)
        return record
    if isinstance(record, InvalidRecord):
        raise InputError(record.field, f"{record.what} {record.line} {record.message}")
    if not isinstance(record, Mapping):
        raise InputError("record", f"must be a JSON object, got {type(record).__name__}")
    _check_keys(record, "", RECORD_FIELDS)
    rid = record.get("id")
    if rid is None:
        raise InputError("id", "is missing")
    problem = _bad_id(rid)
    if problem:
        raise InputError("id", problem)
    question = record.get("question")
    if question is None:
        raise InputError("question", "is missing")
    question = _text_field(question, "question")
    raw_chunks: Any = record.get("chunks")
    if raw_chunks is None:
        raise InputError("chunks", "is missing")
    if not isinstance(raw_chunks, list):
        raise InputError("chunks", f"must be a list, got {type(raw_chunks).__name__}")
    chunks = tuple(parse_chunk(raw, i) for i, raw in enumerate(raw_chunks))
    # Compared as shown: 1 and "1", or "a" and a full-width or zero-width-spaced "a", are one id in a citation, a
    # Parquet column and a user's eyes.
    seen: dict[str, int] = {}
    for i, chunk in enumerate(chunks):
        key = normalise(str(chunk.id))
        if key in seen:
            raise InputError(f"chunks[{i}].id", f"duplicate chunk id {_short(chunk.id)} (also chunks[{seen[key]}])")
        seen[key] = i
    check_sources(chunks)
    response = record.get("response")
    if need_response:
        if response is None:
            raise InputError("response", "is missing (this gate checks a generated answer)")
        response = _text_field(response, "response")
    elif response is not None and not isinstance(response, str):
        response = None
    rubric = record.get("rubric")
    if rubric is not None and (not isinstance(rubric, str) or not rubric.strip()):
        raise InputError("rubric", f"must be a non-empty string such as 'legal-review@1.0.0', got {rubric!r}")
    exhausted = record.get("retrieval_exhausted", False)
    if exhausted is None:
        exhausted = False
    if not isinstance(exhausted, bool):
        raise InputError("retrieval_exhausted", f"must be true or false, got {_short(exhausted)}")
    return Item(
        id=str(rid),
        rubric=rubric,
        retrieval_exhausted=exhausted,
        question=clean_text(question),
        chunks=chunks,
        response=None if response is None else clean_text(response),
    )


class RepeatedKeys(dict[str, Any]):
    """A JSON object that held keys twice: a repeated key suffice reads is that record's error naming it."""

    repeated: frozenset[str] = frozenset()


#: The fields suffice reads of a record and of a chunk.
RECORD_FIELDS = frozenset({"id", "question", "chunks", "response", "rubric", "retrieval_exhausted"})
CHUNK_FIELDS = frozenset({"id", "text", "source", "score", "date", "metadata"})


def carry_repeats(source: object, out: dict[str, Any], renamed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``out``, a copy of ``source`` with renamed fields, still marked with its repeated keys' new names."""
    if not isinstance(source, RepeatedKeys) or isinstance(out, RepeatedKeys):
        return out
    marked = RepeatedKeys(out)
    marked.repeated = frozenset((renamed or {}).get(key, key) for key in source.repeated)
    return marked


def _check_keys(raw: Mapping[str, Any], where: str, read: frozenset[str]) -> None:
    if isinstance(raw, RepeatedKeys):
        hit = sorted(raw.repeated & read)
        if hit:
            field = f"{where}.{hit[0]}" if where else hit[0]
            raise InputError(field, "is given twice in one object; which value is meant is not known")


#: Most characters in one string of a record, for ``suffice serve`` (``--max-field-chars``) and ``suffice judge``:
#: a cap keeps one record from taking the process's memory (a 2 KB Parquet file held 64 strings of 16 MB).
MAX_FIELD_CHARS = 200_000
#: Most entries in one list of a record (its chunks, most often), for serve and judge alike.
MAX_CHUNKS_PER_ITEM = 512


def over_caps(value: object, max_chars: int, max_entries: int) -> tuple[str, str] | None:
    """The first string or key over ``max_chars`` or list over ``max_entries`` in ``value``, as (where, why), where
    a dotted field name (``chunks.3.text``); ``None`` if all fit.  Iterative: a record may be nested deeply."""
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        node, where = stack.pop()
        name = where or "record"
        if isinstance(node, str):
            if len(node) > max_chars:
                return name, f"{len(node)} characters: at most {max_chars} a string (--max-field-chars)"
        elif isinstance(node, Mapping):
            for key, child in node.items():
                if isinstance(key, str) and len(key) > max_chars:
                    return name, f"a key of {len(key)} characters: at most {max_chars} (--max-field-chars)"
                stack.append((child, f"{where}.{key}" if where else str(key)))
        elif isinstance(node, list):
            if len(node) > max_entries:
                return name, f"{len(node)} entries: at most {max_entries} (--max-chunks-per-item)"
            stack.extend((child, f"{where}.{i}" if where else str(i)) for i, child in enumerate(node))
    return None


@dataclass(frozen=True)
class InvalidRecord:
    """Stands in for an input line that is not JSON (or an unreadable Parquet row), so it gets its error line."""

    line: int
    #: Why, worded to follow "line 7 ": ``is not valid JSON: ...``.
    message: str
    #: What could not be read: a JSONL line or a Parquet row.
    what: str = "line"
    #: The field the error row names (a field over a cap, or the whole record).
    field: str = "record"
