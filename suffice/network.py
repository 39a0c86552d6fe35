"""The rules for an address suffice sends to: which hosts are this machine, which addresses are refused, and how an
address is shown in an error.  One module, so the openai engine, the service's client, ``judge --server`` and the
service's own "who reaches this" check cannot drift apart."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

from suffice.exceptions import ConfigError

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
