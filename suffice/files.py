"""Files written so that a failure (a full disk, a crash) leaves the old file or the new one and no ``.tmp``; write
errors become :class:`OutputWriteError` naming the file.  :func:`output_lock` keeps a second run off an output."""

from __future__ import annotations

import contextlib
import fcntl
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from suffice.exceptions import OutputBusyError, OutputWriteError


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
    """Write ``chunks`` to ``tmp`` (default ``path + ".tmp"``), flush it and rename it over ``path``; on any failure
    ``tmp`` is removed and ``path`` is as it was."""
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
            # Closing flushes: on a full disk that fails too, and the first error is the one to report.
            with contextlib.suppress(OSError):
                handle.close()
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


#: Descriptors of the output locks this process holds (:func:`output_lock`).
_HELD: set[int] = set()


def _drop_held_in_child() -> None:
    """In a forked child, close the inherited lock descriptors (a ``flock`` lasts while any descriptor is open)."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_held_in_child)


def lock_path(output: Path) -> Path:
    """The lock file beside ``output`` (a Parquet output's journal goes under it too)."""
    return output.with_name(output.name + ".lock")


def _holder(fd: int) -> int | None:
    """The pid the lock's holder wrote into it (``None`` if not written yet, or not ours)."""
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text else None
    return None


@contextlib.contextmanager
def output_lock(output: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``OUTPUT.lock`` for the ``with`` body, or raise :class:`OutputBusyError`
    (naming the holder's pid) at once.

    The kernel releases it when the holder dies, so a killed run never blocks its resume.  The file is removed while
    held, and a process that locked a removed inode tries again, so two runs never both hold it.
    """
    path = lock_path(output)
    while True:
        with writing(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise OutputBusyError(str(output), pid) from None
        except OSError as exc:  # no locks on this filesystem (ENOLCK, some network mounts)
            os.close(fd)
            warnings.warn(
                f"cannot lock {path} ({exc.strerror}): a second run on this output would not be refused",
                stacklevel=3,
            )
            yield
            return
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(fd), current):
            break
        os.close(fd)  # the previous holder removed it after we opened it: lock the new one
    _HELD.add(fd)
    try:
        with writing(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held (see above)
        _HELD.discard(fd)
        os.close(fd)
