"""``suffice judge``: records in (JSONL or Parquet), one result row each out, resumable
by id, in this process or on Ray actors."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice import batch
from suffice.batch import BatchOptions, RayOptions
from suffice.cli.cache_cmd import CacheSettings, add_cache_args, cache_settings
from suffice.cli.engine_args import add_engine_args, engine_config_from_args, engine_keys
from suffice.cli.errors import command, fail
from suffice.cli.gate_args import add_gate_args, gate_options_from_args
from suffice.cli.serve_settings import SettingSources, with_origin
from suffice.client import DEFAULT_TIMEOUT_S, Client
from suffice.config import JudgeConfig
from suffice.exceptions import (
    EXIT_ITEM_ERRORS,
    EXIT_OK,
    ConfigError,
    SufficeError,
)
from suffice.gates import DEFAULT_GATE, gate_names
from suffice.network import check_url, refuse_plain_http
from suffice.records.text import terminal_text
from suffice.server.config import read_api_key
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import machine_config
from suffice.serving.progress import progress_bar
from suffice.settings import (
    ENV_PREFIX,
    add_flags,
    declared,
    from_args,
    in_process_flags,
    key_of,
    setting,
    tagged,
    values_of,
)


@dataclass(frozen=True)
class JudgeSettings:
    """``suffice judge``'s own settings besides :class:`BatchOptions` (``--gate`` and ``--no-progress``: calibrate's
    too)."""

    input: Path | None = setting(
        None,
        "JSONL or Parquet records (id, question, chunks[, response]; RAGAS names too)",
        positional=True,
    )
    output: Path | None = setting(
        None,
        "JSONL or Parquet results (rows written as batches finish)",
        also=("-o",),
        required=True,
        metavar="OUTPUT",
    )
    gate: str = setting(DEFAULT_GATE, f"the gate that judges (default {DEFAULT_GATE})", choices=gate_names)
    no_progress: bool = setting(False, "no progress bar on stderr")
    server: str | None = setting(
        None,
        "judge through a running `suffice serve` at URL (its engine already started; --api-key-file: its "
        "bearer token) into the same output, with the same resume and settings check",
        metavar="URL",
    )
    timeout: float | None = setting(
        None,
        f"--server: seconds one request may take (default {DEFAULT_TIMEOUT_S:g})",
        above=0,
        unit=" seconds",
        metavar="SECONDS",
    )


def add_judge_args(p: argparse.ArgumentParser) -> None:
    """The options that build a judge (shared by ``judge`` and ``calibrate``)."""
    add_flags(p, JudgeSettings, only=("gate",))
    add_engine_args(p)
    add_flags(p, BatchOptions, only=("batch_size",))
    add_gate_args(p)
    add_judge_settings(p)
    add_flags(p, JudgeSettings, only=("no_progress",))
    add_cache_args(p)


def add_judge_settings(p: argparse.ArgumentParser, config: type[JudgeConfig] = JudgeConfig) -> None:
    """A flag for every setting ``config`` declares with one (``--detail``, ``--auto-margin``)."""
    add_flags(p, config)


def judge_settings_from_args(args: argparse.Namespace, config: type[JudgeConfig] = JudgeConfig) -> dict[str, Any]:
    """``config``'s settings the flags (or their variables and file) gave, by name."""
    return values_of(config, args)


def add_parser(sub: Any) -> None:
    p = command(sub, "judge", run, JudgeSettings, ("input", "output"), help="judge JSONL records")
    add_judge_args(p)
    add_flags(p, BatchOptions, only=[d.name for d in declared(BatchOptions) if d.name != "batch_size"])
    add_flags(p, RayOptions)
    add_flags(p, JudgeSettings, only=("server", "timeout"))
    p.set_defaults(command_settings=SettingSources(p, "judge", "batch_size = 64"))


def read_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """Fill the settings no flag gave from the ``SUFFICE_*`` variables, then the ``--config`` file (see
    :mod:`suffice.cli.serve_settings`); raises :class:`ConfigError` naming the variable, or the key and the file."""
    settings = getattr(args, "command_settings", None)
    if settings is not None:
        args.settings_origins = settings.resolve(args, environ)
        args.settings_sources = {settings.settings[key].dest: origin for key, origin in args.settings_origins.items()}


def named(exc: ConfigError, args: argparse.Namespace) -> ConfigError:
    """``exc`` naming the variable, or the key and the file, its setting came from (where not a flag)."""
    return with_origin(exc, getattr(args, "settings_origins", {}), engine_keys())


#: (argument, flag) of what sets an engine in this process (the engine settings tagged ``in_process``), or what only
#: such a run does: refused with ``--server``.
IN_PROCESS = (
    *in_process_flags(EngineConfig),
    *in_process_flags(RayOptions),
    *in_process_flags(BatchOptions),
    *in_process_flags(CacheSettings),
)
#: The defaults of :data:`IN_PROCESS` arguments that are neither ``None`` nor ``False``.
_DEFAULTS = {d.dest: d.default for d in tagged(EngineConfig, in_process=True) if d.type is not bool}


def in_process_setting(args: argparse.Namespace) -> tuple[str, str] | None:
    """The first (argument, flag) of :data:`IN_PROCESS` set by its flag to anything but its default, or ``None``.

    One set by a variable or the file is left alone: a deployment's ``SUFFICE_VERDICT_CACHE`` or settings file is
    for the runs that start an engine, and a run through ``--server`` does not read it."""
    sources = getattr(args, "settings_sources", {})
    for name, flag in IN_PROCESS:
        value = getattr(args, name, None)  # a command without the flag (calibrate takes no --ray)
        if sources.get(name, "its flag") != "its flag":
            continue
        if value is not None and value is not False and value != _DEFAULTS.get(name):
            return name, flag
    return None


def config_from_args(args: argparse.Namespace) -> JudgeConfig:
    """A checked config, its gate built once so a bad option (an unknown rubric) fails
    before the engine starts."""
    config = JudgeConfig(
        gate=args.gate,
        engine=engine_config_from_args(args),
        options=gate_options_from_args(args),
        **judge_settings_from_args(args),
        **cache_settings(args),
    )
    config.make_gate()
    machine_config(config.engine)  # --cores outside the affinity mask is a usage error, before the engine starts
    return config


def server_config_from_args(args: argparse.Namespace) -> JudgeConfig:
    """``--server``: the gate, its options and the detail (the engine is the service's); a flag for an engine of
    this process is a :class:`ConfigError` naming it."""
    setting = in_process_setting(args)
    if setting is not None:
        name, flag = setting
        raise ConfigError(
            name,
            getattr(args, name),
            f"{flag} sets what runs in this process; with --server the service judges on its own engine "
            "(set it where `suffice serve` starts)",
        )
    parts = check_url("server", args.server, ("http", "https"), "give the service's key with --api-key-file")
    if args.engine_key_file is not None and not args.allow_insecure_http:
        refuse_plain_http("server", args.server, parts, "the service's key and every record", "--allow-insecure-http")
    return JudgeConfig(gate=args.gate, options=gate_options_from_args(args), **judge_settings_from_args(args))


def key_source(args: argparse.Namespace) -> str:
    """``--server``: where the service's key is read from, as a 401 says it (the flag, the variable or the settings
    file, and the key file), or how to give one when none is."""
    path = args.engine_key_file
    if path is None:
        return "--api-key-file PATH"
    origin = getattr(args, "settings_origins", {}).get("api_key_file", "its flag")
    said = "--api-key-file" if origin == "its flag" else (f"${origin}" if origin.startswith(ENV_PREFIX) else origin)
    return f"{said} ({terminal_text(path)})"


def request_settings(args: argparse.Namespace, config: JudgeConfig) -> dict[str, Any]:
    """``--server``: the judge settings the user set (a flag, a ``SUFFICE_*`` variable or the file), each sent with
    every request even where it repeats the default (the service's own may differ); ``detail`` is not sent but
    compared with the service's.  The client refuses one a request cannot set, naming it."""
    origins = getattr(args, "settings_origins", {})
    return {
        d.name: getattr(config, d.name)
        for d in declared(type(config))
        if d.name != "detail" and d.flag is not None and key_of(d.flag) in origins
    }


def judge_config(args: argparse.Namespace) -> JudgeConfig:
    """The run's config: the engine's in this process, or with ``--server`` the gate, options and detail alone."""
    if args.server is not None:
        return server_config_from_args(args)
    if args.timeout is not None:
        raise ConfigError("timeout", args.timeout, "needs --server")
    return config_from_args(args)


def open_client(args: argparse.Namespace, config: JudgeConfig) -> Client | None:
    """``--server``: the client of the service (open it last: nothing after it may fail and leave it open)."""
    if args.server is None:
        return None
    key = read_api_key(args.engine_key_file, private=False).decode("ascii") if args.engine_key_file else None
    return Client(
        args.server,
        api_key=key,
        api_key_source=key_source(args),
        timeout=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout,
        gate=args.gate,
        allow_insecure_http=args.allow_insecure_http,
        judge_settings=request_settings(args, config),
    )


def run(args: argparse.Namespace) -> int:
    """Judge every record of INPUT; write one result line each."""
    if not args.input.is_file():
        raise ConfigError("input", str(args.input), "is not a file")
    try:
        read_settings(args)
        values_of(JudgeSettings, args)  # the bounds of what a variable or the file gave too
        config = judge_config(args)
        if args.actors is not None and args.ray is None:
            raise ConfigError("actors", args.actors, "needs --ray")
        ray = None if args.ray is None else from_args(RayOptions, args, address=args.ray)
        options: BatchOptions = from_args(BatchOptions, args, ray=ray)
        client = open_client(args, config)
    except ConfigError as exc:
        raise named(exc, args) from None  # said by reports_errors, with the table's exit status
    with client or contextlib.nullcontext():
        return judge_file(config, args.input, args.output, options, progress=not args.no_progress, client=client)


def judge_file(
    config: JudgeConfig,
    source: Path,
    output: Path,
    options: BatchOptions,
    *,
    progress: bool = True,
    client: Client | None = None,
) -> int:
    """Run :func:`suffice.batch.judge_file` and turn its outcome into an exit status."""

    def notify(message: str) -> None:
        from tqdm import tqdm

        # Above the progress bar, not into its line (the engine starts after the bar is up).
        tqdm.write(message, file=sys.stderr)

    try:
        report = batch.judge_file(
            config, source, output, options, notify=notify, progress=progress_bar if progress else None, client=client
        )
    except SufficeError as exc:
        return fail(exc, results_in=output)
    if report.summary.items:
        print(report.summary.table(), file=sys.stderr)
        print(f"verdicts written to {terminal_text(output)}", file=sys.stderr)
    if report.reviews:
        print(f"{report.reviews} record(s) sent to a person: queued for review in the audit log", file=sys.stderr)
    if report.unqueued_reviews:
        print(
            f"warning: {report.unqueued_reviews} record(s) routed to a person (human_review), but no review queue "
            "is configured: give --audit-db to queue them",
            file=sys.stderr,
        )
    return EXIT_OK if report.errors == 0 else EXIT_ITEM_ERRORS
