"""The audit log's operations: evaluations, verification, anchors, export, the review queue."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.audit.anchors import make_anchor
from suffice.audit.anchors import save_anchor as write_anchor_file
from suffice.audit.database import Database, audit_error, is_audit_file
from suffice.audit.encoding import Stored, instant, json_text, now, store
from suffice.audit.reviewing import (
    LABELS,
    MAX_REVIEWERS,
    REVIEW_DECISIONS,
    agreed,
    decision_fields,
    decisions_of,
    implied_label,
    label_text,
    machine_label,
    reviewers_answer,
    reviewers_for,
    reviewers_queries,
)
from suffice.audit.schema import (
    COLUMNS,
    DECISIONS,
    EVALUATIONS,
    JSON_COLUMNS,
    RESOLUTION_FIELDS,
    RETRIEVAL_COLUMN_NAMES,
    RETRIEVAL_JSON_COLUMNS,
    RETRIEVALS,
    REVIEW_EVENTS,
    REVIEW_FIELDS,
    Chain,
)
from suffice.audit.verify import VerifyReport, verify_database
from suffice.exceptions import AuditBrokenError, AuditError, ConfigError, ReviewConflictError, ReviewNotFoundError
from suffice.files import replace_atomically
from suffice.formats.files import DEFAULT_FILE_FORMAT, RowLines, file_format


class AuditLog(Database):
    """Open (or create) the audit database at ``path``.

    ``key`` (at least 32 bytes, see :func:`load_key`) makes the chains HMAC-SHA256; a new database takes the mode of
    its first opener.  Raises :class:`ConfigError` (``audit_key``) when the key does not fit the database and
    :class:`AuditError` for an older format.  Without its key a keyed database can be read, not written or verified.
    """

    # -- evaluations ------------------------------------------------------------------
    def record(self, **values: Any) -> int:
        """Append one evaluation row (its own transaction); returns its sequence number."""
        return self.record_many([values])[0]

    def record_many(self, rows: Iterable[Mapping[str, Any]]) -> list[int]:
        """Append evaluation rows in one transaction; returns their sequence numbers (a bad value writes none)."""
        return self._append_rows(EVALUATIONS, rows, "audit")

    def rows(self, since: str | None = None, until: str | None = None) -> Iterator[dict[str, Any]]:
        """Every evaluation row in sequence order, or those whose ``ts`` is at or after ``since`` and before
        ``until`` (ISO 8601, see :func:`~suffice.audit.encoding.instant`; a bad one raises
        :class:`ConfigError` naming it).  A damaged database raises :class:`AuditError`."""
        where, bounds = [], []
        for name, bound, op in (("since", since, ">="), ("until", until, "<")):
            if bound is not None:
                where.append(f"ts {op} ?")
                bounds.append(instant(name, bound))
        if len(bounds) == 2 and bounds[0] >= bounds[1]:
            raise ConfigError("until", until, f"must be after since ({since}): the window holds no time")
        query = f"SELECT seq, {', '.join(COLUMNS)}, prev_hash, row_hash FROM evaluations"
        if where:
            query += " WHERE " + " AND ".join(where)
        return self._select(query + " ORDER BY seq", bounds)

    def _select(self, query: str, params: Sequence[Stored]) -> Iterator[dict[str, Any]]:
        try:
            cur = self._db.execute(query, params)
            names = [d[0] for d in cur.description]
            for values in cur:
                yield dict(zip(names, values, strict=True))
        except sqlite3.Error as exc:
            raise audit_error(self.path, exc) from exc

    def evaluation(self, seq: int) -> dict[str, Any] | None:
        """The evaluation row ``seq`` as stored (``None``: there is none)."""
        return next(iter(list(self._select("SELECT * FROM evaluations WHERE seq = ?", (seq,)))), None)

    def _append_rows(self, chain: Chain, rows: Iterable[Mapping[str, Any]], what: str) -> list[int]:
        """Check and encode ``rows`` for ``chain``, then append them in one transaction (a bad value writes none)."""
        names = {name for name, _ in chain.columns}
        stored = []
        for values in rows:
            if unknown := set(values) - names:
                raise AuditError(f"unknown {what} columns: {sorted(unknown)}")
            row = {name: store(name, kind, values.get(name)) for name, kind in chain.columns}
            row["ts"] = row["ts"] or now()
            stored.append(row)
        if not stored:
            return []
        with self._transaction() as cur:
            return self._append(cur, chain, stored)

    # -- retrieval attempts ------------------------------------------------------------
    def record_retrievals(self, attempts: Iterable[Mapping[str, Any]]) -> list[int]:
        """Append the harness's retrieval attempts (columns: :data:`RETRIEVAL_COLUMNS`) in one transaction;
        returns their sequence numbers in the ``retrievals`` chain."""
        return self._append_rows(RETRIEVALS, attempts, "retrieval")

    def retrievals(self) -> list[dict[str, Any]]:
        """Every retrieval attempt in sequence order, JSON columns parsed."""
        rows = list(self._select(f"SELECT seq, {', '.join(RETRIEVAL_COLUMN_NAMES)} FROM retrievals ORDER BY seq", ()))
        for row in rows:
            self._parse_json(row, RETRIEVAL_JSON_COLUMNS, "retrieval attempt")
        return rows

    def export_rows(self, since: str | None = None, until: str | None = None) -> Iterator[dict[str, Any]]:
        """The evaluation rows :meth:`rows` gives, JSON columns parsed, each with ``reviews``: the reviews queued
        for it, each with who decided what and when (joined here: a chained row is never changed), ``[]`` when
        none.  A JSON column that does not parse raises :class:`AuditError` naming row and column."""
        return self._with_reviews(self.rows(since, until))  # the bounds are checked now, before anything is written

    def _with_reviews(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        reviews = self._reviews_by_evaluation()
        for row in rows:
            self._parse_json(
                row, JSON_COLUMNS, "row", " (was the log altered? `suffice audit verify` names the damage)"
            )
            row["reviews"] = reviews.get(row["seq"], [])
            yield row

    def _parse_json(self, row: dict[str, Any], keys: Iterable[str], what: str, hint: str = "") -> None:
        """Parse ``row``'s JSON columns among ``keys`` in place (an :class:`AuditError` names one that does not)."""
        for key in keys:
            if row.get(key):
                try:
                    row[key] = json.loads(row[key])
                except ValueError:
                    raise AuditError(f"{self.path}: {what} {row['seq']}: {key} is not JSON{hint}") from None

    def _reviews_by_evaluation(self) -> dict[int, list[dict[str, Any]]]:
        """Each evaluation row's reviews without their payload (the record the row already hashes), with
        ``events``: every chained change after the queueing (``resolved``: decision, by whom, when, note)."""
        found = list(self._select("SELECT * FROM reviews WHERE evaluation_seq IS NOT NULL ORDER BY id", ()))
        events: dict[int, list[dict[str, Any]]] = {}
        query = "SELECT review_id, event, ts, data FROM review_events WHERE event != 'enqueued' ORDER BY seq"
        for row in list(self._select(query, ())):
            try:
                fields = json.loads(row["data"])
            except ValueError:
                raise AuditError(
                    f"{self.path}: a {row['event']} event of review {row['review_id']} is not JSON (was the log "
                    "altered? `suffice audit verify` names the damage)"
                ) from None
            events.setdefault(row["review_id"], []).append({"event": row["event"], "ts": row["ts"], **_parsed(fields)})
        by_row: dict[int, list[dict[str, Any]]] = {}
        for review in found:
            seq = review["evaluation_seq"]
            for redundant in _JOINED_AWAY:
                review.pop(redundant, None)
            review.update(_parsed(review))
            review["events"] = events.get(review["id"], [])
            by_row.setdefault(seq, []).append(review)
        return by_row

    def export(
        self, out: Path, *, since: str | None = None, until: str | None = None, fmt: str = DEFAULT_FILE_FORMAT
    ) -> int:
        """Write the evaluation rows :meth:`export_rows` gives in ``fmt`` (:func:`export_lines`); returns the count.

        Non-UTF-8 text is written as ``\\udcXX`` escapes; an unwritable file raises
        :class:`~suffice.exceptions.OutputWriteError`.  The file is replaced whole and readable by the owner only.
        """
        n = 0

        def counted(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
            nonlocal n
            for row in rows:
                n += 1
                yield row

        lines = export_lines(counted(self.export_rows(since, until)), fmt)
        replace_atomically(out, lines, mode=0o600)
        return n

    # -- verification and anchors -----------------------------------------------------
    def verify(self, anchor: Mapping[str, Any] | None = None, *, expect_keyed: bool = False) -> VerifyReport:
        """Check both chains, the heads, the review table against its events and, given an ``anchor``, that the
        anchored rows are unchanged; reports the first problem.  Raises :class:`ConfigError` without the key.

        An unkeyed log that verifies proves only that nothing was edited by accident: whoever can write the file can
        rebuild a SHA-256 chain.  ``expect_keyed`` (or a key given at opening) makes an unkeyed log a failure."""
        key = self._need_key("verifying")
        if self._key_problem is not None:
            return VerifyReport(False, 0, None, self._key_problem, "meta", 0, self.keyed)
        if expect_keyed and not self.keyed:
            reason = (
                f"{self.path} says it was created without a key (plain SHA-256 chain), but a keyed log was expected: "
                "either it was rewritten without the key (a downgrade: tampering) or it is not the log you meant"
            )
            return VerifyReport(False, 0, None, reason, "meta", 0, False)
        with self._transaction("DEFERRED") as cur:
            return verify_database(cur, self.db_id, self.keyed, key, anchor)

    def anchor(self) -> dict[str, Any]:
        """A record of both chains as they are now, to keep outside the database.

        The database is verified first, in the same snapshot: a broken chain raises :class:`AuditBrokenError`.
        """
        key = self._need_key("anchoring")
        with self._transaction("DEFERRED") as cur:
            report = verify_database(cur, self.db_id, self.keyed, key, None)
            if not report.ok:
                raise AuditBrokenError(str(self.path), report.reason or "the chains do not verify")
            heads = {
                name: {"count": count, "head": last}
                for name, count, last in cur.execute("SELECT chain, count, last_hash FROM chain_heads")
            }
        return make_anchor(self.db_id, self.path.name, key, heads)

    def save_anchor(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Write :meth:`anchor` to ``path`` (atomically, mode 0600) and return it: what ``--anchor-file`` does
        at the end of each run, so that deleting rows later, or restoring an older copy, fails
        ``suffice audit verify --anchor-file PATH``."""
        if is_audit_file(self.path, path):
            raise AuditError(f"the anchor file {path} is the audit database {self.path} or its -wal/-shm file")
        anchor = self.anchor()
        write_anchor_file(anchor, path)
        return anchor

    # -- review queue -----------------------------------------------------------------
    def enqueue_review(
        self,
        *,
        item_id: str,
        gate: str,
        reason: str,
        payload: Mapping[str, Any],
        run_id: str | None = None,
        evaluation_seq: int | None = None,
        rule: str | None = None,
        reviewers: int | None = None,
    ) -> int:
        """Queue a review and chain its ``enqueued`` event (one transaction); returns its id.

        ``rule`` names what sent it (default: the payload's ``rule``); ``reviewers``: how many independent
        reviewers must agree (default: :func:`~suffice.audit.reviewing.reviewers_for` the payload).
        """
        reviewers = reviewers_for(payload) if reviewers is None else reviewers
        if isinstance(reviewers, bool) or not isinstance(reviewers, int) or not 1 <= reviewers <= MAX_REVIEWERS:
            raise AuditError(f"reviewers={reviewers!r}: must be a whole number from 1 to {MAX_REVIEWERS}")
        given = {
            "created_at": now(),
            "run_id": run_id,
            "item_id": item_id,
            "gate": gate,
            "reason": reason,
            "rule": rule if rule is not None else payload.get("rule"),
            "payload": json_text(payload),
            "evaluation_seq": evaluation_seq,
            "reviewers": reviewers,
            "machine_label": machine_label(gate, payload),
        }
        fields = {name: store(name, kind, given[name]) for name, kind in REVIEW_FIELDS}
        names = list(fields)
        self._need_key("writing")
        with self._transaction() as cur:
            cur.execute(
                f"INSERT INTO reviews ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                [fields[n] for n in names],
            )
            review_id = int(cur.lastrowid or 0)
            self._append(cur, REVIEW_EVENTS, [_event(review_id, "enqueued", fields)])
        return review_id

    def reviews(self, status: str | None = "open") -> list[dict[str, Any]]:
        """The review queue (``status=None``: resolved reviews too)."""
        query = "SELECT * FROM reviews" + (" WHERE status = ?" if status else "") + " ORDER BY id"
        return list(self._select(query, (status,) if status else ()))

    def review(self, review_id: int) -> dict[str, Any]:
        """One review as stored; :class:`AuditError` ("no such review") if there is none."""
        for found in list(self._select("SELECT * FROM reviews WHERE id = ?", (review_id,))):
            return found
        raise ReviewNotFoundError(f"review {review_id}: no such review")

    def review_counts(self) -> list[dict[str, Any]]:
        """Per gate, rule and status: how many reviews, and of the resolved how many overrode the machine
        (the people's label differs from the machine's)."""
        query = (
            "SELECT gate, rule, status, COUNT(*) AS count, "
            "SUM(CASE WHEN status = 'resolved' AND machine_label IS NOT NULL AND label IS NOT machine_label "
            "THEN 1 ELSE 0 END) AS overrides FROM reviews GROUP BY gate, rule, status ORDER BY gate, rule, status"
        )
        return list(self._select(query, ()))

    def resolve_review(
        self,
        review_id: int,
        *,
        decision: str,
        by: str,
        note: str | None = None,
        label: bool | str | None = None,
        answer: str | None = None,
        queries: Sequence[str] | None = None,
    ) -> Decided:
        """Record a person's decision and chain it (one transaction): a ``resolved`` event when it completes
        the agreement the review requires, else a ``decided`` event that leaves it open.  One decision per reviewer.

        ``label``: the reviewer's correction (``True``/``"sufficient"`` or ``False``/``"insufficient"``), default
        the decision's.  ``answer`` (for ``answer``: delivered in place of the response under review; reviewers
        agree only on the same one) and ``queries`` (for ``refine_retrieval``: searched in place of the note's
        lines) are checked by :func:`~suffice.audit.reviewing.decision_fields` and handed over by the resolution.
        """
        if decision not in REVIEW_DECISIONS:
            raise AuditError(f"decision={decision!r}: must be one of {', '.join(REVIEW_DECISIONS)}")
        given = decision_fields(decision, answer, queries)
        if not isinstance(by, str) or not by.strip():
            raise AuditError("by: the reviewer's name is required")
        by = by.strip()
        label = label_text(label) if isinstance(label, bool) else implied_label(decision) if label is None else label
        if label not in LABELS:
            raise AuditError(f"label={label!r}: must be one of {', '.join(LABELS)} (or true/false)")
        at = now()
        entry = {"by": by, "decision": decision, "label": label, "note": note, "at": at, **given}
        self._need_key("writing")
        with self._transaction() as cur:
            found = cur.execute(
                "SELECT status, reviewers, decisions FROM reviews WHERE id = ?", (review_id,)
            ).fetchone()
            if found is None:
                raise ReviewNotFoundError(f"review {review_id}: no such review")
            status, required, before = found
            if status != "open":
                raise ReviewConflictError(f"review {review_id}: already {status}")
            decisions = decisions_of({"decisions": before})
            if any(d.get("by") == by for d in decisions):
                raise ReviewConflictError(
                    f"review {review_id}: {by} decided it already; it needs another reviewer "
                    f"({int(required)} must agree)"
                )
            decisions.append(entry)
            fields: dict[str, Stored] = {DECISIONS: json_text(decisions)}
            agreeing = agreed(decisions, int(required or 1))
            handed: dict[str, Any] = {}
            if agreeing is not None:
                # What the resolution hands the application, in its chained event (the table has no column for
                # it: the decisions it comes from are there, and a new column would be a new format).
                handed = {"answer": reviewers_answer(agreeing), "queries": reviewers_queries(agreeing)}
                handed = {name: value for name, value in handed.items() if value is not None}
                notes = [f"{d['by']}: {d['note']}" if len(agreeing) > 1 else d["note"] for d in agreeing if d["note"]]
                resolution = {
                    "decision": decision,
                    "label": label,
                    "resolved_by": ", ".join(str(d["by"]) for d in agreeing),
                    "resolved_at": at,
                    "note": "\n".join(str(n) for n in notes) if notes else None,
                }
                fields |= {name: store(name, "text", value) for name, value in resolution.items()}
                cur.execute(
                    "UPDATE reviews SET status = 'resolved', decisions = ?, decision = ?, label = ?, resolved_by = ?, "
                    "resolved_at = ?, note = ? WHERE id = ?",
                    (fields[DECISIONS], *[fields[n] for n in RESOLUTION_FIELDS], review_id),
                )
            else:
                cur.execute("UPDATE reviews SET decisions = ? WHERE id = ?", (fields[DECISIONS], review_id))
            self._append(
                cur, REVIEW_EVENTS, [_event(review_id, "resolved" if agreeing else "decided", {**fields, **handed})]
            )
        return Decided(
            review_id,
            resolved=agreeing is not None,
            decisions=len(decisions),
            required=int(required or 1),
            agreed_by=tuple(str(d["by"]) for d in agreeing) if agreeing else (),
            answer=handed.get("answer"),
            queries=tuple(handed.get("queries", ())),
        )


@dataclass(frozen=True)
class Decided:
    """What a decision did: closed the review (``agreed_by``), or left it open with ``decisions`` of ``required``."""

    review_id: int
    resolved: bool
    decisions: int
    required: int
    agreed_by: tuple[str, ...] = ()
    #: Once resolved: the answer the reviewers wrote (``None``: the response under review) and the queries they gave
    #: (none: their notes' lines), as :func:`~suffice.audit.reviewing.review_outcome` hands them over.
    answer: str | None = None
    queries: tuple[str, ...] = ()

    @property
    def disputed(self) -> bool:
        return not self.resolved and self.decisions >= self.required

    def summary(self) -> str:
        if self.resolved:
            who = ", ".join(self.agreed_by)
            return f"review {self.review_id} resolved" + (
                f": {len(self.agreed_by)} reviewers agree ({who})" if len(self.agreed_by) > 1 else f" by {who}"
            )
        if self.disputed:
            return (
                f"review {self.review_id} stays open: {self.decisions} reviewers disagree; {self.required} must agree"
            )
        return f"review {self.review_id} stays open: {self.decisions} of {self.required} reviewers have decided"


#: Review columns an exported row already holds (or, for the payload, hashes): left out of its ``reviews``.
_JOINED_AWAY = ("payload", "run_id", "item_id", "gate", "evaluation_seq")
#: The columns of an exported row, in order.
EXPORT_COLUMNS = ("seq", *COLUMNS, "prev_hash", "row_hash", "reviews")


def export_lines(rows: Iterable[Mapping[str, Any]], fmt: str) -> Iterator[bytes]:
    """``rows`` (as :meth:`AuditLog.export_rows` gives them) in file format ``fmt`` (one that streams rows:
    :class:`~suffice.formats.files.RowLines`); an unknown ``fmt`` raises :class:`ConfigError` at once."""
    writer: RowLines = file_format(fmt, "format", RowLines)
    return writer.lines(rows, EXPORT_COLUMNS)


def _parsed(review: Mapping[str, Any]) -> dict[str, Any]:
    """A review's (or review event's) ``decisions``, stored as JSON text, parsed (left as text if it is not JSON:
    ``verify`` names such damage)."""
    out = dict(review)
    if isinstance(out.get(DECISIONS), str):
        with contextlib.suppress(ValueError):
            out[DECISIONS] = json.loads(out[DECISIONS])
    return out


def _event(review_id: int, event: str, fields: Mapping[str, Any]) -> dict[str, Stored]:
    """A review event row; ``data`` holds the stored field values the replay restores (and, for ``resolved``, what
    the resolution hands over)."""
    return {"ts": now(), "review_id": review_id, "event": event, "data": json_text(dict(fields))}
