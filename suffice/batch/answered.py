"""Which records a batch output already answers and which ids the input has shown, in a scratch SQLite file
(Python sets cost ~100 MB per million keys), rebuilt from the output each run.

A row's *key* says which input record it answers: ``i:<id>`` for the first record with that id, ``l:<position>`` for
a record without a usable id, a later record repeating an id, or an id made from the position (``row-<position>-...``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from suffice.exceptions import OutputWriteError
from suffice.files import create_private

#: SQLite's limit on parameters in one statement is 32,766 (3.32+); stay well below.
_CHUNK = 900


_PREFIX = ".suffice-keys-"

#: Every row by input position (walks the ``done_by_line`` index: no sort).
IN_INPUT_ORDER = "SELECT offset, length, line, written FROM done ORDER BY line, key"

#: SQLite's primary result codes for a failed write: the disk is full, or an I/O error.
_WRITE_FAILED = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR}


def _sweep(directory: Path | None) -> None:
    """Remove the scratch folders of runs that were killed (their process is gone)."""
    where = Path(directory if directory is not None else tempfile.gettempdir())
    for folder in where.glob(_PREFIX + "*"):
        pid = folder.name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _b(text: str) -> bytes:
    """Keys and ids are stored as bytes: an id may hold a lone surrogate, which SQLite's text cannot take."""
    return text.encode("utf-8", "surrogatepass")


def _s(blob: bytes | None) -> str | None:
    return None if blob is None else blob.decode("utf-8", "surrogatepass")


def id_key(record_id: str) -> str:
    return "i:" + record_id


def line_key(position: int) -> str:
    return f"l:{position}"


_POSITIONAL = re.compile(r"row-(\d+)(-[0-9a-f]{8})?")


def record_key(record_id: str | None, position: int) -> str:
    """The key of the record at ``position``: by its id, unless it has none or its id was made from this position
    (``row-7-3fa9c2d1`` or ``row-7``), so the position's old row is found when another record now sits there."""
    made = None if record_id is None else _POSITIONAL.fullmatch(record_id)
    if record_id is None or (made is not None and int(made.group(1)) == position):
        return line_key(position)
    return id_key(record_id)


@dataclass(frozen=True)
class DoneRow:
    """A final row of the output: where it is and what it says."""

    key: str
    offset: int
    length: int
    line: int
    id: str | None
    error: bool
    #: False for a row this run wrote for an engine failure: kept in place, judged again next run.
    final: bool = True


class KeyIndex:
    """Finished keys (with each row's place in the output) and the ids met in the input."""

    def __init__(self, directory: Path | None = None) -> None:
        _sweep(directory)
        try:
            self._dir = tempfile.TemporaryDirectory(prefix=f"{_PREFIX}{os.getpid()}-", dir=directory)
        except OSError as exc:  # a read-only or full folder: "cannot write", not a traceback
            where = directory if directory is not None else tempfile.gettempdir()
            raise OutputWriteError(str(where), exc.strerror or str(exc)) from exc
        self.path = Path(self._dir.name) / "keys.sqlite"
        create_private(self.path)  # in a folder of our own already; made here as every file suffice makes is
        self._db = sqlite3.connect(self.path, isolation_level=None)
        with self._failures():
            self._db.executescript(
                """
                PRAGMA journal_mode = OFF;
                PRAGMA synchronous = OFF;
                PRAGMA cache_size = -4096;
                PRAGMA temp_store = FILE;
                CREATE TABLE done (
                    key BLOB PRIMARY KEY, offset INTEGER, length INTEGER, line INTEGER,
                    id BLOB, error INTEGER, final INTEGER, met INTEGER DEFAULT 0, written INTEGER
                ) WITHOUT ROWID;
                CREATE TABLE seen (id BLOB PRIMARY KEY, line INTEGER) WITHOUT ROWID;
                CREATE INDEX done_by_line ON done (line, key);
                """
            )
        self.done_count = 0
        self.done_errors = 0

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """A full disk (or an I/O error) under the index becomes :class:`OutputWriteError` naming its file; the index
        is unusable after it (no journal)."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if (exc.sqlite_errorcode & 0xFF) not in _WRITE_FAILED:
                raise
            raise OutputWriteError(str(self.path), str(exc)) from exc

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction: committed whole or rolled back, with :meth:`_failures`."""
        with self._failures():
            self._db.execute("BEGIN")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise

    def _among(self, query: str, values: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """The rows of ``query`` (ending ``IN``) for ``values``, asked :data:`_CHUNK` at a time."""
        for start in range(0, len(values), _CHUNK):
            part = [_b(v) for v in values[start : start + _CHUNK]]
            yield from self._db.execute(f"{query} ({','.join('?' * len(part))})", part)

    # -- rows of the output ---------------------------------------------------------
    def add_done(self, rows: Iterable[DoneRow], *, met: bool = False) -> None:
        """Record rows of the output (keys not yet present); ``met``: rows this run wrote for its input's records."""
        values = [
            (_b(r.key), r.offset, r.length, r.line, None if r.id is None else _b(r.id), int(r.error), int(r.final))
            for r in rows
        ]
        with self._transaction():
            self._db.executemany(
                "INSERT INTO done (key, offset, length, line, id, error, final, met, written) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                [(*v, int(met), v[3]) for v in values],
            )
        self.done_count += sum(v[6] for v in values)
        self.done_errors += sum(v[5] and v[6] for v in values)

    def done_rows(self, keys: Sequence[str]) -> dict[str, DoneRow]:
        """The final rows among ``keys``."""
        query = "SELECT key, offset, length, line, id, error FROM done WHERE final = 1 AND key IN"
        return {
            str(_s(blob)): DoneRow(str(_s(blob)), offset, length, line, _s(rid), bool(error))
            for blob, offset, length, line, rid, error in self._among(query, keys)
        }

    def forget(self, keys: Sequence[str]) -> int:
        """Drop these final rows (stale); returns how many were errors."""
        rows = self.done_rows(keys)
        with self._transaction():
            self._db.executemany("DELETE FROM done WHERE key = ?", [(_b(k),) for k in rows])
        errors = sum(r.error for r in rows.values())
        self.done_count -= len(rows)
        self.done_errors -= errors
        return errors

    def mark_met(self, found: Iterable[tuple[str, int]]) -> None:
        """These finished keys were met in the input at these positions."""
        with self._transaction():
            self._db.executemany(
                "UPDATE done SET met = 1, line = ? WHERE key = ?", [(line, _b(key)) for key, line in found]
            )

    def unmet(self) -> int:
        """Finished rows whose key the input did not have."""
        (count,) = self._db.execute("SELECT COUNT(*) FROM done WHERE met = 0 AND final = 1").fetchone()
        return int(count)

    def move(self, offsets: Iterable[tuple[str, int]]) -> None:
        """New offsets of rows after the output was rewritten."""
        with self._transaction():
            self._db.executemany("UPDATE done SET offset = ? WHERE key = ?", [(o, _b(k)) for k, o in offsets])

    def in_input_order(self) -> Iterator[tuple[int, int, int, int]]:
        """(offset, length, position in this input, ``line`` the row holds) of every row, by input position."""
        # Read in index order: a sort would spill to SQLite's temporary folder (/tmp, not the output's disk).
        with self._failures():
            yield from self._db.execute(IN_INPUT_ORDER)

    def relined(self) -> bool:
        """Whether a row's record now sits at another position than the row says."""
        return self._db.execute("SELECT 1 FROM done WHERE line != written LIMIT 1").fetchone() is not None

    # -- ids of the input -----------------------------------------------------------
    def first_lines(self, ids: Sequence[tuple[str, int]]) -> dict[str, int]:
        """Note each (id, position) met in the input; return where each id was first met (this batch or before)."""
        unique = list(dict.fromkeys(i for i, _ in ids))
        first = {str(_s(blob)): line for blob, line in self._among("SELECT id, line FROM seen WHERE id IN", unique)}
        new: list[tuple[bytes, int]] = []
        for rid, line in ids:
            if rid not in first:
                first[rid] = line
                new.append((_b(rid), line))
        with self._transaction():
            self._db.executemany("INSERT INTO seen (id, line) VALUES (?, ?)", new)
        return first

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()
