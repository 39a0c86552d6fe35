"""The ``suffice`` command: one small module per subcommand."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from suffice.cli import audit_cmd, calibrate_cmd, demo_cmd, judge_cmd, rubrics_cmd, serve_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="suffice", description="Local evidence gates for RAG.")
    sub = parser.add_subparsers(dest="command", required=True)
    judge_cmd.add_parser(sub)
    demo_cmd.add_parser(sub)
    rubrics_cmd.add_parser(sub)
    audit_cmd.add_parsers(sub)
    calibrate_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: results are flushed and the engine's processes are
    shut down (killing only this process used to leave them running, holding GBs)."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
