"""What the verdict cache saves: the same file judged twice, side by side in one run.

One engine; the items are judged once into an empty cache (every verdict generated and kept), then again (every
verdict read back), then a third time with the cache off (to show the engine's speed did not change between the
legs).  The rows of the second leg must be the first's, but for the ``cached`` mark: the benchmark fails if not.

    .venv/bin/python benchmarks/bench_cache.py --items 24
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import load_items, report

from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.rows import result_row
from suffice.serving.engine_config import EngineConfig
from suffice.serving.vllm_engine import VLLMEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--detail", choices=("full", "decision"), default="full")
    args = parser.parse_args()
    items = load_items(args.items)
    with tempfile.TemporaryDirectory() as folder:
        engine = VLLMEngine(EngineConfig())
        try:
            cached = JudgeConfig(detail=args.detail, cache=Path(folder) / "verdicts.sqlite3")
            legs = []
            outputs = {}
            for leg, config in (
                ("first (empty cache)", cached),
                ("second (same file)", cached),
                ("cache off", JudgeConfig(detail=args.detail, cache=False)),
            ):
                judge = Judge(engine, config=config)
                start = time.perf_counter()
                results = judge.judge_batch(items)
                seconds = time.perf_counter() - start
                outputs[leg] = [result_row(r, judge.gate, "suffice", i) for i, r in enumerate(results, 1)]
                legs.append(
                    {
                        "leg": leg,
                        "items": len(items),
                        "seconds": seconds,
                        "verdicts_per_s": len(items) / seconds,
                        "hits": sum(r.cached is not None for r in results),
                    }
                )
        finally:
            engine.close()
    first, second = outputs["first (empty cache)"], outputs["second (same file)"]
    stripped = [{k: v for k, v in row.items() if k != "cached"} for row in second]
    if stripped != first:
        raise SystemExit("the cached rows differ from the rows first judged")
    base = legs[0]["seconds"]
    for leg in legs:
        leg["speed_up"] = base / leg["seconds"]
    report(
        "cache.json",
        legs,
        [
            ("leg", "leg", ""),
            ("items", "items", ""),
            ("seconds", "seconds", ".3f"),
            ("verdicts_per_s", "verdicts/s", ".2f"),
            ("hits", "hits", ""),
            ("speed_up", "x first leg", ".1f"),
        ],
        detail=args.detail,
        identical_rows=True,
    )


if __name__ == "__main__":
    main()
