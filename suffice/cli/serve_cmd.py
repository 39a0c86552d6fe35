"""``suffice serve``: the gates over HTTP (see :mod:`suffice.server`); settings from flags,
``SUFFICE_*`` variables and a TOML file (see :mod:`suffice.cli.serve_settings`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from suffice.audit import AuditLog
from suffice.cli.cache_cmd import add_cache_args, cache_settings
from suffice.cli.engine_args import add_engine_args, engine_config_from_args, engine_keys
from suffice.cli.errors import command, fail
from suffice.cli.gate_args import add_gate_args, gate_options_from_args
from suffice.cli.judge_cmd import add_judge_settings, judge_settings_from_args
from suffice.cli.serve_settings import SettingSources, with_origin
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError, SufficeError
from suffice.gates import gate_names
from suffice.server.config import ServeConfig
from suffice.serving.engine_config import EngineConfig
from suffice.settings import add_flags, from_args, setting


@dataclass(frozen=True)
class ServeSettings:
    """``suffice serve``'s flags that are not :class:`~suffice.server.config.ServeConfig`'s own settings."""

    gate: tuple[str, ...] = setting((), "a gate to serve (repeat; default all)", choices=gate_names)


def add_parser(sub: Any) -> None:
    p = command(sub, "serve", run, ServeSettings, help="serve the gates over HTTP")
    add_engine_args(p, key_option="--engine-key-file")
    add_gate_args(p)
    add_judge_settings(p)
    add_cache_args(p)
    add_flags(
        p, ServeConfig
    )  # the audit log's, --host, --port, --api-key-file, the limits and timeouts, --reviewer-keys
    settings = SettingSources(p, "serve")
    p.set_defaults(command_settings=settings, serve_settings=settings)


#: The settings' names in the errors of the configs they make, where they differ from their keys.
_ENGINE_NAMES = engine_keys("--engine-key-file")
_SERVE_NAMES = {"gates": "gate", "allowed_hosts": "allowed_host"}


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServeConfig:
    """The service's config: the flags given, then ``environ``'s ``SUFFICE_*`` variables (default:
    this process's), then the ``--config`` file, then the defaults.  Raises :class:`ConfigError`
    naming the flag's setting, the variable, or the key and the file."""
    args = argparse.Namespace(**vars(args))
    origins = args.serve_settings.resolve(args, environ)
    try:
        engine = engine_config_from_args(args)
    except ConfigError as exc:
        raise with_origin(exc, origins, _ENGINE_NAMES) from None
    try:
        return _config(args, engine)
    except ConfigError as exc:
        raise with_origin(exc, origins, _SERVE_NAMES) from None


def _config(args: argparse.Namespace, engine: EngineConfig) -> ServeConfig:
    gates = tuple(args.gate) if args.gate else gate_names()
    served: ServeConfig = from_args(
        ServeConfig,
        args,
        judge=JudgeConfig(gate=gates[0], engine=engine, **judge_settings_from_args(args), **cache_settings(args)),
        gates=gates,
        options=gate_options_from_args(args),
        verbose=args.verbose,
    )
    return served


def run(args: argparse.Namespace) -> int:
    """Serve POST /v1/judge/{gate} beside a RAG application (OpenAPI at /openapi.json). Every flag is also a
    SUFFICE_* environment variable and a key of a --config TOML file: a flag wins over a variable, a variable over
    the file."""
    from suffice.server.run import serve

    def notify(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    config = config_from_args(args)
    try:
        status = serve(config, notify)
    except SufficeError as exc:  # the anchor below is still written
        status = fail(exc)
    if config.anchor_file is not None and config.audit_db is not None and config.audit_db.is_file():
        # At shutdown, once the service has closed the log: the anchor covers every row it recorded.
        try:
            with closing(AuditLog(config.audit_db, key=config.audit_key, create=False)) as log:
                log.save_anchor(config.anchor_file)
        except SufficeError as exc:
            failed = fail(exc, doing="no audit anchor written")
            status = status or failed
    return status
