"""The verdict cache: a verdict already paid for is not paid again.

Keyed by everything a verdict depends on (:func:`cache_key`): the engine's settings (model, weights fingerprint,
engine, backend, dtype, window), the gate's settings and its prompt template's text, the judge's detail and
fitting limits, the constraint the prompt was fitted with (which chunks were shown, the regex or schema, the token
bound) and the record's content; any change misses.  Only verdicts are kept, never errors (an error may be the
engine's, and a rerun should try again).

One SQLite file (default ``<cache folder>/verdicts.sqlite3``, see :func:`default_cache_path`) in WAL mode: several
processes share it (SQLite's own locking; a writer waits up to :data:`BUSY_MS`).  Bounded by ``max_bytes``: past it
the least recently used entries go.  A file that is not a verdict cache is refused with :class:`ConfigError` naming
``cache`` (it may be someone's data); a damaged or forged entry is a miss, never a wrong verdict: each entry holds
its own key and a MAC of key and value under a secret only the cache's owner can read (``<cache>.key``, mode 0600,
made with the cache), checked on every read and counted when it fails (``rejected``).  Whoever can write the file but
not read the secret cannot make an entry that is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suffice.exceptions import ConfigError, OutputWriteError
from suffice.files import create_private, write_new
from suffice.gates.base import Gate
from suffice.grammars.constraint import Constraint
from suffice.network import read_key_file
from suffice.records.item import Item
from suffice.results import CacheHit, JudgeResult

#: Written into the file's ``meta``; another format is refused (a newer suffice's cache is not overwritten).
FORMAT = "suffice-verdict-cache/1"
#: The default bound on the cache file's entries, in bytes (1 GiB: about a million full verdicts).
DEFAULT_MAX_BYTES = 1 << 30
#: How long a writer waits for another process's transaction.
BUSY_MS = 10_000
#: Bump when what goes into a key changes meaning: every older entry then misses.
KEY_VERSION = "2"


def default_cache_path() -> Path:
    """``verdicts.sqlite3`` in suffice's cache folder (``$SUFFICE_CACHE``, else ``$XDG_CACHE_HOME/suffice``,
    else ``~/.cache/suffice``: the folder the embedded model is converted into)."""
    from suffice.serving.weights import cache_root

    return cache_root() / "verdicts.sqlite3"


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def judge_digest(
    engine_settings: Mapping[str, str], gate: Gate, judge_settings: Mapping[str, Any], sampling: Mapping[str, Any]
) -> str:
    """The part of every key a judge shares across records (computed once per judge)."""
    return _digest(
        {
            "key_version": KEY_VERSION,
            "engine": dict(engine_settings),
            "gate": gate.settings(),
            "template": template_digest(gate),
            "judge": dict(judge_settings),
            "sampling": dict(sampling),
        }
    )


def template_digest(gate: Gate) -> str:
    """The gate's prompt template's own text (an edited template under the same version name misses)."""
    template = gate.template
    parts = [template.name]
    for part in (template.system, template.user):
        filename = getattr(part, "filename", None)
        try:
            parts.append(Path(filename).read_text(encoding="utf-8") if filename else repr(part))
        except OSError:
            parts.append(repr(part))
    return _digest(parts)


def cache_key(shared: str, item: Item, constraint: Constraint, shown: Sequence[Any]) -> str:
    """The key of one record's verdict under a judge whose shared part is ``shared`` (:func:`judge_digest`):
    the record's content, the chunks its fitted prompt showed, and the constraint's every field."""
    return _digest(
        {
            "judge": shared,
            # The content only: the same record under another id is the same verdict.
            "item": repr(dataclasses.replace(item, id="")),
            "shown": [repr(c) for c in shown],
            "constraint": repr(constraint),
        }
    )


class VerdictCache:
    """The cache file at ``path`` (created owner-only, mode 0600: it holds verdicts about the records)."""

    def __init__(self, path: Path | str | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 1 << 16:
            raise ConfigError("cache_max_bytes", max_bytes, "must be a whole number of at least 65536 bytes")
        self.path = Path(path) if path is not None else default_cache_path()
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        #: Entries read whose MAC failed (damaged, or written without the secret) this process: each was a miss.
        self.rejected = 0
        self._db = self._open()
        self._secret = self._read_or_make_secret()

    def _read_or_make_secret(self) -> bytes:
        """The MAC secret beside the cache, made (0600, never over a planted file) the first time."""
        path = self.path.with_name(self.path.name + ".key")
        try:
            write_new(path, secrets.token_hex(32).encode("ascii"), private=True)
        except FileExistsError:
            pass
        except OutputWriteError as exc:
            raise ConfigError("cache", str(path), f"its key cannot be made: {exc.reason}") from exc
        for _ in range(100):  # another process may be writing it this moment
            secret = read_key_file(path, "cache", forging="forge cached verdicts")
            if len(secret) == 64:
                return secret
            time.sleep(0.01)
        raise ConfigError("cache", str(path), "its key file is not a cache key (64 hex digits)")

    def _mac(self, key: str, value: str) -> str:
        return hmac.new(self._secret, f"{key}\0{value}".encode(), hashlib.sha256).hexdigest()

    def _open(self) -> sqlite3.Connection:
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError("cache", str(path), f"its folder cannot be made: {exc.strerror or exc}") from exc
        if path.is_symlink():
            raise ConfigError("cache", str(path), "is a symbolic link: give the cache file itself")
        try:
            create_private(path)  # owner-only, never through a planted link; SQLite then opens what exists
        except OutputWriteError as exc:
            raise ConfigError("cache", str(path), f"cannot be created: {exc.reason}") from exc
        try:
            db = sqlite3.connect(path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            db.execute("PRAGMA journal_mode = WAL")
            self._check_or_create(db)
        except sqlite3.DatabaseError as exc:
            raise ConfigError(
                "cache",
                str(path),
                f"is not a verdict cache ({exc}); give another --cache path, or remove the file if it is one "
                "that was damaged (`suffice cache clear` starts a new one)",
            ) from exc
        return db

    def _check_or_create(self, db: sqlite3.Connection) -> None:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have made it between the look and the lock.
                if not {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}:
                    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    db.execute(
                        "CREATE TABLE verdicts (key TEXT PRIMARY KEY, value TEXT NOT NULL, digest TEXT NOT NULL, "
                        "size INTEGER NOT NULL, first_judged TEXT NOT NULL, used REAL NOT NULL, hits INTEGER "
                        "NOT NULL DEFAULT 0)"
                    )
                    db.execute("CREATE INDEX verdicts_used ON verdicts (used)")
                    db.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return
        found = None
        if "meta" in tables:
            row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            found = row[0] if row else None
        if found != FORMAT:
            what = "an SQLite file of something else" if found is None else f"a cache of format {found!r}"
            raise ConfigError(
                "cache",
                str(self.path),
                f"is {what}, not a {FORMAT} file: give another --cache path (nothing in it was changed)",
            )

    def get(self, key: str, gate: Gate) -> JudgeResult | None:
        """The cached result for ``key``, marked as a hit (``None``: a miss, or an entry that fails its check)."""
        with self._lock:
            row = self._db.execute("SELECT value, digest, first_judged FROM verdicts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            value, digest, first = row
            if not hmac.compare_digest(self._mac(key, value), digest):
                self.rejected += 1
                return None  # damaged or forged: judged again, and the fresh verdict replaces it
            try:
                data = json.loads(value)
                verdict = gate.verdict_model.model_validate(data.pop("verdict"))
                result = JudgeResult.model_validate({**data, "verdict": None})
            except (ValueError, TypeError, KeyError):
                return None
            with contextlib.suppress(sqlite3.OperationalError):  # a busy file: the recency is a hint only
                self._db.execute("UPDATE verdicts SET used = ?, hits = hits + 1 WHERE key = ?", (time.time(), key))
        return result.model_copy(update={"verdict": verdict, "cached": CacheHit(first_judged=first)})

    def put_many(self, entries: Sequence[tuple[str, JudgeResult]]) -> None:
        """Keep these results (verdicts only; errors are never cached), then evict past ``max_bytes``."""
        rows = []
        now = time.time()
        first = datetime.now(UTC).isoformat(timespec="seconds")
        for key, result in entries:
            if result.verdict is None or result.error is not None:
                continue
            value = result.model_dump_json(exclude={"cached"})
            digest = self._mac(key, value)
            rows.append((key, value, digest, len(value) + len(key), first, now))
        if not rows:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO verdicts (key, value, digest, size, first_judged, used) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, digest = excluded.digest, "
                    "size = excluded.size, used = excluded.used",
                    rows,
                )
                self._evict()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _evict(self) -> None:
        total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM verdicts").fetchone()[0]
        if total <= self.max_bytes:
            return
        # Down to 90 % of the bound, least recently used first: evicting one by one would run on every write.
        target = total - int(self.max_bytes * 0.9)
        freed = 0
        doomed = []
        for key, size in self._db.execute("SELECT key, size FROM verdicts ORDER BY used"):
            doomed.append((key,))
            freed += size
            if freed >= target:
                break
        self._db.executemany("DELETE FROM verdicts WHERE key = ?", doomed)

    def stats(self) -> dict[str, Any]:
        """Entries, their bytes, the bound, hits so far, entries this process refused (their MAC failed) and the
        file's size on disk."""
        with self._lock:
            entries, size, hits = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(hits), 0) FROM verdicts"
            ).fetchone()
        on_disk = sum(p.stat().st_size for p in self._files() if p.exists())
        return {
            "path": str(self.path),
            "entries": entries,
            "bytes": size,
            "max_bytes": self.max_bytes,
            "hits": hits,
            "rejected": self.rejected,
            "file_bytes": on_disk,
        }

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        with self._lock:
            n = self._db.execute("DELETE FROM verdicts").rowcount
            self._db.execute("VACUUM")
        return int(n)

    def _files(self) -> list[Path]:
        return [self.path, self.path.with_name(self.path.name + "-wal"), self.path.with_name(self.path.name + "-shm")]

    def close(self) -> None:
        with self._lock:
            self._db.close()


_OPEN: dict[tuple[Path, int], VerdictCache] = {}
_OPEN_LOCK = threading.Lock()


def shared_cache(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> VerdictCache:
    """One :class:`VerdictCache` per file and bound in this process: every judge of a service shares it."""
    key = (path.absolute(), max_bytes)
    with _OPEN_LOCK:
        cache = _OPEN.get(key)
        if cache is None:
            cache = _OPEN[key] = VerdictCache(path, max_bytes=max_bytes)
        return cache
