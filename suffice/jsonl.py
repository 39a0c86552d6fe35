"""JSONL in and out, written as it goes so a killed job loses nothing and resumes.

The output is append-only and flushed after every batch; on resume a trailing
partial line (the process died mid-write) is cut off and the records already
answered are skipped, after checking that their ids match the input's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from suffice.exceptions import SufficeError
from suffice.records import InvalidRecord, record_id


def read_records(path: Path) -> Iterator[object]:
    """Each non-blank line as parsed JSON, or :class:`InvalidRecord` if it is not JSON."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                yield InvalidRecord(line=number, message=str(exc))


def _complete_lines(path: Path) -> list[str]:
    """The output's complete lines; a partial last line is cut off the file."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with path.open("r+b") as handle:
            handle.truncate(end)
    return data[:end].decode("utf-8").splitlines()


class ResumableWriter:
    """Appends result lines; knows how many input records are already answered."""

    def __init__(self, path: Path, *, overwrite: bool = False) -> None:
        self.path = path
        self.done_ids: list[str | None] = []
        #: Lines already written that hold an error instead of a verdict.
        self.done_errors = 0
        if path.exists() and not overwrite:
            for number, line in enumerate(_complete_lines(path), start=1):
                try:
                    row = json.loads(line)
                    self.done_ids.append(row.get("id"))
                    self.done_errors += row.get("error") is not None
                except (json.JSONDecodeError, AttributeError) as exc:
                    raise SufficeError(f"{path}:{number} is not a result line; use --overwrite to start over") from exc
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: IO[str] = path.open("a" if self.done_ids else "w", encoding="utf-8")

    def verify(self, index: int, record: object) -> None:
        """An answered line must belong to this input's record at the same position."""
        done = self.done_ids[index]
        if record_id(record) != done:
            raise SufficeError(
                f"{self.path} does not continue this input (line {index + 1} has id {done!r}, "
                f"the input has {record_id(record)!r}); use --overwrite to start over"
            )

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self._handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()
