"""The audit database: opening it, its format and key, transactions, appending to a chain."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from suffice.audit.encoding import GENESIS, Stored, head_digest, now, row_digest, same
from suffice.audit.keys import KEY_BYTES, key_id
from suffice.audit.schema import ALG_KEYED, ALG_PLAIN, CHAINS, EARLIER_FORMATS, FORMAT, OLD_TABLES, SCHEMA, Chain
from suffice.exceptions import AuditError, ConfigError, OutputWriteError
from suffice.files import create_private

#: Where the harness and ``suffice review`` keep the log unless told otherwise.
DEFAULT_AUDIT_DB = Path("suffice-audit.sqlite")
#: Seconds a write waits for another process to release the database before SQLite gives up.
BUSY_TIMEOUT_S = 30.0


def is_audit_file(db: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the audit database ``db`` or SQLite's ``-wal``/``-shm`` beside it."""
    target = Path(path)
    for candidate in (Path(db), Path(f"{db}-wal"), Path(f"{db}-shm")):
        with contextlib.suppress(OSError):  # either missing: compared by path below
            if os.path.samefile(candidate, target):
                return True
        if candidate.resolve() == target.resolve():
            return True
    return False


def audit_error(path: Path, exc: sqlite3.Error) -> AuditError:
    """What an SQLite failure means for the audit log at ``path``."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        why = f"another process holds it past {BUSY_TIMEOUT_S:g} s (a batch job writing to the same log?)"
    elif "not a database" in text or "malformed" in text:
        why = "it is not an SQLite audit database, or it is damaged"
    elif "full" in text:
        why = "the disk is full"
    else:
        why = "SQLite failed"
    return AuditError(f"the audit log {path} cannot be used: {why} ({text})")


class Database:
    """The open audit database: its id, whether it is keyed, and whether the given key fits."""

    def __init__(self, path: str | os.PathLike[str], key: bytes | None = None, *, create: bool = True) -> None:
        """``create=False``: an existing log only (a missing or empty file is refused).  A file that cannot be
        opened, is not SQLite, is damaged or stays locked past :data:`BUSY_TIMEOUT_S` raises :class:`AuditError`."""
        if key is not None and (not isinstance(key, bytes) or len(key) < KEY_BYTES):
            raise ConfigError("audit_key", "<key>", f"must be at least {KEY_BYTES} bytes (see load_key)")
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise AuditError(f"{self.path} holds no audit log: there is no such file")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Mode 0600 before SQLite creates it 0644 (it holds raw model outputs, and SQLite gives its -wal
                # and -shm files the database's mode); a planted symlink, even dangling, is refused, not followed.
                create_private(self.path)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        except (OSError, sqlite3.Error, OutputWriteError) as exc:
            raise AuditError(f"the audit log {self.path} cannot be opened: {exc}") from exc
        # A tampered row may hold bytes that are not UTF-8: read them, report them, never crash.
        self._db.text_factory = lambda raw: raw.decode("utf-8", "surrogateescape")
        try:
            # Before the journal mode, which writes to the file, so a refused one is left as it was.
            if not create and self._read_meta() is None:
                raise AuditError(f"{self.path} holds no audit log (an empty file): nothing to read or verify")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            meta = self._open_or_create(key)
            self.db_id = meta["db_id"]
            self.keyed = meta["mac"] == ALG_KEYED
            #: Why the given key does not fit this database (None: it fits, or none given).
            self._key_problem = self._check_key(key, meta)
        except sqlite3.Error as exc:
            self._db.close()
            raise audit_error(self.path, exc) from exc
        except BaseException:
            self._db.close()
            raise
        self._key = key

    def _open_or_create(self, key: bytes | None) -> dict[str, str]:
        meta = self._read_meta()
        if meta is not None:
            return meta
        with self._transaction() as cur:
            meta = self._read_meta()  # another process may have created it meanwhile
            if meta is not None:
                return meta
            meta = {
                "format": FORMAT,
                "db_id": secrets.token_hex(16),
                "mac": ALG_KEYED if key is not None else ALG_PLAIN,
                "key_id": key_id(key) if key is not None else "",
                "created_at": now(),
            }
            for statement in SCHEMA:
                cur.execute(statement)
            cur.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
            for chain in CHAINS:
                cur.execute(
                    "INSERT INTO chain_heads (chain, count, last_hash, mac) VALUES (?, 0, ?, ?)",
                    (chain.name, GENESIS, head_digest(key, chain.name, meta["db_id"], 0, GENESIS)),
                )
            return meta

    def _read_meta(self) -> dict[str, str] | None:
        """The meta table, or None for an empty file; AuditError for anything else."""
        tables = {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            if tables & OLD_TABLES:
                raise self._earlier("format 1: no key, reviews not chained")
            if tables:
                raise AuditError(f"{self.path} is not a suffice audit database (tables: {', '.join(sorted(tables))})")
            return None
        meta = {str(k): str(v) for k, v in self._db.execute("SELECT key, value FROM meta")}
        earlier = EARLIER_FORMATS.get(str(meta.get("format")))
        if earlier is not None:
            raise self._earlier(f"{meta.get('format')}: {earlier}")
        if meta.get("format") != FORMAT:
            raise AuditError(f"{self.path}: audit format {meta.get('format')!r}, this suffice reads {FORMAT!r}")
        if meta.get("mac") not in (ALG_KEYED, ALG_PLAIN) or not meta.get("db_id"):
            raise AuditError(f"{self.path}: the meta table is damaged or was altered ({meta})")
        return meta

    def _earlier(self, what: str) -> AuditError:
        return AuditError(
            f"{self.path} was written by an earlier suffice (audit {what}) and cannot be extended or verified by this "
            f"one ({FORMAT}); keep it as it is and record into a new database"
        )

    def _check_key(self, key: bytes | None, meta: Mapping[str, str]) -> str | None:
        """Why ``key`` does not fit this database, or None; writes refuse, :meth:`verify` reports a break."""
        if key is None:
            return None
        if not self.keyed:
            return (
                f"{self.path} says it was created without a key (plain SHA-256 chain), but a key was given: "
                "either it was rewritten without the key (tampering) or the key is not this database's"
            )
        if not same(key_id(key), meta.get("key_id", "")):
            return (
                f"the given key (key {key_id(key)}) is not the key {self.path} names ({meta.get('key_id')!r}): "
                "the wrong key, or the meta table was altered"
            )
        return None

    def _need_key(self, action: str) -> bytes | None:
        """The key for ``action``; a keyed database cannot be written or checked without it."""
        if self._key_problem is not None and action != "verifying":
            raise ConfigError("audit_key", "<key>", self._key_problem)
        if self.keyed and self._key is None:
            raise ConfigError(
                "audit_key",
                None,
                f"{self.path} is chained with HMAC-SHA256: {action} needs the key it was created with (--audit-key)",
            )
        return self._key

    @contextlib.contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Cursor]:
        """One transaction: IMMEDIATE for writes (serialises writers), DEFERRED for reads (a snapshot)."""
        cur = self._db.cursor()
        try:
            cur.execute(f"BEGIN {mode}")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            raise audit_error(self.path, exc) from exc

    def check_writable(self) -> None:
        """Raise now what the first append would (a key that does not fit, a head that does not verify)."""
        with self._transaction("DEFERRED") as cur:
            for chain in CHAINS:
                self._check_head(cur, chain)

    def _check_head(self, cur: sqlite3.Cursor, chain: Chain) -> tuple[bytes | None, int, str]:
        """The writing key and ``chain``'s head (count, last hash), once it verifies against the key and table."""
        key = self._need_key("writing")
        head = cur.execute("SELECT count, last_hash, mac FROM chain_heads WHERE chain = ?", (chain.name,)).fetchone()
        if head is None:
            raise AuditError(f"{self.path}: the {chain.name} chain head is missing; run `suffice audit verify`")
        count, prev, mac = head
        if not same(str(mac), head_digest(key, chain.name, self.db_id, count, prev)):
            raise AuditError(f"{self.path}: the {chain.name} chain head does not verify; run `suffice audit verify`")
        last = cur.execute(f"SELECT seq, row_hash FROM {chain.table} ORDER BY seq DESC LIMIT 1").fetchone()
        if (last or (0, GENESIS)) != (count, prev):
            raise AuditError(
                f"{self.path}: the {chain.name} chain head records {count} {chain.nouns} but the table ends "
                f"at {last[0] if last else 0}; run `suffice audit verify`"
            )
        return key, count, prev

    def _append(self, cur: sqlite3.Cursor, chain: Chain, rows: Sequence[Mapping[str, Stored]]) -> list[int]:
        """Append rows to ``chain`` inside the caller's transaction, checking its head first (not to bless damage)."""
        key, count, prev = self._check_head(cur, chain)
        names = [name for name, _ in chain.columns]
        insert = (
            f"INSERT INTO {chain.table} (seq, {', '.join(names)}, prev_hash, row_hash) "
            f"VALUES (?, {', '.join('?' for _ in names)}, ?, ?)"
        )
        seqs = []
        for row in rows:
            count += 1
            digest = row_digest(key, chain.name, self.db_id, count, prev, row)
            cur.execute(insert, (count, *[row[n] for n in names], prev, digest))
            prev = digest
            seqs.append(count)
        cur.execute(
            "UPDATE chain_heads SET count = ?, last_hash = ?, mac = ? WHERE chain = ?",
            (count, prev, head_digest(key, chain.name, self.db_id, count, prev), chain.name),
        )
        return seqs

    def close(self) -> None:
        self._db.close()
