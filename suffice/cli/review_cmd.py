"""``suffice review list|show|decide|export``: the human review queue, read and decided on the audit database.

``decide`` records who decided (``--by``, default the login name) and may correct the label; ``--answer`` (with
``answer``) and ``--query``, repeated (with ``refine_retrieval``), give what the decision hands the application.  A
review that needs two independent reviewers stays open until two agree.  ``export --labels FILE`` writes the
resolved reviews as labeled records ``suffice calibrate`` takes as they are, and says per gate and rule how often
people overrode the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.audit import DEFAULT_AUDIT_DB, LABELS, REVIEW_DECISIONS
from suffice.audit.reviewing import decisions_of, state_of
from suffice.cli.audit_cmd import AuditCommandSettings, _login_name, _open, _refuse_the_log
from suffice.cli.errors import command
from suffice.exceptions import EXIT_OK, AuditError, ConfigError, ExportWriteError, OutputWriteError
from suffice.files import replace_atomically
from suffice.records.text import terminal_text
from suffice.settings import add_flags, setting


@dataclass(frozen=True)
class ReviewSettings:
    """The settings of ``suffice review``'s actions (``--audit-key``: :class:`AuditCommandSettings`')."""

    db: Path = setting(DEFAULT_AUDIT_DB, f"default {DEFAULT_AUDIT_DB}", flag="--audit-db")
    all: bool = setting(False, "include resolved reviews")
    json: bool = setting(False, "one JSON object per line (show: the review as one JSON object)")
    id: int | None = setting(None, "the review's number", positional=True)
    decision: str | None = setting(None, "the person's decision", required=True, choices=REVIEW_DECISIONS)
    label: str | None = setting(
        None,
        "correct the label: was the context sufficient? (default: what the decision implies)",
        choices=LABELS,
    )
    by: str | None = setting(None, "who decides (default: the login name)")
    note: str | None = setting(None, "a note kept with the decision")
    answer: str | None = setting(
        None, "for --decision answer: the answer to deliver (default: the response under review)"
    )
    query: tuple[str, ...] = setting(
        (), "for --decision refine_retrieval: a query to search (repeat for more; none: the note's lines)"
    )
    labels: Path | None = setting(None, "the JSONL file to write", required=True)
    gate: str | None = setting(None, "only this gate's reviews (calibrate tunes one gate)")


def add_parser(sub: Any) -> None:
    review = sub.add_parser("review", help="the human review queue: list, show, decide, export labels")
    actions = review.add_subparsers(dest="action", required=True)
    command(actions, "list", run_list, ReviewSettings, ("db", "all", "json"), help="open reviews (or --all)")
    show_help = "one review: query, context, verdict, rule, decisions"
    command(actions, "show", run_show, ReviewSettings, ("id", "db", "json"), help=show_help)
    decide_flags = ("id", "decision", "label", "by", "note", "answer", "query", "db")
    decide_help = "record a person's decision on a review"
    decide = command(actions, "decide", run_decide, ReviewSettings, decide_flags, aliases=["resolve"], help=decide_help)
    add_flags(decide, AuditCommandSettings, only=("audit_key",))
    export_help = "write resolved reviews as labeled records for `suffice calibrate`, with the overrides"
    command(actions, "export", run_export, ReviewSettings, ("labels", "gate", "db"), help=export_help)


def _parsed(row: dict[str, Any], db: Path) -> dict[str, Any]:
    """``row`` with its payload and decisions parsed; a damaged payload is an :class:`AuditError` naming it."""
    try:
        payload = json.loads(row["payload"])
    except (TypeError, ValueError):
        raise AuditError(
            f"{db}: review {row['id']}: payload is not JSON (was the log altered? `suffice audit verify` names "
            "the damage)"
        ) from None
    return {**row, "payload": payload, "decisions": decisions_of(row), "state": state_of(row)}


def run_list(args: argparse.Namespace) -> int:
    log = _open(args.db)
    try:
        rows = log.reviews(None if args.all else "open")
    finally:
        log.close()
    if args.json:
        # Every payload parsed before anything is printed: a script reading the
        # lines gets all of them or none, never the queue cut at an altered review.
        parsed = [_parsed(row, args.db) for row in rows]
        for row in parsed:
            print(json.dumps(row, ensure_ascii=False))
        return EXIT_OK
    for row in rows:
        who = f" by {row['resolved_by']} at {row['resolved_at']}: {row['decision']}" if row["resolved_by"] else ""
        state = state_of(row)
        if state in ("awaiting", "disputed"):
            who = f" ({state}: {len(decisions_of(row))} of {row['reviewers']} reviewers decided)"
        rule = f" [{row['rule']}]" if row.get("rule") else ""
        # Every field as stored, which anyone who could write the log (or send an item id) chose.
        print(
            terminal_text(
                f"#{row['id']} [{row['status']}] {row['gate']} item {row['item_id']}{rule}: {row['reason']}{who}"
            )
        )
    print(f"{len(rows)} review(s)", file=sys.stderr)
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    log = _open(args.db)
    try:
        row = log.review(args.id)
    finally:
        log.close()
    review = _parsed(row, args.db)
    if args.json:
        print(json.dumps(review, ensure_ascii=False))
        return EXIT_OK
    print(terminal_text(_text(review)))
    return EXIT_OK


def _text(review: dict[str, Any]) -> str:
    """A review for a terminal: what the page shows."""
    payload = review["payload"] if isinstance(review["payload"], dict) else {"payload": review["payload"]}
    lines = [
        f"review {review['id']} [{review['state']}]: {review['gate']} item {review['item_id']}",
        f"rule: {review.get('rule') or '-'}; reason: {review['reason']}",
        f"reviewers required: {review['reviewers']}; machine's label: {review.get('machine_label') or '-'}",
        f"question: {payload.get('question')}",
    ]
    if payload.get("response") is not None:
        lines.append(f"response: {payload['response']}")
    chunks = payload.get("chunks")
    for chunk in chunks if isinstance(chunks, list) else []:
        if isinstance(chunk, dict):
            source = f" ({chunk['source']})" if chunk.get("source") else ""
            lines.append(f"  chunk {chunk.get('id')}{source}: {chunk.get('text')}")
        else:
            lines.append(f"  chunk: {chunk}")
    for key, value in payload.items():
        if key not in ("question", "response", "chunks"):
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False, sort_keys=True)}")
    for entry in review["decisions"]:
        note = f" ({entry.get('note')})" if entry.get("note") else ""
        lines.append(
            f"decided by {entry.get('by')} at {entry.get('at')}: {entry.get('decision')}, {entry.get('label')}{note}"
        )
        if entry.get("answer") is not None:
            lines.append(f"  answer: {entry['answer']}")
        for query in entry.get("queries") or []:
            lines.append(f"  query: {query}")
    if review["status"] == "resolved":
        lines.append(f"resolved: {review['decision']}, {review['label']} (by {review['resolved_by']})")
    return "\n".join(lines)


def run_decide(args: argparse.Namespace) -> int:
    by = args.by or _login_name()
    if by is None:
        raise ConfigError("by", None, "no login name to record as the reviewer here; pass --by NAME")
    log = _open(args.db, args.audit_key)
    try:
        done = log.resolve_review(
            args.id,
            decision=args.decision,
            by=by,
            note=args.note,
            label=args.label,
            answer=args.answer,
            queries=list(args.query) or None,  # no --query: the note's lines, as before the flag
        )
    finally:
        log.close()
    print(terminal_text(f"{done.summary()}: {args.decision} by {by}"))
    return EXIT_OK


def labeled_record(review: dict[str, Any]) -> dict[str, Any] | None:
    """A resolved review as a record ``suffice calibrate`` reads (``sufficient``: the people's label), or None
    when its payload holds no question and chunks to judge again."""
    payload = review["payload"]
    if not isinstance(payload, dict) or not isinstance(payload.get("question"), str):
        return None
    chunks = payload.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        return None
    kept = [{k: v for k, v in chunk.items() if v is not None} if isinstance(chunk, dict) else chunk for chunk in chunks]
    record: dict[str, Any] = {"id": str(review["item_id"]), "question": payload["question"], "chunks": kept}
    if isinstance(payload.get("response"), str):
        record["response"] = payload["response"]
    record["sufficient"] = review["label"] == "sufficient"
    record["review"] = {
        "id": review["id"],
        "gate": review["gate"],
        "rule": review.get("rule"),
        "decision": review["decision"],
        "label": review["label"],
        "machine_label": review.get("machine_label"),
        "override": review.get("machine_label") is not None and review["label"] != review.get("machine_label"),
        "resolved_by": review["resolved_by"],
        "resolved_at": review["resolved_at"],
    }
    return record


def run_export(args: argparse.Namespace) -> int:
    _refuse_the_log(args.db, args.labels)
    log = _open(args.db)
    try:
        rows = [row for row in log.reviews("resolved") if args.gate is None or row["gate"] == args.gate]
    finally:
        log.close()
    reviews = [_parsed(row, args.db) for row in rows]
    records, left_out = [], 0
    seen: Counter[str] = Counter()
    per: Counter[tuple[str, str]] = Counter()
    overrides: Counter[tuple[str, str]] = Counter()
    for review in reviews:
        record = labeled_record(review)
        if record is None:
            left_out += 1
            continue
        seen[record["id"]] += 1
        if seen[record["id"]] > 1:  # calibrate keys its resume by id: one item reviewed twice stays two records
            record["id"] = f"{record['id']}#review-{review['id']}"
        key = (str(review["gate"]), str(review.get("rule") or "-"))
        per[key] += 1
        overrides[key] += record["review"]["override"]
        records.append(record)

    def lines() -> Iterator[bytes]:
        for record in records:
            yield (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")

    try:
        replace_atomically(args.labels, lines(), mode=0o600)  # it holds the reviewed questions and context
    except OutputWriteError as exc:  # written whole or not at all: nothing to resume, --labels must change
        raise ExportWriteError(exc.path, exc.reason) from exc
    print(terminal_text(export_summary(per, overrides, len(records), left_out, args.labels)), file=sys.stderr)
    gates = {gate for gate, _ in per}
    if len(gates) > 1:
        print(
            f"note: the labels hold {len(gates)} gates ({', '.join(sorted(gates))}); calibrate tunes one: "
            "export with --gate",
            file=sys.stderr,
        )
    return EXIT_OK


def export_summary(
    per: Counter[tuple[str, str]], overrides: Counter[tuple[str, str]], written: int, left_out: int, where: Path
) -> str:
    lines = [f"{'gate':<14} {'rule':<32} {'labels':>6} {'overrides':>9}"]
    for gate, rule in sorted(per):
        lines.append(f"{gate:<14} {rule:<32} {per[gate, rule]:>6} {overrides[gate, rule]:>9}")
    lines.append(
        f"{written} labeled records written to {where} ({sum(overrides.values())} overrode the machine's label)"
        + (f"; {left_out} resolved reviews left out: no question and chunks in their payload" if left_out else "")
    )
    return "\n".join(lines)
