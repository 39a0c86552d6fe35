"""The ``suffice`` command: one small module per subcommand."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from suffice.cli import (
    audit_cmd,
    bundle_cmd,
    cache_cmd,
    calibrate_cmd,
    demo_cmd,
    judge_cmd,
    models_cmd,
    review_cmd,
    schema_cmd,
    serve_cmd,
)
from suffice.cli.errors import reports_errors
from suffice.exceptions import ConfigError
from suffice.gates import gate_class, gate_names
from suffice.gates.roles import add_commands
from suffice.network import version
from suffice.serving import startup


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="suffice", description="Local evidence gates for RAG.")
    parser.add_argument("--version", action="version", version=f"suffice {version() or 'unknown (not installed)'}")
    sub = parser.add_subparsers(dest="command", required=True)
    judge_cmd.add_parser(sub)
    demo_cmd.add_parser(sub)
    audit_cmd.add_parsers(sub)
    review_cmd.add_parser(sub)
    calibrate_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    schema_cmd.add_parser(sub)
    cache_cmd.add_parser(sub)
    bundle_cmd.add_parser(sub)
    models_cmd.add_parser(sub)
    for name in gate_names():  # the gates' own commands (the adequacy gate's `rubrics`)
        with contextlib.suppress(ConfigError):  # a gate that cannot load says so when it is chosen
            add_commands(gate_class(name), sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: results are flushed and the engine's processes are
    shut down (killing this process alone would leave them running, holding GBs)."""
    raise SystemExit(128 + signum)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (a test may have replaced it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    startup.mark("command line read")  # suffice and every gate imported
    # A program that calls main() keeps its own SIGTERM handling once main() returns.
    before = (
        signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    )
    # The library logs and never prints; the command shows its warnings (and with -v its settings) on stderr.
    handler = _Stderr()
    handler.setLevel(logging.INFO if getattr(args, "verbose", False) else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("suffice")
    level = logger.level
    logger.addHandler(handler)
    if getattr(args, "verbose", False):
        logger.setLevel(logging.INFO)
    try:
        code: int = reports_errors(args.run)(args)  # a gate's own commands too
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        if before is not None:
            signal.signal(signal.SIGTERM, before)
    return code


if __name__ == "__main__":
    sys.exit(main())
