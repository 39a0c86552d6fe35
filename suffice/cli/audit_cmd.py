"""``suffice audit verify|anchor|keygen|export`` (``suffice review``: :mod:`suffice.cli.review_cmd`).

Exit statuses of ``audit verify``: 0 intact (checked with the key), 5 intact as an unkeyed
chain (accidental edits only: anyone who can write the file can rebuild it, a keyed log's
too, so a script must not read it as 0), 4 tampered (the message names the row, review or
anchor problem; a log that says it is unkeyed where the key, ``--expect-keyed`` or a keyed
anchor says it is keyed), 2 usage (no database, a bad key or anchor file, a keyed database
without ``--audit-key``, a database of an older format).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.audit import (
    AuditLog,
    is_audit_file,
    load_anchor,
    load_key,
    save_anchor,
    write_key_file,
)
from suffice.audit.log import export_lines
from suffice.cli.errors import command
from suffice.exceptions import (
    EXIT_OK,
    EXIT_TAMPERED,
    EXIT_UNKEYED,
    ConfigError,
    ExportWriteError,
    OutputMismatchError,
    OutputWriteError,
)
from suffice.formats.files import DEFAULT_FILE_FORMAT, RowLines, file_format_names
from suffice.records.text import terminal_text
from suffice.settings import setting

_KEY_HELP = "key file from `suffice audit keygen` (required for a database created with a key)"


def export_format_names() -> tuple[str, ...]:
    """The file formats an audit export can be written in (those that write row lines)."""
    return file_format_names(RowLines)


@dataclass(frozen=True)
class AuditCommandSettings:
    """The settings of ``suffice audit``'s actions (``review decide`` takes ``--audit-key`` too)."""

    db: Path | None = setting(None, "the audit database", positional=True)
    audit_key: Path | None = setting(None, _KEY_HELP)
    expect_keyed: bool = setting(
        False, "the log must be keyed: one that says it is not was rewritten without the key (exit 4)"
    )
    anchor_file: Path | None = setting(
        None, "an anchor file (`suffice audit anchor`, or --anchor-file of judge/calibrate/serve)"
    )
    output: Path | None = setting(None, "the file to write", also=("-o",), required=True)
    since: str | None = setting(None, "rows at or after this ISO 8601 time (UTC unless it says)")
    until: str | None = setting(None, "rows before this ISO 8601 time (UTC unless it says)")
    export_format: str = setting(
        DEFAULT_FILE_FORMAT, "CSV: nested fields as JSON", flag="--format", choices=export_format_names
    )
    export_output: Path | None = setting(
        None, "the file (mode 0600; default: stdout)", flag="--output", also=("-o",), dest="output"
    )


def add_parsers(sub: Any) -> None:
    audit = sub.add_parser("audit", help="check, anchor or export an audit database; make a key")
    actions = audit.add_subparsers(dest="action", required=True)
    verify_help = "check the chains (exit 0 intact with the key, 5 intact without a key, 4 tampered, 2 usage)"
    verify_flags = ("db", "audit_key", "expect_keyed", "anchor_file")
    command(actions, "verify", run_verify, AuditCommandSettings, verify_flags, help=verify_help)
    anchor_help = "write the row counts and heads (MAC'd with the key) to keep elsewhere"
    command(actions, "anchor", run_anchor, AuditCommandSettings, ("db", "audit_key", "output"), help=anchor_help)
    keygen_help = "write a new random key (hex, mode 0600; never overwrites)"
    command(actions, "keygen", run_keygen, AuditCommandSettings, ("output",), help=keygen_help)
    export_help = "write the evaluation rows (of a time window) with their reviews, as JSONL or CSV"
    export_flags = ("db", "since", "until", "export_format", "export_output")
    command(actions, "export", run_export, AuditCommandSettings, export_flags, help=export_help)


def _open(db: Path, key_file: Path | None = None) -> AuditLog:
    """The database opened with its key; a missing file is a :class:`ConfigError` naming ``audit_db``, not created
    here, since a typo must not look like an empty, intact log."""
    if not db.is_file():
        raise ConfigError("audit_db", str(db), "no audit database there")
    return AuditLog(db, key=load_key(key_file) if key_file else None, create=False)


def _refuse_the_log(db: Path, output: Path) -> None:
    """Refuse an ``output`` that is the database or one of SQLite's files beside it (an anchor or export written
    there destroyed the log)."""
    if is_audit_file(db, output):
        reason = f"-o {output} is the audit database {db} (or its -wal/-shm file); choose another"
        raise OutputMismatchError("output", reason)


def run_verify(args: argparse.Namespace) -> int:
    anchor = load_anchor(args.anchor_file) if args.anchor_file else None
    log = _open(args.db, args.audit_key)
    if log.keyed and args.audit_key is None:
        # Without the key nothing about a keyed log can be checked: not a pass, not "tampered" either.
        log.close()
        reason = f"cannot verify {args.db}: it is chained with HMAC-SHA256 and only its key can check it"
        raise ConfigError("audit_key", None, f"{reason}; pass --audit-key FILE")
    try:
        report = log.verify(anchor, expect_keyed=args.expect_keyed)
    finally:
        log.close()
    if not report.ok:
        print(f"BROKEN: {terminal_text(report.reason)}", file=sys.stderr)
        return EXIT_TAMPERED
    covered = f"; all {report.anchored_rows} anchored rows present and unchanged" if anchor else "; no anchor given"
    if report.keyed:
        print(f"intact: {report.rows} rows, {report.review_events} review events (HMAC-SHA256 with the key){covered}")
        return EXIT_OK
    print(
        f"unkeyed: {report.rows} rows, {report.review_events} review events form an intact SHA-256 chain{covered}. "
        "This checks accidental edits only: anyone who can write the file can rebuild the chain, and a keyed log "
        "rewritten without its key looks like this. For proof, chain the log with a key (`suffice audit keygen`); "
        "to fail on a log that should be keyed, pass --expect-keyed."
    )
    return EXIT_UNKEYED


def run_anchor(args: argparse.Namespace) -> int:
    _refuse_the_log(args.db, args.output)
    log = _open(args.db, args.audit_key)
    try:
        anchor = log.anchor()  # a broken chain (AuditBrokenError) is not anchored: exit 4, tampered
    finally:
        log.close()
    try:
        save_anchor(anchor, args.output)
    except OSError as exc:  # written whole or not at all, as an export is: -o must change
        raise ExportWriteError(str(args.output), str(exc)) from exc
    chains = anchor["chains"]
    print(
        f"anchored {chains['evaluations']['count']} rows and {chains['reviews']['count']} review events "
        f"to {terminal_text(args.output)}" + ("" if anchor["mac"] else " (no key: the anchor has no MAC)"),
        file=sys.stderr,
    )
    return EXIT_OK


def run_keygen(args: argparse.Namespace) -> int:
    kid = write_key_file(args.output)
    print(
        f"key {kid} written to {terminal_text(args.output)} (mode 0600): keep it apart from the database",
        file=sys.stderr,
    )
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    if args.output is not None:
        _refuse_the_log(args.db, args.output)
    log = _open(args.db)
    try:
        if args.output is not None:
            n = log.export(args.output, since=args.since, until=args.until, fmt=args.export_format)
        else:
            n = _export_to_stdout(log, args)
    except OutputWriteError as exc:  # an export is written whole or not at all: nothing to resume, -o must change
        raise ExportWriteError(exc.path, exc.reason) from exc
    finally:
        log.close()
    where = "stdout" if args.output is None else terminal_text(args.output)
    print(f"{n} rows written to {where}", file=sys.stderr)
    return EXIT_OK


def _export_to_stdout(log: AuditLog, args: argparse.Namespace) -> int:
    n = 0
    rows = log.export_rows(args.since, args.until)  # a bad bound is refused before the first line

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal n
        for row in rows:
            n += 1
            yield row

    out = sys.stdout.buffer
    # On a terminal the rows are read, not kept: a model output or item id holding escape sequences is shown
    # escaped (redirected, the bytes are exactly the file's).
    shown = sys.stdout.isatty()
    for line in export_lines(counted(), args.export_format):
        if shown:
            line = (terminal_text(line.decode("utf-8", "replace").rstrip("\r\n")) + "\n").encode("utf-8")
        out.write(line)
    out.flush()
    return n


def _login_name() -> str | None:
    """The login name ``--by`` defaults to, or None where there is none: getpass raises
    (KeyError before Python 3.13, OSError since) for a uid without a password entry and
    no ``USER``/``LOGNAME``, as in a container run with ``-u 12345``."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
