"""The result file of a batch run: one JSON line per input record, written as it goes.

Every row carries its record's ``id`` and 1-based input ``line``, so a rerun knows which records are answered
whatever order the rows are in (:mod:`suffice.batch.answered`); reading keeps only an on-disk index.  A partial
last line is cut off; a line that is not a result row goes to ``OUTPUT.rejected`` and its record is judged again; rows
not final and second rows for one key are removed.  Removals and the reordering at :meth:`close` rewrite the file beside
itself and rename it over the old one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from suffice.batch.answered import DoneRow, KeyIndex, line_key, record_key
from suffice.exceptions import OutputMismatchError, OutputWriteError
from suffice.files import open_output, replace_atomically, write_error, writing
from suffice.records.lines import dump_line

#: Error types a resumed run judges again even without ``retry_errors`` (rows without ``final``).
_NOT_FINAL = frozenset({"GenerationError"})
#: The error of a record that repeats an earlier record's id: its row is keyed by position.
DUPLICATE_ID = "DuplicateIdError"
#: Index rows in batches of this many while reading.
_BATCH = 4096


def row_is_final(row: dict[str, Any], retry_errors: bool = False) -> bool:
    error = row.get("error")
    if not isinstance(error, dict):
        return True
    return not retry_errors and bool(error.get("final", error.get("type") not in _NOT_FINAL))


def row_key(row: dict[str, Any]) -> str:
    """The key of the input record a row answers (see :mod:`suffice.batch.answered`)."""
    error = row.get("error")
    rid = row.get("id")
    if rid is None or (isinstance(error, dict) and error.get("type") == DUPLICATE_ID):
        return line_key(int(row["line"]))
    return record_key(str(rid), int(row["line"]))


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(byte offset, raw line) of every complete line of ``path``."""
    offset = 0
    with path.open("rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                return  # a partial last line: the run died mid-write
            yield offset, raw
            offset += len(raw)


def _row(raw: bytes) -> dict[str, Any] | None:
    """The row of a line, or ``None`` for a line to set aside (not a JSON object with an int ``line``)."""
    try:
        row = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return row if isinstance(row, dict) and isinstance(row.get("line"), int) else None


def _done(row: dict[str, Any], offset: int, length: int) -> DoneRow:
    rid = row.get("id")
    return DoneRow(
        key=row_key(row),
        offset=offset,
        length=length,
        line=int(row["line"]),
        id=None if rid is None else str(rid),
        error=row.get("error") is not None,
        final=row_is_final(row),
    )


class ResultFile:
    """Appends result rows; its index knows which records are already answered."""

    def __init__(self, path: Path, index: KeyIndex, *, overwrite: bool = False, retry_errors: bool = False) -> None:
        """Read what ``path`` holds into ``index``; nothing is changed until :meth:`start`."""
        self.path = path
        self.index = index
        #: Rows removed on open to be judged again.
        self.redo = 0
        #: Second rows for a key already answered, removed on open.
        self.repeated = 0
        #: Lines that are not result rows, moved to :attr:`rejected_path` on :meth:`start`.
        self.rejected = 0
        self.rejected_path = path.with_name(path.name + ".rejected")
        self._last_line = 0
        self._in_order = True
        self._rewrite = False
        self._retry_errors = retry_errors
        self._size = 0
        self._handle: IO[bytes] | None = None
        #: A write failed: close() neither flushes nor reorders what is there.
        self._broken = False
        if path.exists() and not overwrite:
            self._read()
        else:
            self._rewrite = True

    def _read(self) -> None:
        batch: list[DoneRow] = []
        for offset, raw in _lines(self.path):
            self._size = offset + len(raw)
            row = _row(raw)
            if row is None:
                self.rejected += 1
                continue
            if not row_is_final(row, self._retry_errors):
                self.redo += 1
                continue
            batch.append(_done(row, offset, len(raw)))
            if len(batch) >= _BATCH:
                self._index(batch)
                batch = []
        self._index(batch)
        if self.rejected and not self.index.done_count and not self.redo:
            # Not one row: not damage but another file.
            raise OutputMismatchError(
                "output",
                f"{self.path} holds no result row of this suffice version ({self.rejected} lines, no input line number "
                "in any); use --overwrite to start over",
            )
        self._rewrite = self.redo > 0 or self.repeated > 0 or self.rejected > 0 or self._size < self.path.stat().st_size

    def _index(self, batch: list[DoneRow]) -> None:
        """Index the first row of each key (at its offset in the file as it is now)."""
        known = self.index.done_rows([row.key for row in batch])
        fresh: dict[str, DoneRow] = {}
        replaced: list[str] = []
        for row in batch:
            old = fresh.get(row.key) or known.get(row.key)
            if old is not None:
                self.repeated += 1
                # Two rows for one id (shards): the lower line keeps its row, whatever the concatenation order.
                if row.line >= old.line:
                    continue
                if row.key not in fresh:
                    replaced.append(row.key)
            fresh[row.key] = row
            self._note(row.line)
        if replaced:
            self.index.forget(replaced)
        self.index.add_done(fresh.values())

    def start(self) -> None:
        """Cut a partial last line, drop the rows to judge again (atomically), and open the file for appending."""
        if self._handle is not None:
            return
        with writing(self.path):  # a read-only folder: "cannot write PATH", not a traceback
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._rewrite:
            replace_atomically(self.path, self._kept(), private=True)
        self._handle = open_output(self.path, "append", private=True)
        self._size = self._handle.tell()

    def _kept(self) -> Iterator[bytes]:
        """The rows :meth:`_read` indexed, in file order, moving their index offsets; other lines go to
        :attr:`rejected_path`, flushed before the rewrite is renamed over the output."""
        if not self.path.exists() or (self.index.done_count == 0 and self.rejected == 0):
            return
        offset = 0
        pending: list[tuple[str, int, bytes]] = []

        def flush() -> Iterator[bytes]:
            indexed = self.index.done_rows([key for key, _, _ in pending])
            nonlocal offset
            moves: list[tuple[str, int]] = []
            for key, old, raw in pending:
                if key in indexed and indexed[key].offset == old:
                    moves.append((key, offset))
                    offset += len(raw)
                    yield raw
            self.index.move(moves)
            pending.clear()

        with contextlib.ExitStack() as stack:
            aside: IO[bytes] | None = None
            for old, raw in _lines(self.path):
                row = _row(raw)
                if row is None:
                    if aside is None:
                        aside = stack.enter_context(open_output(self.rejected_path, "append", private=True))
                    with writing(self.rejected_path):
                        aside.write(raw)
                elif row_is_final(row, self._retry_errors):
                    pending.append((row_key(row), old, raw))
                if len(pending) >= _BATCH:
                    yield from flush()
            yield from flush()
            if aside is not None:
                with writing(self.rejected_path):
                    aside.flush()
                    os.fsync(aside.fileno())

    def _note(self, line: int) -> None:
        """Track whether the rows are still in input order (else :meth:`close` sorts)."""
        self._in_order = self._in_order and line > self._last_line
        self._last_line = max(self._last_line, line)

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows (each with its ``id`` and ``line``) and flush them to disk."""
        if self._broken:  # appending after a torn row would glue onto it
            raise OutputWriteError(str(self.path), "an earlier write to it failed in this run")
        self.start()
        assert self._handle is not None
        done: list[DoneRow] = []
        try:
            for row in rows:
                raw = dump_line(row)
                self._handle.write(raw)
                done.append(_done(row, self._size, len(raw)))
                self._note(done[-1].line)
                self._size += len(raw)
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:
            # A full disk: whole rows stay (a torn last one is cut on resume); the file is not touched again.
            self._broken = True
            raise write_error(self.path, exc) from exc
        try:
            self.index.add_done(done, met=True)
        except OutputWriteError:
            # The index's disk is full: the rows are flushed; the next run rebuilds the index from the file.
            self._broken = True
            raise

    def forget(self, keys: list[str]) -> int:
        """Drop rows that no longer answer their position's record (on close); returns how many were errors."""
        errors = self.index.forget(keys)
        self._in_order = False  # the rewrite at close keeps only indexed rows
        return errors

    def close(self) -> None:
        """Close the file; rows out of input order are put back in order."""
        if self._handle is None:
            if self._in_order or self._rewrite:
                return  # never started: the file is as it was
            self.start()
        assert self._handle is not None
        if self._handle.closed:
            return
        if self._broken:
            with contextlib.suppress(OSError):  # what is buffered cannot be written either
                self._handle.close()
            return
        self._handle.close()
        if not self._in_order or self.index.relined():
            replace_atomically(self.path, self._in_input_order(), private=True)
            self._in_order = True

    def _in_input_order(self) -> Iterator[bytes]:
        """The indexed rows by input position; a row whose record moved gets its new ``line``."""
        with self.path.open("rb") as handle:
            for offset, length, line, written in self.index.in_input_order():
                handle.seek(offset)
                raw = handle.read(length)
                if line != written:
                    row = json.loads(raw)
                    row["line"] = line
                    raw = dump_line(row)
                yield raw
