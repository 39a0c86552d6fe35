"""The audit log's operations: evaluations, verification, anchors, export, the review queue."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from suffice.audit.anchors import make_anchor
from suffice.audit.anchors import save_anchor as write_anchor_file
from suffice.audit.database import Database, audit_error, is_audit_file
from suffice.audit.encoding import Stored, json_text, now, store
from suffice.audit.schema import (
    COLUMNS,
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
from suffice.exceptions import AuditBrokenError, AuditError
from suffice.files import replace_atomically

REVIEW_DECISIONS = ("answer", "refine_retrieval", "unanswerable")


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

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every evaluation row in sequence order (a damaged database raises :class:`AuditError`)."""
        try:
            cur = self._db.execute(
                f"SELECT seq, {', '.join(COLUMNS)}, prev_hash, row_hash FROM evaluations ORDER BY seq"
            )
            names = [d[0] for d in cur.description]
            for values in cur:
                yield dict(zip(names, values, strict=True))
        except sqlite3.Error as exc:
            raise audit_error(self.path, exc) from exc

    def _append_rows(self, chain: Chain, rows: Iterable[Mapping[str, Any]], what: str) -> list[int]:
        """Check and encode ``rows`` for ``chain``, then append them in one transaction (a bad value writes none)."""
        columns = chain.columns
        names = {name for name, _ in columns}
        stored = []
        for values in rows:
            unknown = set(values) - names
            if unknown:
                raise AuditError(f"unknown {what} columns: {sorted(unknown)}")
            row = {name: store(name, kind, values.get(name)) for name, kind in columns}
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
        try:
            cur = self._db.execute(f"SELECT seq, {', '.join(RETRIEVAL_COLUMN_NAMES)} FROM retrievals ORDER BY seq")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, values, strict=True)) for values in cur]
        except sqlite3.Error as exc:
            raise audit_error(self.path, exc) from exc
        for row in rows:
            for key in RETRIEVAL_JSON_COLUMNS:
                if row.get(key):
                    try:
                        row[key] = json.loads(row[key])
                    except ValueError:
                        raise AuditError(f"{self.path}: retrieval attempt {row['seq']}: {key} is not JSON") from None
        return rows

    def export(self, out: Path) -> int:
        """Write every evaluation row as a JSON line (JSON columns parsed); returns the count.

        A JSON column that does not parse raises :class:`AuditError` naming row and column; non-UTF-8 text is written
        as ``\\udcXX`` escapes; an unwritable file raises :class:`~suffice.exceptions.OutputWriteError`.  The file
        is replaced whole (an error leaves the old one) and readable by the owner only, as the database is: it holds
        the same rows.
        """
        n = 0

        def lines() -> Iterator[bytes]:
            nonlocal n
            for row in self.rows():
                for key in JSON_COLUMNS:
                    if row.get(key):
                        try:
                            row[key] = json.loads(row[key])
                        except ValueError:
                            raise AuditError(
                                f"{self.path}: row {row['seq']}: {key} is not JSON (was the log altered? "
                                "`suffice audit verify` names the damage)"
                            ) from None
                yield (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
                n += 1

        replace_atomically(out, lines(), mode=0o600)
        return n

    # -- verification and anchors -----------------------------------------------------
    def verify(self, anchor: Mapping[str, Any] | None = None) -> VerifyReport:
        """Check both chains, the heads, the review table against its events and, given an ``anchor``, that the
        anchored rows are unchanged; reports the first problem.  Raises :class:`ConfigError` without the key."""
        key = self._need_key("verifying")
        if self._key_problem is not None:
            return VerifyReport(False, 0, None, self._key_problem, "meta", 0, self.keyed)
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
    ) -> int:
        """Queue a review and chain its ``enqueued`` event (one transaction); returns its id."""
        given = {
            "created_at": now(),
            "run_id": run_id,
            "item_id": item_id,
            "gate": gate,
            "reason": reason,
            "payload": json_text(payload),
            "evaluation_seq": evaluation_seq,
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
        try:
            cur = self._db.execute(query, (status,) if status else ())
            names = [d[0] for d in cur.description]
            return [dict(zip(names, values, strict=True)) for values in cur]
        except sqlite3.Error as exc:
            raise audit_error(self.path, exc) from exc

    def resolve_review(self, review_id: int, *, decision: str, by: str, note: str | None = None) -> None:
        """Record a person's decision and chain its ``resolved`` event (one transaction)."""
        if decision not in REVIEW_DECISIONS:
            raise AuditError(f"decision={decision!r}: must be one of {', '.join(REVIEW_DECISIONS)}")
        if not by.strip():
            raise AuditError("by: the reviewer's name is required")
        fields: dict[str, Stored] = {"decision": decision, "resolved_by": by, "resolved_at": now(), "note": note}
        fields = {name: store(name, "text", value) for name, value in fields.items()}
        self._need_key("writing")
        with self._transaction() as cur:
            updated = cur.execute(
                "UPDATE reviews SET status = 'resolved', decision = ?, resolved_by = ?, resolved_at = ?, note = ? "
                "WHERE id = ? AND status = 'open'",
                (*[fields[n] for n in RESOLUTION_FIELDS], review_id),
            )
            if updated.rowcount != 1:
                exists = cur.execute("SELECT status FROM reviews WHERE id = ?", (review_id,)).fetchone()
                reason = "no such review" if exists is None else f"already {exists[0]}"
                raise AuditError(f"review {review_id}: {reason}")
            self._append(cur, REVIEW_EVENTS, [_event(review_id, "resolved", fields)])


def _event(review_id: int, event: str, fields: Mapping[str, Stored]) -> dict[str, Stored]:
    """A review event row; ``data`` holds the stored field values the replay restores."""
    return {"ts": now(), "review_id": review_id, "event": event, "data": json_text(dict(fields))}
