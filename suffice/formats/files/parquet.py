"""``parquet``: Apache Parquet (``.parquet``, ``.pq``), read in row groups; an output has typed columns
(:mod:`suffice.rows.tables`) and is written from the run's journal.

A Parquet file cannot be appended to, so the run writes ``OUTPUT.journal.jsonl`` and, when it ends, the Parquet file
from it in input order (atomically), in row groups; a rerun turns a finished output back into a journal first.
Strings UTF-8 cannot hold (lone surrogates), and strings starting with :data:`ESCAPED`, are written as
:data:`ESCAPED` plus their JSON text and read back unchanged.  pyarrow is imported when a Parquet file is met.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from suffice.exceptions import ConfigError, OutputMismatchError, OutputWriteError, SufficeError
from suffice.files import replace_atomically, write_error
from suffice.formats.verdicts import VerdictFormat
from suffice.gates.base import Gate
from suffice.records.item import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS, InvalidRecord
from suffice.records.lines import SourceLine, dump_line, read_lines


class Parquet:
    name = "parquet"
    suffixes = (".parquet", ".pq")
    unit = "row"
    appendable = False

    def count(self, path: Path) -> int:
        """From the file's metadata (no data is read)."""
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception as exc:  # pyarrow raises its own ArrowInvalid for a damaged file
            raise ConfigError("input", str(path), f"is not a readable Parquet file: {exc}") from exc

    def records(self, path: Path, caps: tuple[int, int]) -> Iterator[SourceLine]:
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
            chunks = [meta.row_group(group).column(i) for i in range(meta.num_columns)]
            rows = max(meta.row_group(group).num_rows, 1)
            size = sum(chunk.total_uncompressed_size for chunk in chunks)
            values = max((chunk.num_values for chunk in chunks), default=0)
            per_batch = max(1, min(1024, _BATCH_BYTES * rows // max(size, 1), _BATCH_VALUES * rows // max(values, 1)))
            for batch in reader.iter_batches(batch_size=per_batch, row_groups=[group]):
                for record in _rows(batch, position, caps):
                    position += 1
                    yield SourceLine(position, record)

    def refuses(self, verdicts: VerdictFormat, detail: str) -> ConfigError | None:
        if not verdicts.typed:
            return ConfigError(
                "format", verdicts.name, "a Parquet output holds suffice's verdicts; write .jsonl for it"
            )
        if detail == "auto":
            return ConfigError(
                "detail", "auto", "a Parquet output holds one verdict type, and a cascade's rows hold two: write .jsonl"
            )
        return None

    def finish(self, journal: Path, output: Path, gate: Gate) -> None:
        parquet_from_journal(journal, output, gate)

    def resume(self, output: Path, journal: Path) -> None:
        from suffice.rows.tables import iter_parquet

        try:
            replace_atomically(journal, (dump_line(unescape(row)) for row in iter_parquet(output)), private=True)
        except OutputWriteError:
            raise
        except Exception as exc:
            # A rerun of the same command would meet the same file: not "rerun to resume".
            raise OutputMismatchError(
                "output", f"{output} cannot be read to resume it ({exc}); use --overwrite to start over"
            ) from exc


PARQUET = Parquet()


#: The mark of a string stored as its JSON text (it held what UTF-8 cannot).
ESCAPED = "\x00json:"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _needs_escape(text: str) -> bool:
    return text.startswith(ESCAPED) or (not text.isascii() and _SURROGATE.search(text) is not None)


def escape(value: Any) -> Any:
    """``value`` with every string UTF-8 cannot hold (at any depth, keys too) escaped."""
    if isinstance(value, str):
        return ESCAPED + json.dumps(value, ensure_ascii=True) if _needs_escape(value) else value
    if isinstance(value, dict):
        return {escape(k): escape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape(v) for v in value]
    return value


def unescape(value: Any) -> Any:
    """The inverse of :func:`escape`; a marked string that is not JSON is left as it is."""
    if isinstance(value, str) and value.startswith(ESCAPED):
        try:
            text = json.loads(value[len(ESCAPED) :])
        except ValueError:
            return value
        return text if isinstance(text, str) else value
    if isinstance(value, dict):
        return {unescape(k): unescape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unescape(v) for v in value]
    return value


def parquet_from_journal(journal: Path, output: Path, gate: Gate) -> int:
    """Write ``output`` from the journal's rows; the number of rows written.

    A row Parquet cannot take raises :class:`OutputMismatchError` (``output-format``):
    the journal is kept, and a rerun would meet the same row, so the command must
    change (a JSONL output holds any row)."""
    import pyarrow as pa

    from suffice.rows.tables import ParquetRows, RowError, result_schema

    schema = result_schema(gate.verdict_model)
    try:
        with ParquetRows(output, schema, private=True) as writer:
            for source in read_lines(journal):
                if not isinstance(source.record, dict):
                    raise SufficeError(f"{journal}:{source.line} is not a result row")
                writer.write([escape(source.record)])
    except OSError as exc:  # a full disk: the temporary Parquet file is gone, the journal kept
        raise write_error(output, exc) from exc
    except (RowError, ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
        # RowError: a row off the schema; Arrow's own errors, UnicodeEncodeError (a
        # ValueError) and OverflowError (an integer past int64) for a value it cannot hold.
        raise OutputMismatchError(
            "output-format",
            f"{output}: a row cannot be written as Parquet ({type(exc).__name__}: {exc}); every row is kept in "
            f"{journal} (JSON Lines): write a .jsonl output (or --output-format jsonl) to get them",
        ) from exc
    return int(writer.rows_written)


_CAP_OPTIONS = "--max-field-chars, --max-chunks-per-item"
#: A batch's rows (at most 1,024), as the row group's metadata sizes them: about this many bytes of Parquet data (rows
#: of 16 MB strings are read a few at a time) and this many values of one column, nulls and list entries included,
#: as decoding costs about 14 bytes a value however few bytes they take in the file (a 1.6 KB file holds 128 lists
#: of a million nulls).
_BATCH_BYTES = 64 << 20
_BATCH_VALUES = 1 << 20


def _over_arrow(array: Any, caps: tuple[int, int]) -> Any:
    """Per row of ``array``: the largest string length (characters) or list length over its cap, as a boolean
    array, computed on Arrow's buffers (a dictionary's values once each); ``None`` where a type holds nothing to
    measure (a number) or is not measured here (the record is checked after conversion, as a JSONL one is)."""
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
        over = pa.repeat(False, len(array))
        for i in range(kind.num_fields):
            child = _over_arrow(array.field(i), caps)
            if child is not None:
                over = pc.or_(over, child)
        return over
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

    over = _over_arrow(pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema)), caps)
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
    with contextlib.suppress(ValueError, OverflowError, TypeError):  # pyarrow's ArrowInvalid is a ValueError
        converted: list[object] = batch.to_pylist()
        return converted
    rows = []
    for offset in range(batch.num_rows):
        try:
            rows.extend(batch.slice(offset, 1).to_pylist())
        except (ValueError, OverflowError, TypeError) as exc:
            reason = f"cannot be read: {type(exc).__name__}: {exc}"
            rows.append(InvalidRecord(line=position + offset + 1, message=reason, what="row"))
    return rows
