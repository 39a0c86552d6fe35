"""Values as the audit database stores them (exactly what SQLite hands back), and the hashes computed over them
with :func:`canonical_json`, so no value type causes a false alarm."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from suffice.exceptions import AuditError, ConfigError

#: The "previous hash" of each chain's first row.
GENESIS = "0" * 64

Kind = Literal["text", "int", "real"]
Stored = str | int | float | None


def same(a: object, b: object) -> bool:
    """Constant-time equality of two digests as text; anything else is unequal, never a crash."""
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """The one encoding every hash and MAC is computed over: sorted keys, no whitespace, ASCII escapes, integral
    floats as integers (as SQLite returns them), non-finite floats as strings."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return str(value)


def digest(key: bytes | None, payload: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of ``payload`` under ``key``; plain SHA-256 without one."""
    data = canonical_json(payload).encode("ascii")
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def row_digest(key: bytes | None, chain: str, db_id: str, seq: int, prev: str, values: Mapping[str, Stored]) -> str:
    """A row's hash, binding the chain, the database, the position and the previous row."""
    return digest(key, {"kind": "row", "chain": chain, "db": db_id, "seq": seq, "prev": prev, "values": values})


def head_digest(key: bytes | None, chain: str, db_id: str, count: int, last: str) -> str:
    """The head's MAC: with a key, cutting the tail and rewriting the head needs the key."""
    return digest(key, {"kind": "head", "chain": chain, "db": db_id, "count": count, "last": last})


def _storable(text: str) -> str:
    """Text SQLite can store: a lone surrogate is written as its backslash escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def json_text(value: Any) -> str:
    """Structured values are stored as compact JSON text (the text is what is hashed)."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    except TypeError:  # keys of mixed types cannot be sorted; the stored text is still fixed
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return _storable(text)


def store(column: str, kind: Kind, value: Any) -> Stored:
    """``value`` converted to exactly what SQLite returns for ``column`` (hashes recompute alike)."""
    if value is None:
        return None
    if kind == "text":
        return _storable(value) if isinstance(value, str) else json_text(value)
    if kind == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and -(2**63) <= value < 2**63:
            return int(value)
        raise AuditError(f"{column}={value!r}: must be an integer")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise AuditError(f"{column}={value!r}: must be a finite number")


def now() -> str:
    """UTC to the millisecond, as every ``ts`` is stored (fixed width: text order is time order).  One clock
    reading: seconds and milliseconds read apart could put a row a second before the one it follows."""
    ms = time.time_ns() // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def instant(name: str, text: str) -> str:
    """An ISO 8601 date or time as a stored ``ts`` (UTC, to the millisecond), to compare as text.

    A date alone is its midnight; a time without an offset is UTC (as every ``ts`` is).  Anything else
    raises :class:`~suffice.exceptions.ConfigError` naming ``name``."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            name, text, "not an ISO 8601 date or time (2026-12-03, 2026-12-03T22:00:00Z, 2026-12-03T23:00+01:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        when = when.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00: before the first representable instant
        raise ConfigError(name, text, "outside the years 1-9999 once in UTC") from None
    # Not strftime: its %Y leaves years before 1000 unpadded, which would sort wrong against stored text.
    return when.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"
