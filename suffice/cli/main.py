"""The ``suffice`` command: one small module per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from suffice.cli import audit_cmd, calibrate_cmd, demo_cmd, judge_cmd, rubrics_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="suffice", description="Local evidence gates for RAG.")
    sub = parser.add_subparsers(dest="command", required=True)
    judge_cmd.add_parser(sub)
    demo_cmd.add_parser(sub)
    rubrics_cmd.add_parser(sub)
    audit_cmd.add_parsers(sub)
    calibrate_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
