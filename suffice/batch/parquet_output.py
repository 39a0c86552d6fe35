"""A Parquet output: typed columns (:mod:`suffice.tables`), written from the run's journal.

A Parquet file cannot be appended to, so the run writes ``OUTPUT.journal.jsonl`` and, when it ends, the Parquet file
from it in input order (atomically), in row groups; a rerun turns a finished output back into a journal first.
Strings UTF-8 cannot hold (lone surrogates), and strings starting with :data:`ESCAPED`, are written as
:data:`ESCAPED` plus their JSON text and read back unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from suffice.exceptions import OutputMismatchError, OutputWriteError, SufficeError
from suffice.files import replace_atomically, write_error
from suffice.gates.base import Gate
from suffice.jsonl import dump_line, read_lines
from suffice.tables import ParquetRows, RowError, iter_parquet, result_schema

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
    if isinstance(value, str):
        if value.startswith(ESCAPED):
            try:
                text = json.loads(value[len(ESCAPED) :])
            except ValueError:
                return value
            return text if isinstance(text, str) else value
        return value
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


def _rows(output: Path) -> Iterator[bytes]:
    for row in iter_parquet(output):
        yield dump_line(unescape(row))


def journal_from_parquet(output: Path, journal: Path) -> None:
    """Turn a finished Parquet output back into a journal to resume from."""
    try:
        replace_atomically(journal, _rows(output), private=True)
    except OutputWriteError:
        raise
    except Exception as exc:
        # A rerun of the same command would meet the same file: not "rerun to resume".
        raise OutputMismatchError(
            "output", f"{output} cannot be read to resume it ({exc}); use --overwrite to start over"
        ) from exc
