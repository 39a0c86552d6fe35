"""A tamper-evident audit log and the human review queue, in one SQLite file.

Every gate evaluation is one row of ``evaluations``.  Rows are chained: each holds
the hash of the previous row and its own hash over its content, and the
``chain_head`` table holds the number of rows and the last hash, so editing,
deleting or reordering any row (the last one included) makes :meth:`AuditLog.verify`
fail and name the first broken row.  Each row is its own transaction in WAL mode:
a process killed mid-run leaves a database whose rows so far still verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.exceptions import SufficeError

GENESIS = "0" * 64
_COLUMNS = (
    "ts",
    "run_id",
    "item_id",
    "query_hash",
    "chunks",
    "gate",
    "rubric",
    "rubric_version",
    "prompt_version",
    "model_id",
    "weights_hash",
    "backend",
    "raw_output",
    "verdict",
    "scores",
    "decision",
    "round",
    "latency_ms",
    "error",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL, run_id TEXT, item_id TEXT, query_hash TEXT, chunks TEXT,
    gate TEXT, rubric TEXT, rubric_version TEXT, prompt_version TEXT,
    model_id TEXT, weights_hash TEXT, backend TEXT,
    raw_output TEXT, verdict TEXT, scores TEXT, decision TEXT,
    round INTEGER, latency_ms REAL, error TEXT,
    prev_hash TEXT NOT NULL, row_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chain_head (
    id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL, last_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL, run_id TEXT, item_id TEXT, gate TEXT, reason TEXT,
    payload TEXT NOT NULL, evaluation_seq INTEGER,
    status TEXT NOT NULL DEFAULT 'open', decision TEXT, resolved_by TEXT, resolved_at TEXT, note TEXT
);
"""

REVIEW_DECISIONS = ("answer", "refine_retrieval", "unanswerable")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def weights_hash(model_path: Path | None) -> str | None:
    """A hash of the weight folder's file list (names and sizes): cheap, and it changes
    whenever the weights are swapped, without reading gigabytes."""
    if model_path is None or not model_path.is_dir():
        return None
    listing = sorted(
        (p.relative_to(model_path).as_posix(), p.stat().st_size) for p in model_path.rglob("*") if p.is_file()
    )
    return sha256_text(json.dumps(listing))


def _row_hash(prev_hash: str, seq: int, values: Mapping[str, Any]) -> str:
    body = json.dumps({"seq": seq, **{c: values.get(c) for c in _COLUMNS}}, sort_keys=True, ensure_ascii=False)
    return sha256_text(prev_hash + body)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    rows: int
    first_broken: int | None = None
    reason: str | None = None


class AuditLog:
    """Open (or create) the audit database at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    # -- evaluations ------------------------------------------------------------------
    def record(self, **values: Any) -> int:
        """Append one evaluation row; returns its sequence number."""
        unknown = set(values) - set(_COLUMNS)
        if unknown:
            raise SufficeError(f"unknown audit columns: {sorted(unknown)}")
        row = {c: _encode(values.get(c)) for c in _COLUMNS}
        row["ts"] = row["ts"] or _now()
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            head = cur.execute("SELECT count, last_hash FROM chain_head WHERE id = 1").fetchone()
            count, prev = head if head else (0, GENESIS)
            seq = count + 1
            digest = _row_hash(prev, seq, row)
            cur.execute(
                f"INSERT INTO evaluations (seq, {', '.join(_COLUMNS)}, prev_hash, row_hash) "
                f"VALUES (?, {', '.join('?' for _ in _COLUMNS)}, ?, ?)",
                (seq, *[row[c] for c in _COLUMNS], prev, digest),
            )
            cur.execute(
                "INSERT INTO chain_head (id, count, last_hash) VALUES (1, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET count = excluded.count, last_hash = excluded.last_hash",
                (seq, digest),
            )
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return seq

    def rows(self) -> Iterator[dict[str, Any]]:
        cur = self._db.execute(f"SELECT seq, {', '.join(_COLUMNS)}, prev_hash, row_hash FROM evaluations ORDER BY seq")
        names = [d[0] for d in cur.description]
        for values in cur:
            yield dict(zip(names, values, strict=True))

    def verify(self) -> VerifyReport:
        prev, expected_seq, count = GENESIS, 1, 0
        for row in self.rows():
            seq = row["seq"]
            if seq != expected_seq:
                return VerifyReport(False, count, expected_seq, f"row {expected_seq} is missing (next is {seq})")
            if row["prev_hash"] != prev:
                return VerifyReport(False, count, seq, f"row {seq} does not link to row {seq - 1}")
            if _row_hash(prev, seq, row) != row["row_hash"]:
                return VerifyReport(False, count, seq, f"row {seq} was altered (its hash does not match)")
            prev, expected_seq, count = row["row_hash"], seq + 1, count + 1
        head = self._db.execute("SELECT count, last_hash FROM chain_head WHERE id = 1").fetchone()
        head_count, head_hash = head if head else (0, GENESIS)
        if head_count != count or head_hash != prev:
            return VerifyReport(False, count, count + 1, f"the chain head records {head_count} rows, found {count}")
        return VerifyReport(True, count)

    def export(self, out: Path) -> int:
        n = 0
        with out.open("w", encoding="utf-8") as handle:
            for row in self.rows():
                for key in ("chunks", "verdict", "scores", "error"):
                    if row.get(key):
                        row[key] = json.loads(row[key])
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        return n

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
        cur = self._db.execute(
            "INSERT INTO reviews (created_at, run_id, item_id, gate, reason, payload, evaluation_seq) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (_now(), run_id, item_id, gate, reason, json.dumps(payload, ensure_ascii=False), evaluation_seq),
        )
        return int(cur.lastrowid or 0)

    def reviews(self, status: str | None = "open") -> list[dict[str, Any]]:
        query = "SELECT * FROM reviews" + (" WHERE status = ?" if status else "") + " ORDER BY id"
        cur = self._db.execute(query, (status,) if status else ())
        names = [d[0] for d in cur.description]
        return [dict(zip(names, values, strict=True)) for values in cur]

    def resolve_review(self, review_id: int, *, decision: str, by: str, note: str | None = None) -> None:
        if decision not in REVIEW_DECISIONS:
            raise SufficeError(f"decision={decision!r}: must be one of {', '.join(REVIEW_DECISIONS)}")
        if not by.strip():
            raise SufficeError("by: the reviewer's name is required")
        cur = self._db.execute(
            "UPDATE reviews SET status = 'resolved', decision = ?, resolved_by = ?, resolved_at = ?, note = ? "
            "WHERE id = ? AND status = 'open'",
            (decision, by, _now(), note, review_id),
        )
        if cur.rowcount != 1:
            exists = self._db.execute("SELECT status FROM reviews WHERE id = ?", (review_id,)).fetchone()
            reason = "no such review" if exists is None else f"already {exists[0]}"
            raise SufficeError(f"review {review_id}: {reason}")

    def close(self) -> None:
        self._db.close()


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float)):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def chunk_digests(chunks: Sequence[Any]) -> list[dict[str, Any]]:
    """Chunk ids with content hashes, as the audit row stores them."""
    return [{"id": c.id, "source": c.source, "sha256": sha256_text(c.text)} for c in chunks]
