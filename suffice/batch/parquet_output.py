"""A Parquet output: typed columns (:mod:`suffice.tables`), written from the run's journal.

Why a journal: a Parquet file is only readable once its footer is written, so rows
cannot be appended to it as batches finish.  The run writes JSONL rows to
``OUTPUT.journal.jsonl`` (resumable like any JSONL output) and, when it ends, writes
the Parquet file from it in input order (atomically: a temporary file renamed over
the old one) and removes the journal.  A rerun on a finished Parquet output (to judge
records the input gained, or again with ``--retry-errors``) turns it back into a
journal first.  Memory stays bounded: rows stream through in row groups.
"""

from __future__ import annotations

from pathlib import Path

from suffice.exceptions import OutputWriteError, SufficeError
from suffice.files import replace_atomically, write_error
from suffice.gates.base import Gate
from suffice.jsonl import dump_line, read_lines
from suffice.tables import ParquetRows, RowError, iter_parquet, result_schema


def parquet_from_journal(journal: Path, output: Path, gate: Gate) -> int:
    """Write ``output`` from the journal's rows; the number of rows written."""
    schema = result_schema(gate.verdict_model)
    try:
        with ParquetRows(output, schema) as writer:
            for source in read_lines(journal):
                if not isinstance(source.record, dict):
                    raise SufficeError(f"{journal}:{source.line} is not a result row")
                writer.write([source.record])
    except RowError as exc:
        raise SufficeError(f"{journal}: a row does not fit the Parquet schema ({exc}); the journal is kept") from exc
    except OSError as exc:  # a full disk: the temporary Parquet file is gone, the journal kept
        raise write_error(output, exc) from exc
    return int(writer.rows_written)


def journal_from_parquet(output: Path, journal: Path) -> None:
    """Turn a finished Parquet output back into a journal to resume from."""
    try:
        replace_atomically(journal, (dump_line(row) for row in iter_parquet(output)))
    except OutputWriteError:
        raise
    except Exception as exc:
        raise SufficeError(f"{output} cannot be read to resume it ({exc}); use --overwrite to start over") from exc
