"""``suffice audit verify|export`` and ``suffice review list|resolve``."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

from suffice.cli.exit_codes import EXIT_FATAL, EXIT_OK, EXIT_USAGE
from suffice.exceptions import SufficeError
from suffice.harness.audit import REVIEW_DECISIONS, AuditLog
from suffice.harness.pipeline import DEFAULT_AUDIT_DB

#: ``suffice audit verify`` when the chain is broken.
EXIT_TAMPERED = 4


def add_parsers(sub: Any) -> None:
    audit = sub.add_parser("audit", help="check or export an audit database")
    actions = audit.add_subparsers(dest="action", required=True)
    verify = actions.add_parser("verify", help="check the hash chain (exit 0 intact, 4 broken)")
    verify.add_argument("db", type=Path)
    verify.set_defaults(run=run_verify)
    export = actions.add_parser("export", help="write every evaluation row as JSONL")
    export.add_argument("db", type=Path)
    export.add_argument("-o", "--output", type=Path, required=True)
    export.set_defaults(run=run_export)

    review = sub.add_parser("review", help="the human review queue")
    ractions = review.add_subparsers(dest="action", required=True)
    listing = ractions.add_parser("list", help="open reviews (or --all)")
    listing.add_argument("--db", type=Path, default=DEFAULT_AUDIT_DB)
    listing.add_argument("--all", action="store_true", help="include resolved reviews")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(run=run_review_list)
    resolve = ractions.add_parser("resolve", help="record a person's decision on a review")
    resolve.add_argument("id", type=int)
    resolve.add_argument("--decision", required=True, choices=REVIEW_DECISIONS)
    resolve.add_argument("--by", default=None, help="who decides (default: the login name)")
    resolve.add_argument("--note", default=None)
    resolve.add_argument("--db", type=Path, default=DEFAULT_AUDIT_DB)
    resolve.set_defaults(run=run_review_resolve)


def _open(db: Path) -> AuditLog | None:
    if not db.is_file():
        print(f"error: no audit database at {db}", file=sys.stderr)
        return None
    return AuditLog(db)


def run_verify(args: argparse.Namespace) -> int:
    log = _open(args.db)
    if log is None:
        return EXIT_USAGE
    report = log.verify()
    log.close()
    if report.ok:
        print(f"intact: {report.rows} rows")
        return EXIT_OK
    print(f"BROKEN at row {report.first_broken}: {report.reason}", file=sys.stderr)
    return EXIT_TAMPERED


def run_export(args: argparse.Namespace) -> int:
    log = _open(args.db)
    if log is None:
        return EXIT_USAGE
    n = log.export(args.output)
    log.close()
    print(f"{n} rows written to {args.output}", file=sys.stderr)
    return EXIT_OK


def run_review_list(args: argparse.Namespace) -> int:
    log = _open(args.db)
    if log is None:
        return EXIT_USAGE
    rows = log.reviews(None if args.all else "open")
    log.close()
    for row in rows:
        if args.json:
            row["payload"] = json.loads(row["payload"])
            print(json.dumps(row, ensure_ascii=False))
        else:
            who = f" by {row['resolved_by']} at {row['resolved_at']}: {row['decision']}" if row["resolved_by"] else ""
            print(f"#{row['id']} [{row['status']}] {row['gate']} item {row['item_id']}: {row['reason']}{who}")
    if not args.json:
        print(f"{len(rows)} review(s)", file=sys.stderr)
    return EXIT_OK


def run_review_resolve(args: argparse.Namespace) -> int:
    log = _open(args.db)
    if log is None:
        return EXIT_USAGE
    by = args.by or getpass.getuser()
    try:
        log.resolve_review(args.id, decision=args.decision, by=by, note=args.note)
    except SufficeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FATAL
    finally:
        log.close()
    print(f"review {args.id} resolved: {args.decision} by {by}")
    return EXIT_OK
