"""The three structured-output backends side by side on the same items and engine.

For each backend: start-up time, verdicts per second for the whole batch in one
call (grammar compilation included, from a cold cache), output tokens per verdict,
share of valid verdicts, share cut off by max_tokens, retries.  Ratios are against
the first backend, since these machines are shared and noisy.

    .venv/bin/python benchmarks/bench_backends.py --items 240
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any

from common import PeakMemory, load_items, table, verdict_is_valid, write_json

from suffice.config import BACKENDS, JudgeConfig
from suffice.judge import Judge
from suffice.serving.engine_config import EngineConfig


def run_backend(backend: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    judge = Judge.open(JudgeConfig(engine=EngineConfig(backend=backend)))
    startup = time.perf_counter() - started
    try:
        with PeakMemory() as memory:
            began = time.perf_counter()
            results = judge.judge_batch(items)
            seconds = time.perf_counter() - began
    finally:
        judge.close()
    valid = sum(verdict_is_valid(r, item) for r, item in zip(results, items, strict=True))
    called = [r for r in results if r.verdict is not None and getattr(r.verdict, "model_called", True)]
    return {
        "backend": backend,
        "items": len(items),
        "startup_s": startup,
        "judge_s": seconds,
        "verdicts_per_s": len(items) / seconds,
        "output_tokens_per_verdict": sum(r.tokens.completion for r in called) / max(len(called), 1),
        "prompt_tokens": judge.stats.prompt_tokens,
        "share_valid": valid / len(items),
        "share_cut_off": judge.stats.length_cutoffs / len(items),
        "retries": judge.stats.retries,
        "peak_rss_gib": memory.peak_gib,
        "share_sufficient": sum(bool(getattr(r.verdict, "is_sufficient", False)) for r in results) / len(items),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    args = parser.parse_args()
    items = load_items(args.items)
    rows = []
    for backend in args.backends:
        print(f"[{backend}] judging {len(items)} items ...", file=sys.stderr)
        rows.append(run_backend(backend, items))
    base = rows[0]["verdicts_per_s"]
    for row in rows:
        row["speed_vs_first"] = row["verdicts_per_s"] / base
    columns = [
        ("backend", "backend", ""),
        ("items", "items", "d"),
        ("startup_s", "start-up s", ".1f"),
        ("judge_s", "batch s", ".1f"),
        ("verdicts_per_s", "verdicts/s", ".2f"),
        ("speed_vs_first", f"speed vs {rows[0]['backend']}", ".2f"),
        ("output_tokens_per_verdict", "out tokens/verdict", ".0f"),
        ("share_valid", "valid", ".1%"),
        ("share_cut_off", "cut off", ".1%"),
        ("retries", "retries", "d"),
        ("peak_rss_gib", "peak RSS GiB", ".1f"),
    ]
    print(table(rows, columns))
    path = write_json(
        "backends.json",
        {
            "command": " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]]),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "rows": rows,
        },
    )
    print(f"written to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
