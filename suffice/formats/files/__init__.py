"""File formats: what ``suffice judge`` reads records from and writes rows to (``--input-format``,
``--output-format``, or by the file's extension; a compressed input is read through :mod:`suffice.records.compressed`
whatever its format), and what ``suffice audit export`` streams rows into (``--format``: the :class:`RowLines` role).

A format is an object with the attributes and methods of :class:`FileFormat`, registered under the entry-point group
``suffice.file_formats`` (the entry point's name is the format's), suffice's own as any other package's
(:class:`~suffice.gates.registry.Registry`).  A run appends its rows to a JSON Lines journal as batches finish, so a
format that cannot be appended to is written from that journal when the run ends (:meth:`FileFormat.finish`) and
turned back into one to resume (:meth:`FileFormat.resume`).  A format may offer either role or both: each command
lists those that offer its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from suffice.exceptions import ConfigError
from suffice.formats.verdicts import VerdictFormat
from suffice.gates.base import Gate
from suffice.gates.registry import Registry
from suffice.records import compressed
from suffice.records.lines import SourceLine

#: The format of a file when neither a flag nor an extension says (JSON Lines).
DEFAULT_FILE_FORMAT = "jsonl"


@runtime_checkable
class FileFormat(Protocol):
    """A file format: its name and extensions, how its records are read, how rows are written in it."""

    #: What ``--input-format`` and ``--output-format`` say.
    name: str
    #: The extensions read as this format (lower case, with the dot); ``.jsonl.gz`` is ``.jsonl``.
    suffixes: tuple[str, ...]
    #: What a record's position counts in an error row (``line``, ``row``).
    unit: str
    #: Whether rows are appended to the output itself as they come; if not, to ``OUTPUT.journal.jsonl``, from which
    #: :meth:`finish` writes the output when the run ends.
    appendable: bool

    def count(self, path: Path) -> int | None:
        """The records in ``path`` (``None``: not known before reading); a :class:`ConfigError` naming ``input`` for
        a file this format cannot read, before anything is judged."""

    def records(self, path: Path, caps: tuple[int, int]) -> Iterator[SourceLine]:
        """Every record of ``path`` with its position from 1; one that cannot be read is an
        :class:`~suffice.records.item.InvalidRecord` (``caps``: a string's characters, a list's entries, for a reader
        that can measure a record before converting it)."""

    def refuses(self, verdicts: VerdictFormat, detail: str) -> ConfigError | None:
        """Why an output in this format cannot hold rows of ``verdicts`` at ``detail`` (``None``: it can)."""

    def finish(self, journal: Path, output: Path, gate: Gate) -> None:
        """Write ``output`` from the run's ``journal`` (JSON Lines; not called for an appendable format)."""

    def resume(self, output: Path, journal: Path) -> None:
        """Turn a finished ``output`` back into a ``journal`` to resume from (not called for an appendable format)."""


@runtime_checkable
class RowLines(Protocol):
    """The role of a format rows of known columns can be streamed into (``suffice audit export``)."""

    name: str

    def lines(self, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> Iterator[bytes]:
        """``rows`` as lines of bytes (a header first where the format has one); ``columns``: every row's keys,
        in order."""


FILE_FORMATS: Registry[Any] = Registry(
    "file format", "suffice.file_formats", lambda fmt: isinstance(fmt, (FileFormat, RowLines)), "format"
)


def file_format(name: str, option: str = "format", role: Any = FileFormat) -> Any:
    """The file format ``name`` offering ``role`` (:class:`FileFormat`: a batch run's input or output;
    :class:`RowLines`: an export); a :class:`~suffice.exceptions.ConfigError` names ``option`` otherwise."""
    fmt = FILE_FORMATS.get(name, option)
    if not isinstance(fmt, role):
        raise ConfigError(option, name, f"must be one of {', '.join(file_format_names(role))}")
    return fmt


def file_format_names(role: Any = FileFormat) -> tuple[str, ...]:
    """The names of the file formats offering ``role``, suffice's own first."""
    return tuple(fmt.name for fmt in FILE_FORMATS.all() if isinstance(fmt, role))


def file_format_of(path: Path, given: str | None, option: str = "format") -> FileFormat:
    """``given``, or the format ``path``'s extension names (``.jsonl.gz`` is JSON Lines); a ConfigError otherwise,
    and for a compressed output name (``option`` ``output-format``)."""
    if option == "output-format" and path.suffix.lower() in compressed.SUFFIXES:
        raise ConfigError(
            "output",
            str(path),
            "cannot be compressed: a JSONL output is appended as it goes and resumed from its last whole line; "
            "write .jsonl, or .parquet (compressed)",
        )
    if given is not None:
        return file_format(given, option)  # type: ignore[no-any-return]
    suffix = compressed.without_compression_suffix(path).suffix.lower()
    for fmt in FILE_FORMATS.all():
        if isinstance(fmt, FileFormat) and suffix in fmt.suffixes:
            return fmt
    raise ConfigError(option, str(path), f"cannot tell the format from the extension; give --{option}")


def format_of(path: Path, given: str | None, option: str = "format") -> str:
    """The name of :func:`file_format_of`'s format."""
    return file_format_of(path, given, option).name
