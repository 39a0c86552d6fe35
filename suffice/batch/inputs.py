"""Batch input: JSONL or Parquet, read once and in pieces, with other schemas mapped in (only renamed) by
:class:`suffice.fields.FieldMap`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice import compressed
from suffice.exceptions import ConfigError
from suffice.fields import FieldMap
from suffice.jsonl import SourceLine, parse_line, read_lines
from suffice.records import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS, InvalidRecord, over_caps

FORMATS = ("jsonl", "parquet")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def format_of(path: Path, given: str | None, option: str = "format") -> str:
    """``given``, or the format ``path``'s extension names (``.jsonl.gz`` is JSONL); a ConfigError otherwise, and for
    a compressed output name (``option`` ``output-format``)."""
    if option == "output-format" and path.suffix.lower() in compressed.SUFFIXES:
        raise ConfigError(
            "output",
            str(path),
            "cannot be compressed: a JSONL output is appended as it goes and resumed from its last whole line; "
            "write .jsonl, or .parquet (compressed)",
        )
    if given is not None:
        if given not in FORMATS:
            raise ConfigError(option, given, f"must be one of {', '.join(FORMATS)}")
        return given
    fmt = _SUFFIXES.get(compressed.without_compression_suffix(path).suffix.lower())
    if fmt is None:
        raise ConfigError(option, str(path), f"cannot tell the format from the extension; give --{option}")
    return fmt


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (for cluster array jobs): the records whose 0-based place is ``index`` modulo
    ``count``; by place, not id hash, so records without ids shard too and each shard's size is known up front."""

    index: int
    count: int

    def __post_init__(self) -> None:
        for name, value in (("index", self.index), ("count", self.count)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError("shard", str(self), f"its {name} must be a whole number")
        if self.count < 1:
            raise ConfigError("shard", str(self), "the shard count must be at least 1")
        if not 0 <= self.index < self.count:
            raise ConfigError("shard", str(self), f"the index counts from 0: 0 to {self.count - 1} of {self.count}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``K/N`` (``3/8``: the fourth of eight shards)."""
        index, slash, count = text.partition("/")
        if not slash or not index.strip().isdecimal() or not count.strip().isdecimal():  # '²' isdigit, not int
            raise ConfigError("shard", text, "must be K/N with whole numbers, K from 0 to N-1 (3/8)")
        return cls(int(index), int(count))

    def size(self, records: int) -> int:
        """How many of ``records`` records are this shard's."""
        return len(range(self.index, records, self.count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class InputFile:
    """The records of one input file (of one shard of it), in order, each with its
    1-based position in the file."""

    def __init__(
        self,
        path: Path,
        fmt: str | None = None,
        fields: FieldMap | None = None,
        shard: Shard | None = None,
        *,
        max_field_chars: int = MAX_FIELD_CHARS,
        max_chunks_per_item: int = MAX_CHUNKS_PER_ITEM,
    ) -> None:
        """``max_field_chars``, ``max_chunks_per_item``: the service's caps on a record (a string's characters, a
        list's entries); a record over one is that record's error row, and a Parquet row is measured before it
        is converted, so one over a cap is never held as Python strings."""
        self.path = path
        self.caps = (max_field_chars, max_chunks_per_item)
        self.format = format_of(path, fmt)
        self.fields = fields or FieldMap()
        self.shard = shard
        #: Records in the file, for the progress bar: Parquet's metadata, or JSONL's non-blank lines (0.15 s/million).
        self.count: int | None = None
        if self.format == "jsonl":
            self.count = _count_lines(path)
            _refuse_plain_json(path, self.count)
        else:
            import pyarrow.parquet as pq

            try:
                self.count = int(pq.ParquetFile(path).metadata.num_rows)
            except Exception as exc:  # pyarrow raises its own ArrowInvalid for a damaged file
                raise ConfigError("input", str(path), f"is not a readable Parquet file: {exc}") from exc
        if shard is not None and self.count is not None:
            self.count = shard.size(self.count)

    def __iter__(self) -> Iterator[SourceLine]:
        raw = read_lines(self.path) if self.format == "jsonl" else _parquet_lines(self.path, self.caps)
        if self.shard is not None:
            raw = itertools.islice(raw, self.shard.index, None, self.shard.count)
        what = "line" if self.format == "jsonl" else "row"
        for source in raw:
            record = source.record
            over = None if isinstance(record, InvalidRecord) else over_caps(record, *self.caps)
            if over is not None:
                where, why = over
                record = InvalidRecord(source.line, f"holds {why}", what, field=where)
            yield SourceLine(source.line, self.fields.apply(record, source.line))


def _refuse_plain_json(path: Path, count: int) -> None:
    """Refuse a JSON document (an array, or pretty-printed over many lines) before anything is judged."""
    with compressed.open_input(path) as handle:
        first = next((raw.strip() for raw in handle if raw.strip()), b"")
    first = first.removeprefix(b"\xef\xbb\xbf").strip()
    if first in (b"[", b"{"):
        shape = "a JSON document over many lines"
    elif count == 1 and first.startswith(b"[") and isinstance(parse_line(first, 1), list):
        shape = "a JSON array"
    else:
        return
    kind = compressed.compression_of(path)
    # jq reads no compressed file: decompress into it.
    command = f"jq -c '.[]' {path.name}" if kind is None else f"{kind} -dc {path.name} | jq -c '.[]'"
    raise ConfigError(
        "input",
        str(path),
        f"holds {shape}, not JSON Lines (one record per line); convert it first, e.g. {command} > records.jsonl",
    )


def _count_lines(path: Path) -> int:
    """Non-blank lines (a damaged compressed input is found here, before anything is judged)."""
    return sum(1 for _, raw in compressed.numbered_lines(path) if raw.strip())


_CAP_OPTIONS = "--max-field-chars, --max-chunks-per-item"
#: Bytes of Parquet data decoded at once (a batch's rows, as the row group's metadata sizes them): rows of 16 MB
#: strings are read a few at a time, not 1,024.
_BATCH_BYTES = 64 << 20


def _parquet_lines(
    path: Path, caps: tuple[int, int] = (MAX_FIELD_CHARS, MAX_CHUNKS_PER_ITEM), batch_rows: int = 1024
) -> Iterator[SourceLine]:
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    # Strings read as dictionaries: a value repeated in every row (how a 2 KB file holds 64 x 16 MB) is held once,
    # and measured once, instead of once a row.
    strings = [meta.schema.column(i).path for i in range(meta.num_columns)]
    strings = [p for i, p in enumerate(strings) if meta.schema.column(i).physical_type == "BYTE_ARRAY"]
    # Buffered reads: unbuffered (pyarrow's default) loads whole column chunks.
    reader = pq.ParquetFile(path, buffer_size=1 << 20, read_dictionary=strings)
    position = 0
    for group in range(meta.num_row_groups):
        rows = meta.row_group(group).num_rows
        size = sum(meta.row_group(group).column(i).total_uncompressed_size for i in range(meta.num_columns))
        per_batch = max(1, min(batch_rows, _BATCH_BYTES * max(rows, 1) // max(size, 1)))
        for batch in reader.iter_batches(batch_size=per_batch, row_groups=[group]):
            for record in _rows(batch, position, caps):
                position += 1
                yield SourceLine(position, record)


def _over_arrow(array: Any, caps: tuple[int, int]) -> Any:
    """Per row of ``array``: the largest string length (characters) or list length over its cap, as a boolean
    array, computed on Arrow's buffers (a dictionary's values once each); ``None`` where a type is not measured
    here (the record is checked after conversion, as a JSONL one is)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    max_chars, max_entries = caps
    kind = array.type
    if pa.types.is_dictionary(kind):
        values = _over_arrow(array.dictionary, caps)
        return None if values is None else pc.fill_null(pc.take(values, array.indices), False)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.fill_null(pc.greater(pc.utf8_length(array), max_chars), False)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return pc.fill_null(pc.greater(pc.binary_length(array), max_chars), False)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        over = pc.fill_null(pc.greater(pc.list_value_length(array), max_entries), False)
        child = _over_arrow(pc.list_flatten(array), caps)
        if child is not None and len(child):
            parents = pc.list_parent_indices(array)
            hit = pc.filter(parents, child)
            if len(hit):
                mask = pc.is_in(pa.array(range(len(array)), pa.int64()), value_set=pc.cast(hit, pa.int64()))
                over = pc.or_(over, mask)
        return over
    if pa.types.is_struct(kind):
        over = pa.array([False] * len(array))
        for i in range(kind.num_fields):
            child = _over_arrow(array.field(i), caps)
            if child is not None:
                over = pc.or_(over, child)
        return over
    if pa.types.is_primitive(kind) or pa.types.is_null(kind):
        return pa.array([False] * len(array))
    return None


def _over_name(batch: Any, row: int, caps: tuple[int, int]) -> tuple[str, str]:
    """Which column of ``batch``'s ``row`` is over a cap, and why, measured without converting it."""
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        over = _over_arrow(column.slice(row, 1), caps)
        if over is not None and over[0].as_py():
            return name, f"a string over {caps[0]} characters or a list over {caps[1]} entries ({_CAP_OPTIONS})"
    return "record", f"a value over a cap ({_CAP_OPTIONS})"


def _rows(batch: Any, position: int, caps: tuple[int, int] = (MAX_FIELD_CHARS, MAX_CHUNKS_PER_ITEM)) -> list[object]:
    """A record batch's rows as Python values, a row over a cap (:func:`_over_arrow`) as its error without being
    converted; if a value Python cannot hold fails the batch, rows are converted one by one and each failure is
    that row's error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    over = pa.array([False] * batch.num_rows)
    for column in batch.columns:
        column_over = _over_arrow(column, caps)
        if column_over is not None:
            over = pc.or_(over, column_over)
    if pc.any(over).as_py():
        rows: list[object] = []
        for offset, is_over in enumerate(over.to_pylist()):
            if is_over:
                where, why = _over_name(batch, offset, caps)
                message = f"holds {why}"
                rows.append(InvalidRecord(line=position + offset + 1, message=message, what="row", field=where))
            else:
                rows.extend(_rows(batch.slice(offset, 1), position + offset, caps))
        return rows
    try:
        converted: list[object] = batch.to_pylist()
        return converted
    except (ValueError, OverflowError, TypeError):  # pyarrow's ArrowInvalid is a ValueError
        pass
    rows = []
    for offset in range(batch.num_rows):
        try:
            rows.extend(batch.slice(offset, 1).to_pylist())
        except (ValueError, OverflowError, TypeError) as exc:
            reason = f"cannot be read: {type(exc).__name__}: {exc}"
            rows.append(InvalidRecord(line=position + offset + 1, message=reason, what="row"))
    return rows
