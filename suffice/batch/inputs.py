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
from suffice.records import InvalidRecord

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
        self, path: Path, fmt: str | None = None, fields: FieldMap | None = None, shard: Shard | None = None
    ) -> None:
        self.path = path
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
        raw = read_lines(self.path) if self.format == "jsonl" else _parquet_lines(self.path)
        if self.shard is not None:
            raw = itertools.islice(raw, self.shard.index, None, self.shard.count)
        for source in raw:
            yield SourceLine(source.line, self.fields.apply(source.record, source.line))


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


def _parquet_lines(path: Path, batch_rows: int = 1024) -> Iterator[SourceLine]:
    import pyarrow.parquet as pq

    position = 0
    # Buffered reads: unbuffered (pyarrow's default) loads whole column chunks.
    for batch in pq.ParquetFile(path, buffer_size=1 << 20).iter_batches(batch_size=batch_rows):
        for record in _rows(batch, position):
            position += 1
            yield SourceLine(position, record)


def _rows(batch: Any, position: int) -> list[object]:
    """A record batch's rows as Python values; if a value Python cannot hold fails the batch, rows are converted
    one by one and each failure is that row's error."""
    try:
        rows: list[object] = batch.to_pylist()
        return rows
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
