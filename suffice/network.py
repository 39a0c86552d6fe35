"""The rules for talking over a network: which hosts are this machine, which addresses are refused, how an address
is shown in an error, when an HTTP call is tried again, how a key file is read and a bearer key checked, and the
version suffice reports.  One module, so the openai engine, the service's client, ``judge --server`` and the service
itself cannot drift apart."""

from __future__ import annotations

import functools
import importlib.metadata
import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from suffice.exceptions import ConfigError
from suffice.files import planted

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#]*@")


def redact_url(url: str) -> str:
    """``url`` with whatever stands before an ``@`` in its authority (``user:password``) shown as ``***``: what an
    error may echo of an address that holds a secret."""
    return _USERINFO.sub(lambda m: f"{m.group(1) or ''}//***@", url, count=1)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a URL's hostname or a bind address, bracketed or not) is this machine: ``localhost`` or an
    address in 127.0.0.0/8 or ::1.  Any other name is another machine, since a resolver may send it anywhere."""
    name = host.strip().strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_url(name: str, url: object, schemes: tuple[str, ...], instead: str) -> SplitResult:
    """``url`` split, once it has one of ``schemes``, no credentials, a host and a port that is one; else a
    :class:`ConfigError` naming the setting ``name`` and showing the address redacted.  Credentials are refused, not
    used: an address is echoed in errors and recorded beside outputs, and a secret must reach neither; ``instead``
    says where the secret goes."""
    if not isinstance(url, str):
        raise ConfigError(name, repr(url), "must be an address (a string) like http://127.0.0.1:8000")
    shown = redact_url(url)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in schemes:
        raise ConfigError(name, shown, f"must start with {' or '.join(s + '://' for s in schemes)}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsed on access: raises for one that is not a port number
    except ValueError as exc:
        raise ConfigError(name, shown, f"is not a valid address: {str(exc).replace(url, shown)}") from exc
    if "@" in parts.netloc:
        raise ConfigError(
            name, shown, f"holds credentials (user:password@): they would be echoed in errors and recorded; {instead}"
        )
    if not parts.hostname or any(c.isspace() for c in parts.hostname):
        raise ConfigError(name, shown, "names no host, or one with a space in it (give one like http://127.0.0.1:8001)")
    return parts


def refuse_plain_http(name: str, url: str, parts: SplitResult, what: str, allow: str) -> None:
    """A :class:`ConfigError` for plain ``http://`` to a host other than this machine: ``what`` would cross the
    network unencrypted; ``allow`` says how to allow it anyway."""
    host = parts.hostname or ""
    if parts.scheme.lower() == "http" and not is_loopback(host):
        raise ConfigError(
            name,
            redact_url(url),
            f"is plain http to {host}, another machine: {what} would cross the network unencrypted; use https://, "
            f"or allow it with {allow} on a network you trust",
        )


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header's ``value`` asks to wait (a negative one: 0); ``None`` when there is
    none or it is not a number of seconds."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds != seconds else max(0.0, seconds)  # NaN: none


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed HTTP call is tried again, and after how long: the one rule of the service's clients and the
    openai engine.  A 429 or a 5xx is tried again, at most ``retries`` times: after the ``Retry-After`` it asks for,
    else after ``backoff`` seconds doubled at each try (``None``: only a call asked to wait is tried again).  A
    ``Retry-After`` over ``max_wait`` is waited ``max_wait`` where ``cap``, else ends the tries: a caller who bounds
    the wait would rather have the error.  Which failures without an answer count is each caller's to say (``status``
    ``None``)."""

    retries: int
    max_wait: float
    backoff: float | None = None
    cap: bool = False

    @staticmethod
    def retried(status: int) -> bool:
        """Whether an answer with ``status`` may be tried again: too many requests, or the server failed."""
        return status == 429 or status >= 500

    def wait(self, attempt: int, status: int | None = None, asked: str | None = None) -> float | None:
        """The seconds to wait before trying again a call whose try ``attempt`` (from 0) failed with ``status``
        (``None``: no answer), its ``Retry-After`` ``asked``; ``None``: not again."""
        if attempt >= self.retries or (status is not None and not self.retried(status)):
            return None
        seconds = retry_after(asked)
        if seconds is None:
            return None if self.backoff is None else self.backoff * 2**attempt
        if seconds > self.max_wait:
            return self.max_wait if self.cap else None
        return seconds


#: Most bytes a key file may hold: a key is a line, and a huge file named by mistake is not read into memory.
KEY_FILE_MAX_BYTES = 4096


def read_key_file(
    path: str | os.PathLike[str], parameter: str, *, forging: str | None, missing: str = "no such key file"
) -> bytes:
    """The bytes of the secret in ``path`` (surrounding whitespace removed): the one reader of every key suffice
    reads (the audit key, the service's key, a client's copy of it, an engine server's key).

    Refused with :class:`ConfigError` naming ``parameter``: a missing or unreadable file, one that is not a regular
    file or holds more than :data:`KEY_FILE_MAX_BYTES`, and, where ``forging`` says what whoever reads the key could
    do, one that group or others may read or change (``None``: a copy whose mode is its owner's business).
    """
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO named by mistake: no hang
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(parameter, where, "is not a regular file")
            mode = stat.S_IMODE(info.st_mode)
            if forging is not None and mode & 0o077:
                raise ConfigError(
                    parameter,
                    where,
                    f"the key file has mode {mode:04o}: group or others may read or change it, and whoever can "
                    f"read it can {forging}; run `chmod 600 {where}`",
                )
            if forging is not None and (why := planted(info, private=True)) is not None:
                raise ConfigError(parameter, where, f"the key file {why}, and could {forging}")
            data = handle.read(KEY_FILE_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(parameter, where, missing) from None
    except OSError as exc:
        raise ConfigError(parameter, where, f"cannot read the key file: {exc.strerror or exc}") from exc
    if len(data) > KEY_FILE_MAX_BYTES:
        raise ConfigError(parameter, where, f"holds more than {KEY_FILE_MAX_BYTES} bytes: a key file holds one key")
    return data.strip()


def bearer_key(key: object, parameter: str, source: str, *, min_chars: int = 1) -> str:
    """``key`` (text, or a key file's bytes) without surrounding whitespace or byte order mark, once it is one token
    of at least ``min_chars`` visible ASCII characters, the only ones an ``Authorization`` header carries: the one
    rule of every bearer key suffice sends or checks.  Else a :class:`ConfigError` naming ``parameter`` and
    ``source`` (where the key came from), the key itself never said."""
    if not isinstance(key, (str, bytes)):
        raise ConfigError(parameter, source, f"must be a string, not {type(key).__name__}")
    token = (key.decode("utf-8", errors="replace") if isinstance(key, bytes) else key).lstrip("\ufeff").strip()
    if not token:
        raise ConfigError(parameter, source, "is empty: give the key")
    if not all("!" <= char <= "~" for char in token):
        raise ConfigError(
            parameter,
            source,
            "holds a space, a control character or a non-ASCII character inside it: a key is one token of visible "
            "ASCII characters (an HTTP header cannot carry the others)",
        )
    if len(token) < min_chars:
        raise ConfigError(parameter, source, f"holds fewer than {min_chars} characters: use a long random token")
    return token


@functools.cache
def version() -> str | None:
    """suffice's installed version, ``None`` when run from a source tree never installed (read once: the lookup
    scans the installed packages)."""
    try:
        return importlib.metadata.version("suffice")
    except importlib.metadata.PackageNotFoundError:
        return None
