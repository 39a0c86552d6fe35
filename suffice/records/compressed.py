"""Input files compressed with gzip, bzip2 or xz, read as they are.

Why: traces for batch scoring are usually kept compressed (``traces.jsonl.gz``), and
a user who had to decompress a million records first would also have to find the room
for them.

The compression is told by the file's first bytes, not its name (a ``.jsonl`` that
is gzip inside is still read).  zstd has no reader in Python's standard library, so a
zstd file is refused naming the command that decompresses it.  Outputs are never
compressed: a JSONL output is appended as it goes and cut back to its last whole line
on resume, which a compressed stream cannot do (Parquet outputs are compressed).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from suffice.exceptions import ConfigError

#: Magic bytes -> how to open the file.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
#: Extensions that name a compression (dropped before the format is read off the name).
SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".zst")
#: What a damaged compressed stream raises while it is read (a truncated copy:
#: ``EOFError``; a flipped byte: ``BadGzipFile`` (an ``OSError``), ``zlib.error``,
#: ``lzma.LZMAError``; a failing disk: ``OSError``).
DAMAGE = (EOFError, OSError, zlib.error, lzma.LZMAError)


def compression_of(path: Path) -> str | None:
    """``gzip``, ``bzip2``, ``xz`` or ``zstd`` by the file's first bytes, or ``None``."""
    with path.open("rb") as handle:
        head = handle.read(6)
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def open_input(path: Path) -> IO[bytes]:
    """``path`` for reading bytes, decompressed if it is compressed."""
    kind = compression_of(path)
    if kind == "gzip":
        return gzip.GzipFile(path, "rb")  # type: ignore[return-value]  # an IO[bytes] in all but name
    if kind == "bzip2":
        return bz2.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    if kind == "zstd":
        raise ConfigError("input", str(path), f"is zstd-compressed, which suffice cannot read: zstd -d {path.name}")
    return path.open("rb")


def numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Each line of ``path`` (decompressed) with its 1-based number; a stream that
    cannot be read to its end raises :class:`ConfigError` naming ``input`` and the
    last line read."""
    number = 0
    with open_input(path) as handle:
        lines = enumerate(handle, start=1)
        while True:
            try:
                number, raw = next(lines)
            except StopIteration:
                return
            except DAMAGE as exc:
                raise ConfigError(
                    "input", str(path), f"cannot be read after line {number} (damaged or cut short?): {exc}"
                ) from exc
            yield number, raw


def without_compression_suffix(path: Path) -> Path:
    """``traces.jsonl.gz`` -> ``traces.jsonl`` (the name its format is read from)."""
    return path.with_suffix("") if path.suffix.lower() in SUFFIXES else path
