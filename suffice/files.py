"""The one way suffice writes a file: :func:`replace_atomically` (a whole file, renamed into place in its folder),
:func:`open_output` (a new file, or one appended to) and :func:`create_private` (an empty owner-only file that another
library then opens, the audit database).  Every file suffice creates, appends or replaces goes through these, and a
test keeps any other ``open(..., "w")``, ``write_text`` or ``write_bytes`` out of ``suffice/``.

What they share: a symlink at the name is never followed (``O_NOFOLLOW``, ``O_EXCL`` on temporaries), so a
neighbour who can write to a shared folder cannot plant ``OUT.rejected -> ~/.bashrc`` and have the run append to
it; an appended file must be a regular file with one link; ``private=True`` gives a new file mode 0600 (anything
holding records, model outputs or keys) and refuses to append to one that another user owns.  A failure (a full
disk, a crash, a power cut) leaves the old file or the new one and no temporary; write errors become
:class:`OutputWriteError` naming the file.  :func:`output_lock` keeps a second run off an output."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Literal

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


#: The mode of a new file holding records, model outputs or keys.
PRIVATE_MODE = 0o600


def file_mode(path: Path, *, private: bool = False) -> int:
    """The permissions a replacement of ``path`` gets: the old file's, or for a new file what ``open()`` would give
    (0o666 less the umask; 0600 if ``private``): ``mkstemp``'s 0600 is for the temporary only.  A symlink at
    ``path`` counts as no file: it is replaced, never followed, and its target's mode is not copied."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode):
        return PRIVATE_MODE if private else 0o666 & ~_umask()
    return stat.S_IMODE(info.st_mode)


def _refuse_link(path: Path, exc: OSError) -> OutputWriteError:
    """What a refused open means: a planted symlink is named as one, other errors as the system says."""
    if exc.errno in (errno.ELOOP, errno.EEXIST, errno.EMLINK) and os.path.islink(path):
        return OutputWriteError(str(path), "is a symbolic link; suffice never writes through one: remove it")
    return write_error(path, exc)


def planted(info: os.stat_result, *, private: bool) -> str | None:
    """Why a file suffice writes to (or reads its own state from) is not its own, or ``None``: another user owns it
    (planted beside the output, what we write would be theirs to read or to change), or others may write it (every
    user; for a ``private`` file, the group too: a cache, an audit log or a key must be the owner's alone).  The one
    owner check every writer goes through."""
    if info.st_uid != os.geteuid():
        return f"belongs to another user (uid {info.st_uid}), who could read or change it"
    if info.st_mode & (0o022 if private else 0o002):
        return f"may be written by other users (mode {stat.S_IMODE(info.st_mode):04o}): chmod go-w it"
    return None


def _check_opened(path: Path, fd: int, *, private: bool) -> None:
    """Refuse (closing ``fd``) what an open without following links can still reach: a FIFO or device, a hard
    link to someone's file, a file that is not this user's own (:func:`planted`).  An existing file's mode is
    otherwise its owner's choice and is kept."""
    info = os.fstat(fd)
    why = None
    if not stat.S_ISREG(info.st_mode):
        why = "is not a regular file"
    elif info.st_nlink > 1:
        why = "is a second link to another file"
    else:
        why = planted(info, private=private)
    if why is not None:
        os.close(fd)
        raise OutputWriteError(str(path), f"{why}: refusing to write to it")


def open_output(path: Path, how: Literal["new", "append"], *, private: bool = False) -> BinaryIO:
    """``path`` opened for binary writing without following a symlink at its last component.

    ``how="new"``: created, never an existing file (``FileExistsError`` passes through for the caller to name);
    ``"append"``: created or appended to, and checked as :func:`_check_opened` says.  A new file gets mode 0600 if
    ``private``, else what the umask gives.  Errors other than ``FileExistsError`` raise
    :class:`OutputWriteError` naming ``path``.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    flags |= os.O_EXCL if how == "new" else os.O_APPEND
    try:
        fd = os.open(path, flags, PRIVATE_MODE if private else 0o666)
    except FileExistsError:
        if os.path.islink(path):
            raise OutputWriteError(
                str(path), "is a symbolic link; suffice never writes through one: remove it"
            ) from None
        raise
    except OSError as exc:
        raise _refuse_link(path, exc) from exc
    _check_opened(path, fd, private=private)
    if private and how == "new":
        try:
            with writing(path):
                os.fchmod(fd, PRIVATE_MODE)  # the file system may ignore open's mode
        except BaseException:
            os.close(fd)
            raise
    os.set_blocking(fd, True)
    if how == "append":
        os.lseek(fd, 0, os.SEEK_END)  # as open(..., "ab") does: tell() is the file's size
    return os.fdopen(fd, "wb")


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it is there, for a library that opens it by name afterwards
    (SQLite would create it 0644 and follow a link).  An existing name must be a regular file with one link; a
    symlink, dangling or not, is refused rather than left for the library to follow.  An existing file keeps the
    mode its owner gave it."""
    try:
        open_output(path, "new", private=True).close()
    except FileExistsError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise _refuse_link(path, exc) from exc
        _check_opened(path, fd, private=True)
        os.close(fd)


def write_new(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write ``data`` to a new file at ``path`` (see :func:`open_output`); a file left half written by a failure is
    removed, being this call's own."""
    handle = open_output(path, "new", private=private)
    try:
        with handle, writing(path):
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def _umask() -> int:
    """The process's umask, read from /proc where it can be: ``os.umask`` can only read it by changing it, and a
    thread creating a file meanwhile would get the wrong mode."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def sync_folder(folder: Path) -> None:
    """fsync ``folder`` itself: a rename is only on disk once its directory is, else a power cut can bring back
    the old file after the run said it finished.  File systems that cannot sync a directory (EINVAL) are let be."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def temporary_beside(path: Path) -> tuple[int, Path]:
    """A new file in ``path``'s folder (fd, path) for :func:`replace_atomically`-style writes.

    ``mkstemp`` picks an unguessable name and creates it with ``O_EXCL`` (mode 0600): a fixed name such as
    ``OUT.tmp`` let anyone who can write to the folder plant a symlink there and have the run write through it.
    """
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    return fd, Path(name)


def open_temporary_beside(path: Path, *, private: bool = False) -> tuple[BinaryIO, Path]:
    """A new temporary (:func:`temporary_beside`) opened for binary writing, with the mode ``path``'s replacement
    gets (:func:`file_mode`), for a writer that renames it over ``path`` itself (a Parquet output)."""
    fd, tmp = temporary_beside(path)
    try:
        os.fchmod(fd, file_mode(path, private=private))
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return os.fdopen(fd, "wb"), tmp


def replace_atomically(path: Path, chunks: Iterable[bytes], *, mode: int | None = None, private: bool = False) -> None:
    """Write ``chunks`` to a new temporary file beside ``path`` (:func:`temporary_beside`), flush it, rename it
    over ``path`` and sync the folder; on any failure the temporary is removed and ``path`` is as it was.  A
    symlink at ``path`` is replaced by the file, its target untouched.

    ``mode``: the new file's permissions (default: the old file's, or what the umask gives a new file, 0600 if
    ``private``).
    """
    with writing(path):
        fd, tmp = temporary_beside(path)
    try:
        try:
            with writing(path):
                os.fchmod(fd, file_mode(path, private=private) if mode is None else mode)
        except BaseException:
            os.close(fd)
            raise
        handle = os.fdopen(fd, "wb")
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
            sync_folder(path.parent)
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


def _open_lock(path: Path) -> int:
    """Open (or create, mode 0600) the lock file itself, never what a name planted there points at.

    The lock is truncated and written once held, so a symlink ``OUT.lock -> victim`` (``O_NOFOLLOW``), a hard link
    to another file (a second link) or a FIFO (``O_NONBLOCK``: the open does not hang) is refused rather than
    followed: each would have let a neighbour have the run overwrite a file of the user's choosing.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputWriteError(str(path), "is a symbolic link; a lock file never is: remove it") from None
        raise write_error(path, exc) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else "a second link to another file"
        raise OutputWriteError(str(path), f"is {what}; a lock file never is: remove it")
    return fd


@contextlib.contextmanager
def output_lock(output: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``OUTPUT.lock`` for the ``with`` body, or raise :class:`OutputBusyError`
    (naming the holder's pid) at once.

    The kernel releases it when the holder dies, so a killed run never blocks its resume.  The file is removed while
    held, and a process that locked a removed inode tries again, so two runs never both hold it.
    """
    path = lock_path(output)
    while True:
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise OutputBusyError(str(output), pid) from None
        except OSError as exc:  # no locks on this filesystem (ENOLCK, some network mounts)
            os.close(fd)
            warnings.warn(
                f"cannot lock {path} ({exc.strerror}): a second run on this output would not be refused", stacklevel=3
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
