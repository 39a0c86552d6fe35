"""The service's settings: frozen, checked once, errors name the parameter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suffice.audit.options import AuditOptions
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates import gate_names
from suffice.gates.registry import option_names
from suffice.network import bearer_key, is_loopback, read_key_file
from suffice.records.item import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS
from suffice.settings import check, setting

#: The longest ``header_timeout`` taken: a head that may take longer holds a connection as long.
MAX_HEADER_TIMEOUT = 300.0


@dataclass(frozen=True)
class ServeConfig(AuditOptions):
    """What ``suffice serve`` runs: which gates, on which judge settings, behind which guards.

    ``judge`` holds the engine and the detail; its ``gate`` field is ignored, ``gates``
    says which are served.  ``options`` are the served gates' options: each gate takes
    those it declares, and an option no served gate declares is refused.
    """

    judge: JudgeConfig = field(default_factory=JudgeConfig)
    gates: tuple[str, ...] = field(default_factory=gate_names)
    options: Mapping[str, Any] = field(default_factory=dict)
    host: str = setting("127.0.0.1", "address to listen on (default 127.0.0.1: this machine only)")
    port: int = setting(8000, "port (default 8000; 0: any free port)", minimum=0, maximum=65535)
    api_key_file: Path | None = setting(
        None, "file holding the bearer token clients must send (default: no authentication)", dest="client_key_file"
    )
    #: A folder of ``NAME.key`` files, one per reviewer of the review page (see :mod:`suffice.server.reviews`).
    reviewer_keys: Path | None = setting(
        None,
        "folder of NAME.key files (suffice audit keygen), one per reviewer of the review page at /reviews "
        "(needs --audit-db)",
    )
    max_body_bytes: int = setting(16 * 2**20, "largest request body; larger gets 413 (default 16 MiB)", minimum=1024)
    max_items: int = setting(1024, "most items per request; more gets 422 (default 1024)", minimum=1)
    # Fitting tokenizes every chunk under the tokenizer lock all requests share, so this bounds how long one item
    # holds it.
    max_chunks_per_item: int = setting(
        MAX_CHUNKS_PER_ITEM,
        f"most chunks (entries of a list) in one item; more gets 422 (default {MAX_CHUNKS_PER_ITEM})",
        minimum=1,
    )
    max_field_chars: int = setting(
        MAX_FIELD_CHARS,
        f"most characters in one string of a body (a question, a chunk, an id, a key); longer gets 422 "
        f"(default {MAX_FIELD_CHARS})",
        minimum=1,
    )
    max_connections: int = setting(
        512,
        "connections open at once; past it a new one replaces the longest idle one, or gets 503 (default 512)",
        minimum=1,
    )
    header_timeout: float = setting(
        10.0,
        "seconds a request's headers may take to arrive, from the connection's start or its first byte after an "
        "answer, before 408 (default 10)",
        above=0,
        maximum=MAX_HEADER_TIMEOUT,
        unit=" s",
    )
    judge_cache_size: int = setting(
        64,
        "judges kept for per-request options (rubric, threshold), least recently used dropped (default 64)",
        minimum=1,
    )
    # Finite: the SIGTERM drain is sized from it, and a request that may run for ever holds a drain for ever too.
    request_timeout: float = setting(600.0, "seconds before a request gets 504 (default 600)", above=0)
    # Counted in chunks since fitting costs per text, not per item; one request larger than it gets 422 (see
    # suffice.server.app).
    max_pending_chunks: int = setting(
        131_072,
        "chunks judged or waiting at once (an item counts 1 plus its chunks); a request past it gets 429 "
        "with Retry-After (default 131072)",
        minimum=1,
    )
    #: Host names the ``Host`` header may carry besides the bound address and loopback's
    #: (``*``: any), so a web page cannot reach the service by DNS rebinding.
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "a name the Host header may carry besides the bound address and localhost (repeat; '*': any)",
        flag="--allowed-host",
        dest="allowed_host",
    )
    insecure_no_auth: bool = setting(False, "serve without --api-key-file on an address other machines reach")
    metrics_without_auth: bool = setting(
        False, "answer /metrics without the bearer token, to a scraper that holds none (default: the token is needed)"
    )
    #: Show the engine's log and uvicorn's access log.
    verbose: bool = False

    @property
    def max_containers(self) -> int:
        """The objects and arrays a request body may hold, checked before it is parsed: what the most items and
        chunks a request may carry need (an item, its chunk list; a chunk, its metadata) and the envelope's few."""
        return 2 * self.max_items + 2 * self.max_pending_chunks + 8

    def __post_init__(self) -> None:
        super().__post_init__()
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
        check(self)  # types and bounds
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
        if self.audit_key is not None and self.audit_db is None:
            raise ConfigError("audit_key", "<key>", "needs audit_db")
        if self.anchor_file is not None and self.audit_db is None:
            raise ConfigError("anchor_file", str(self.anchor_file), "needs audit_db: it anchors the audit log")
        if self.reviewer_keys is not None and self.audit_db is None:
            raise ConfigError("reviewer_keys", str(self.reviewer_keys), "needs audit_db: reviews live in the audit log")
        if self.reviewer_keys is not None and not isinstance(self.reviewer_keys, Path):
            object.__setattr__(self, "reviewer_keys", Path(self.reviewer_keys))


def host_names(config: ServeConfig) -> frozenset[str]:
    """The ``Host`` header names served (lower case, no port): the bound address, loopback's, and the allowed."""
    bound = config.host.lower()
    bracketed = f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound
    return frozenset({"localhost", "127.0.0.1", "[::1]", bound, bracketed, *config.allowed_hosts})


def read_api_key(path: Path, *, private: bool = True) -> bytes:
    """The bearer key in ``path`` (:func:`~suffice.network.bearer_key`, at least 16 characters); errors name the
    option.  ``private``: a file group or others may read is refused, as an audit key is, since whoever reads it can
    call the service; a client's copy of the key (``judge --server``) is not checked."""
    key = read_key_file(path, "api_key_file", forging="call the service as its clients" if private else None)
    return bearer_key(key, "api_key_file", str(path), min_chars=16).encode("ascii")


def options_for(config: ServeConfig, gate: str) -> dict[str, Any]:
    """The served options ``gate`` declares."""
    declared = option_names(gate)
    return {key: value for key, value in config.options.items() if key in declared}
