"""Audit keys as files: hex, at least :data:`KEY_BYTES` bytes, mode 0600."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat

from suffice.exceptions import ConfigError

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
    try:
        with open(path, encoding="ascii") as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if mode & 0o077:
                raise ConfigError(
                    "audit_key",
                    where,
                    f"the key file has mode {mode:04o}: group or others may read or change it, and whoever can "
                    f"read it can forge the log; run `chmod 600 {where}`",
                )
            text = handle.read().strip()
    except FileNotFoundError:
        raise ConfigError(
            "audit_key", where, "no such key file (create one with `suffice audit keygen -o FILE`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("audit_key", where, f"cannot read the key file: {exc}") from exc
    try:
        key = bytes.fromhex(text)
    except ValueError:
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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError("output", str(path), "exists: refusing to overwrite a key file") from None
    except OSError as exc:
        raise ConfigError("output", str(path), f"cannot create the key file: {exc}") from exc
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        os.fchmod(fd, 0o600)  # in case the file system ignored the mode
        handle.write(key.hex() + "\n")
    return key_id(key)
