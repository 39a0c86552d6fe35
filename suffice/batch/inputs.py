"""Batch input: a file in any file format (:mod:`suffice.formats.files`), read once and in pieces, with other schemas
mapped in (only renamed) by :class:`suffice.records.fields.FieldMap`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from suffice.exceptions import ConfigError
from suffice.formats.files import file_format_of, format_of
from suffice.records.fields import FieldMap
from suffice.records.item import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS, InvalidRecord, over_caps
from suffice.records.lines import SourceLine

__all__ = ["InputFile", "Shard", "format_of"]


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
        self.file_format = file_format_of(path, fmt)
        self.format = self.file_format.name
        self.fields = fields or FieldMap()
        self.shard = shard
        #: Records in the file, for the progress bar (``None``: not known before reading).
        self.count = self.file_format.count(path)
        if shard is not None and self.count is not None:
            self.count = shard.size(self.count)

    def __iter__(self) -> Iterator[SourceLine]:
        raw = self.file_format.records(self.path, self.caps)
        if self.shard is not None:
            raw = itertools.islice(raw, self.shard.index, None, self.shard.count)
        what = self.file_format.unit
        for source in raw:
            record = source.record
            over = None if isinstance(record, InvalidRecord) else over_caps(record, *self.caps)
            if over is not None:
                where, why = over
                record = InvalidRecord(source.line, f"holds {why}", what, field=where)
            yield SourceLine(source.line, self.fields.apply(record, source.line))
