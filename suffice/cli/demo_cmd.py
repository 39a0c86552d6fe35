"""``suffice demo``: judge the bundled 50-item sample and print the summary."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from suffice.batch import BatchOptions
from suffice.cli import judge_cmd
from suffice.cli.errors import command
from suffice.config import JudgeConfig
from suffice.serving.engine_config import EngineConfig
from suffice.settings import add_flags, setting

#: Where ``suffice demo`` writes its verdicts.
DEMO_OUTPUT = Path("out/demo-verdicts.jsonl")


@dataclass(frozen=True)
class DemoSettings:
    """``suffice demo``'s own setting (``--backend``, ``--model`` and ``-v`` are the engine's, ``--detail`` the
    judge's)."""

    output: Path = setting(DEMO_OUTPUT, "the verdicts file (overwritten)", also=("-o",))


def sample_path() -> Path:
    return Path(str(files("suffice") / "data" / "sample.jsonl"))


def add_parser(sub: Any) -> None:
    p = command(sub, "demo", run, DemoSettings, help="judge the bundled sample")
    add_flags(p, EngineConfig, only=("backend", "model"))
    add_flags(p, JudgeConfig, only=("detail",))
    add_flags(p, EngineConfig, only=("verbose",))


def run(args: argparse.Namespace) -> int:
    """Judge the bundled 50-item labeled sample."""
    print(f"judging {sample_path()} (SQuAD 2.0, HotpotQA, MuSiQue; see data/NOTICE.md for attribution)")
    engine = EngineConfig(backend=args.backend, model=args.model, verbose=args.verbose)
    config = JudgeConfig(engine=engine, detail=args.detail)
    return judge_cmd.judge_file(config, sample_path(), args.output, BatchOptions(overwrite=True))
