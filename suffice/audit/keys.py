"""Audit keys as files: hex, at least :data:`KEY_BYTES` bytes, mode 0600."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from suffice.exceptions import ConfigError, OutputWriteError
from suffice.files import write_new
from suffice.network import read_key_file

#: Bytes of a key written by :func:`write_key_file`; shorter keys are refused.
KEY_BYTES = 32


def key_id(key: bytes) -> str:
    """A short public fingerprint of a key (a MAC of a constant): tells keys apart
    without revealing them."""
    return hmac.new(key, b"suffice-audit key id", hashlib.sha256).hexdigest()[:16]


def load_key(path: str | os.PathLike[str]) -> bytes:
    """Read a key file written by :func:`write_key_file` (hex, at least 32 bytes).

    Raises :class:`ConfigError` naming ``audit_key`` for a missing, unreadable,
    malformed or short key, and for a key file that group or others may read or change
    (a key others can read lets them forge the log): a bad key must stop a run before
    anything is recorded.
    """
    where = str(path)
    missing = "no such key file (create one with `suffice audit keygen -o FILE`)"
    raw = read_key_file(path, "audit_key", forging="forge the log", missing=missing)
    try:
        key = bytes.fromhex(raw.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(
            "audit_key", where, "not a hex key (a key file holds the hex digits `keygen` wrote)"
        ) from None
    if len(key) < KEY_BYTES:
        raise ConfigError("audit_key", where, f"the key is {len(key)} bytes; at least {KEY_BYTES} are needed")
    return key


def write_key_file(path: str | os.PathLike[str]) -> str:
    """Write a new random key (hex, file mode 0600); returns its :func:`key_id`.

    Refuses to overwrite: losing a key makes every database chained with it
    impossible to verify.
    """
    key = secrets.token_bytes(KEY_BYTES)
    try:
        write_new(Path(path), (key.hex() + "\n").encode("ascii"), private=True)
    except FileExistsError:
        raise ConfigError("output", str(path), "exists: refusing to overwrite a key file") from None
    except OutputWriteError as exc:
        raise ConfigError("output", str(path), f"cannot create the key file: {exc.reason}") from exc
    return key_id(key)
