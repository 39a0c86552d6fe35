"""``suffice demo``: judge the bundled 50-item sample and print the summary."""

from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path
from typing import Any

from suffice.batch import BatchOptions
from suffice.cli import judge_cmd
from suffice.config import BACKENDS, DETAILS, JudgeConfig
from suffice.serving.engine_config import EngineConfig


def sample_path() -> Path:
    return Path(str(files("suffice") / "data" / "sample.jsonl"))


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo", help="judge the bundled sample", description="Judge the bundled 50-item labeled sample."
    )
    p.add_argument("-o", "--output", type=Path, default=Path("out/demo-verdicts.jsonl"))
    p.add_argument("--backend", choices=BACKENDS, default=None)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--detail", choices=DETAILS, default="full")
    p.add_argument("-v", "--verbose", action="store_true", help="show the engine's own log and its settings")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print(f"judging {sample_path()} (SQuAD 2.0, HotpotQA, MuSiQue; see data/NOTICE.md for attribution)")
    engine = EngineConfig(backend=args.backend, model=args.model, verbose=args.verbose)
    config = JudgeConfig(engine=engine, detail=args.detail)
    return judge_cmd.judge_file(config, sample_path(), args.output, BatchOptions(overwrite=True))
