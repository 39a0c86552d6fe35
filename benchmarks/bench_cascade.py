"""What the cascade (``--detail auto``) saves against full verdicts for every record, side by side in one run.

One engine, the verdict cache off and the prefix cache emptied before each leg (each leg does all its own work),
both constraints compiled on two other items first.  The items are judged with ``--detail full``, then ``--detail
auto`` (every record decision-only, a full verdict for those not delivered or within the margin of 0.5), then
``--detail decision`` for reference.  Per leg: seconds, verdicts/s, the share of records given a full verdict, the
share whose route is the full leg's, and on labeled items (``sufficient``) the share whose decision agrees with the
label.

    .venv/bin/python benchmarks/bench_cascade.py --items 24
"""

from __future__ import annotations

import argparse
import time

from common import load_items, report

from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.serving.engine_config import EngineConfig
from suffice.serving.vllm.engine import VLLMEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--margin", type=float, default=0.1, help="--auto-margin of the auto leg (default 0.1)")
    args = parser.parse_args()
    items = load_items(args.items)
    engine = VLLMEngine(EngineConfig())
    legs = []
    routes: dict[str, list[str | None]] = {}
    try:
        # Compile both constraints before any leg is timed (a first leg would pay for it alone); other items, so
        # the prefix cache helps no timed leg.
        warm = load_items(args.items + 2, seed=1)[-2:]
        for detail in ("full", "decision"):
            Judge(engine, config=JudgeConfig(detail=detail, cache=False)).judge_batch(warm)
        for detail in ("full", "auto", "decision"):
            # Each leg computes its own prompts: the decision leg would otherwise reuse the auto leg's prefills.
            if not engine._llm.reset_prefix_cache():
                raise RuntimeError("vLLM could not reset its prefix cache")
            judge = Judge(engine, config=JudgeConfig(detail=detail, auto_margin=args.margin, cache=False))
            start = time.perf_counter()
            results = judge.judge_batch(items)
            seconds = time.perf_counter() - start
            routes[detail] = [None if r.verdict is None else judge.gate.route(r.verdict).route for r in results]
            labeled = [
                (judge.gate.is_positive(r.verdict), item["sufficient"])
                for r, item in zip(results, items, strict=True)
                if r.verdict is not None and isinstance(item.get("sufficient"), bool)
            ]
            full_verdicts = (
                sum(r.cascade is not None and r.cascade.detail == "full" for r in results)
                if detail == "auto"
                else (len(results) if detail == "full" else 0)
            )
            legs.append(
                {
                    "leg": detail,
                    "items": len(items),
                    "seconds": seconds,
                    "verdicts_per_s": len(items) / seconds,
                    "full_share": full_verdicts / len(items),
                    "same_route_as_full": sum(
                        a == b and a is not None for a, b in zip(routes[detail], routes["full"], strict=True)
                    )
                    / len(items),
                    "agrees_with_label": sum(p == label for p, label in labeled) / len(labeled) if labeled else None,
                    "errors": sum(r.error is not None for r in results),
                }
            )
    finally:
        engine.close()
    base = legs[0]["seconds"]
    for leg in legs:
        leg["speed_up"] = base / leg["seconds"]
    report(
        "cascade.json",
        legs,
        [
            ("leg", "detail", ""),
            ("items", "items", ""),
            ("seconds", "seconds", ".2f"),
            ("verdicts_per_s", "verdicts/s", ".3f"),
            ("speed_up", "x full", ".2f"),
            ("full_share", "full verdicts", ".2f"),
            ("same_route_as_full", "route as full", ".2f"),
            ("agrees_with_label", "agrees w/ label", ".2f"),
            ("errors", "errors", ""),
        ],
        margin=args.margin,
    )


if __name__ == "__main__":
    main()
