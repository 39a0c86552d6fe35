"""The result file of a batch run: one line per input record, written as it goes.

Why keyed by input line: a run can die anywhere (a killed process, a dead engine, a
full disk), and some lines it wrote are not final (an engine failure is not the
record's fault).  Every row carries ``line``, the input line it answers, so a rerun
knows exactly which records are answered whatever order the rows are in, and checks
each against the input's id at that line.

On open, a partial last line (the process died mid-write) is cut off, and rows that
are not final (``error.final`` false, or every error row with ``retry_errors``) are
removed by rewriting the file beside itself and renaming it over the old one, so a
crash at any point leaves either the old file or the new one.  Rows are appended and
flushed to disk after every batch; if a rerun filled holes, :meth:`close` puts the
rows back in input order the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from suffice.exceptions import OutputMismatchError, SufficeError
from suffice.jsonl import dump_line
from suffice.records import record_id

#: Error types a resumed run judges again even without ``retry_errors`` (rows written
#: before errors carried ``final``).
_NOT_FINAL = frozenset({"GenerationError"})


def row_is_final(row: dict[str, Any], retry_errors: bool = False) -> bool:
    error = row.get("error")
    if not isinstance(error, dict):
        return True
    if retry_errors:
        return False
    return bool(error.get("final", error.get("type") not in _NOT_FINAL))


def _replace(path: Path, lines: Iterable[bytes]) -> None:
    """Write ``lines`` to ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as handle:
        for line in lines:
            handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class ResultFile:
    """Appends result rows; knows which input lines are already answered."""

    def __init__(self, path: Path, *, overwrite: bool = False, retry_errors: bool = False) -> None:
        """Read what ``path`` holds; nothing is changed until :meth:`start`, so a run
        refused after reading (another input, other settings) leaves it as it was."""
        self.path = path
        #: Input line number -> the id its final row carries.
        self.done: dict[int, str | None] = {}
        #: Final rows that hold an error instead of a verdict.
        self.done_errors = 0
        #: Rows removed on open to be judged again.
        self.redo = 0
        self._last_line = 0
        self._in_order = True
        self._overwrite = overwrite
        self._keep: list[bytes] = []
        self._rewrite = True
        self._handle: IO[bytes] | None = None
        if path.exists() and not overwrite:
            data = path.read_bytes()
            end = data.rfind(b"\n") + 1
            for number, raw in enumerate(data[:end].splitlines(keepends=True), start=1):
                row = self._row(raw, number)
                if not row_is_final(row, retry_errors):
                    self.redo += 1
                    continue
                line = row["line"]
                if line in self.done:
                    raise SufficeError(f"{path}:{number} answers input line {line} a second time; use --overwrite")
                self.done[line] = row.get("id")
                self.done_errors += row.get("error") is not None
                self._note(line)
                self._keep.append(raw)
            self._rewrite = end < len(data) or self.redo > 0

    def start(self) -> None:
        """Cut a partial last line, drop the rows to judge again (atomically), and open
        the file for appending."""
        if self._handle is not None:
            return
        if self._rewrite or not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _replace(self.path, self._keep)
        self._keep = []
        self._handle = self.path.open("ab")

    def _note(self, line: int) -> None:
        """Track whether the rows are still in input order (else :meth:`close` sorts)."""
        self._in_order = self._in_order and line > self._last_line
        self._last_line = max(self._last_line, line)

    def _row(self, raw: bytes, number: int) -> dict[str, Any]:
        try:
            row = json.loads(raw)
        except ValueError as exc:
            raise SufficeError(f"{self.path}:{number} is not a result line; use --overwrite to start over") from exc
        if not isinstance(row, dict) or not isinstance(row.get("line"), int):
            raise SufficeError(
                f"{self.path}:{number} is not a result line of this suffice version (no input line number); "
                "use --overwrite to start over"
            )
        return row

    def verify(self, line: int, record: object) -> None:
        """An answered row must carry the id of the input record at its line."""
        done = self.done[line]
        if record_id(record) != done:
            raise OutputMismatchError(
                "input",
                f"{self.path} does not answer this input (its row for line {line} has id {done!r}, "
                f"the input has {record_id(record)!r}); use --overwrite to start over",
            )

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows (each with its ``line``) and flush them to disk."""
        self.start()
        assert self._handle is not None
        for row in rows:
            self._note(row["line"])
            self._handle.write(dump_line(row))
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Close the file; rows out of input order are put back in order."""
        if self._handle is None:
            if self._in_order or self._rewrite:
                return  # never started: the file is as it was
            self.start()
        assert self._handle is not None
        if self._handle.closed:
            return
        self._handle.close()
        if not self._in_order:
            rows = self.path.read_bytes().splitlines(keepends=True)
            rows.sort(key=lambda raw: int(json.loads(raw)["line"]))
            _replace(self.path, rows)
            self._in_order = True
