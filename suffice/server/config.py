"""The service's settings: frozen, checked once, errors name the parameter."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suffice.audit.keys import read_key_file
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates import gate_names
from suffice.gates.registry import option_names
from suffice.network import is_loopback
from suffice.records import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS

#: The longest ``header_timeout`` taken: a head that may take longer holds a connection as long.
MAX_HEADER_TIMEOUT = 300.0


@dataclass(frozen=True)
class ServeConfig:
    """What ``suffice serve`` runs: which gates, on which judge settings, behind which guards.

    ``judge`` holds the engine and the detail; its ``gate`` field is ignored, ``gates``
    says which are served.  ``options`` are the served gates' options: each gate takes
    those it declares, and an option no served gate declares is refused.
    """

    judge: JudgeConfig = field(default_factory=JudgeConfig)
    gates: tuple[str, ...] = field(default_factory=gate_names)
    options: Mapping[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    #: A file holding the bearer token clients must send (``None``: no authentication).
    api_key_file: Path | None = None
    audit_db: Path | None = None
    audit_key: bytes | None = None
    #: Where ``suffice serve`` writes an anchor of the audit log when it shuts down.
    anchor_file: Path | None = None
    #: A folder of ``NAME.key`` files, one per reviewer of the review page (see :mod:`suffice.server.reviews`).
    reviewer_keys: Path | None = None
    #: Largest request body accepted (bytes); larger gets 413.
    max_body_bytes: int = 16 * 2**20
    #: Most items in one request; more gets 422.
    max_items: int = 1024
    #: Most entries of a list in one item (its chunks); more gets 422.  Fitting tokenizes
    #: every chunk under the tokenizer lock all requests share, so this bounds how long
    #: one item holds it.
    max_chunks_per_item: int = MAX_CHUNKS_PER_ITEM
    #: Most characters of one string (a question, a chunk, an id, a key); longer gets 422.
    max_field_chars: int = MAX_FIELD_CHARS
    #: Connections open at once; past it a new one takes the place of the longest waiting without a
    #: request in flight, or is answered 503 (see :mod:`suffice.server.http_guard`).
    max_connections: int = 512
    #: Seconds a request's headers may take to arrive, from the connection's start or its first
    #: byte after an answer; later gets 408 and the connection is closed.
    header_timeout: float = 10.0
    #: Judges kept for per-request options (a rubric, a threshold), least recently used dropped first.
    judge_cache_size: int = 64
    #: Seconds a request may take before it is answered 504.
    request_timeout: float = 600.0
    #: Work admitted at once (being judged or waiting for the engine), counted in chunks:
    #: an item is 1 plus the entries of its lists, since fitting costs per text, not per item.
    #: A request that would go past it gets 429 with ``Retry-After`` at once, one larger than
    #: it gets 422 (see :mod:`suffice.server.app`).
    max_pending_chunks: int = 131_072
    #: Host names the ``Host`` header may carry besides the bound address and loopback's
    #: (``*``: any), so a web page cannot reach the service by DNS rebinding.
    allowed_hosts: tuple[str, ...] = ()
    #: Serve without ``api_key_file`` on an address other machines reach.
    insecure_no_auth: bool = False
    #: Answer ``/metrics`` without the bearer token (to a Prometheus scraper that holds none).
    metrics_without_auth: bool = False
    #: Show the engine's log and uvicorn's access log.
    verbose: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gates", tuple(self.gates))
        if not self.gates:
            raise ConfigError("gates", self.gates, "serve at least one gate")
        for gate in self.gates:
            if gate not in gate_names():
                raise ConfigError("gates", gate, f"must be among {', '.join(gate_names())}")
        if len(set(self.gates)) != len(self.gates):
            raise ConfigError("gates", self.gates, "names a gate twice")
        object.__setattr__(self, "options", dict(self.options))
        for key, value in self.options.items():
            if not any(key in option_names(gate) for gate in self.gates):
                raise ConfigError(key, value, f"no gate served ({', '.join(self.gates)}) takes this option")
        if not 0 <= self.port <= 65535:
            raise ConfigError("port", self.port, "must be between 0 and 65535")
        if self.max_body_bytes < 1024:
            raise ConfigError("max_body_bytes", self.max_body_bytes, "must be at least 1024")
        if self.max_items < 1:
            raise ConfigError("max_items", self.max_items, "must be at least 1")
        for name in (
            "max_chunks_per_item",
            "max_field_chars",
            "max_pending_chunks",
            "max_connections",
            "judge_cache_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be a whole number of at least 1")
        if self.max_pending_chunks <= self.max_chunks_per_item:
            raise ConfigError(
                "max_pending_chunks",
                self.max_pending_chunks,
                f"must be more than max_chunks_per_item ({self.max_chunks_per_item}): "
                "an item of that many chunks could never be admitted",
            )
        object.__setattr__(self, "allowed_hosts", tuple(host.strip().lower() for host in self.allowed_hosts))
        for host in self.allowed_hosts:
            if not host or any(c in host for c in "/ @"):
                raise ConfigError("allowed_hosts", host, "must be a host name or address, without scheme or path")
        if self.api_key_file is None and not self.insecure_no_auth and not is_loopback(self.host):
            raise ConfigError(
                "api_key_file",
                None,
                f"is needed to serve on {self.host}, which other machines reach: give a token file, "
                "or insecure_no_auth (--insecure-no-auth) to serve without authentication",
            )
        if not self.request_timeout > 0:
            raise ConfigError("request_timeout", self.request_timeout, "must be more than 0 seconds")
        if not math.isfinite(self.request_timeout):
            # The SIGTERM drain is sized from it: a request that may run for ever
            # holds a drain for ever too.
            raise ConfigError("request_timeout", self.request_timeout, "must be a finite number of seconds")
        if isinstance(self.header_timeout, bool) or not isinstance(self.header_timeout, int | float):
            raise ConfigError("header_timeout", self.header_timeout, "must be a number of seconds")
        if not 0 < self.header_timeout <= MAX_HEADER_TIMEOUT:
            raise ConfigError(
                "header_timeout", self.header_timeout, f"must be more than 0 and at most {MAX_HEADER_TIMEOUT} s"
            )
        if self.audit_key is not None and self.audit_db is None:
            raise ConfigError("audit_key", "<key>", "needs audit_db")
        if self.anchor_file is not None and self.audit_db is None:
            raise ConfigError("anchor_file", str(self.anchor_file), "needs audit_db: it anchors the audit log")
        if self.reviewer_keys is not None and self.audit_db is None:
            raise ConfigError("reviewer_keys", str(self.reviewer_keys), "needs audit_db: reviews live in the audit log")
        if self.reviewer_keys is not None and not isinstance(self.reviewer_keys, Path):
            object.__setattr__(self, "reviewer_keys", Path(self.reviewer_keys))
        if self.api_key_file is not None and not isinstance(self.api_key_file, Path):
            object.__setattr__(self, "api_key_file", Path(self.api_key_file))


def host_names(config: ServeConfig) -> frozenset[str]:
    """The ``Host`` header names served (lower case, no port): the bound address, loopback's, and the allowed."""
    bound = config.host.lower()
    bracketed = f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound
    return frozenset({"localhost", "127.0.0.1", "[::1]", bound, bracketed, *config.allowed_hosts})


def read_api_key(path: Path, *, private: bool = True) -> bytes:
    """The bearer token in ``path`` (surrounding whitespace removed); errors name the option.  ``private``: a file
    group or others may read is refused, as an audit key is (:func:`~suffice.audit.keys.read_key_file`), since
    whoever reads it can call the service; a client's copy of the key (``judge --server``) is not checked."""
    if private:
        key = read_key_file(path, "api_key_file", forging="call the service as its clients")
    else:
        try:
            key = path.read_bytes().strip()
        except OSError as exc:
            raise ConfigError("api_key_file", str(path), f"cannot be read: {exc.strerror or exc}") from exc
    if len(key) < 16:
        raise ConfigError("api_key_file", str(path), "holds fewer than 16 characters: use a long random token")
    if any(byte < 0x21 or byte > 0x7E for byte in key):
        raise ConfigError("api_key_file", str(path), "must hold one token of visible ASCII characters")
    return key


def options_for(config: ServeConfig, gate: str) -> dict[str, Any]:
    """The served options ``gate`` declares."""
    declared = option_names(gate)
    return {key: value for key, value in config.options.items() if key in declared}
