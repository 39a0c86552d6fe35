"""Files written so that a failure (a full disk, a crash) leaves the old file or the
new one, and nothing beside them.

Why one helper: four places replaced a file through a temporary one (the result
journal's rewrite, the Parquet journal restore, the run settings, the audit anchor)
and each left its ``.tmp`` behind when the disk filled mid-write, where it took the
room a rerun needed.  Write errors become :class:`OutputWriteError` naming the file;
errors from producing the content pass through as they are.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from suffice.exceptions import OutputWriteError


def write_error(path: Path, exc: OSError) -> OutputWriteError:
    return OutputWriteError(str(path), exc.strerror or str(exc))


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an OSError inside into :class:`OutputWriteError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise write_error(path, exc) from exc


def replace_atomically(path: Path, chunks: Iterable[bytes], tmp: Path | None = None) -> None:
    """Write ``chunks`` to ``tmp`` (default ``path + ".tmp"``), flush it to disk and
    rename it over ``path``; on any failure ``tmp`` is removed and ``path`` is as it was."""
    tmp = tmp if tmp is not None else path.with_name(path.name + ".tmp")
    try:
        with writing(path):
            handle = tmp.open("wb")
        try:
            for chunk in chunks:  # an error producing a chunk passes through as it is
                with writing(path):
                    handle.write(chunk)
            with writing(path):
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            # Closing flushes what is buffered: on a full disk that fails too, and the
            # first error is the one to report.
            with contextlib.suppress(OSError):
                handle.close()
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
