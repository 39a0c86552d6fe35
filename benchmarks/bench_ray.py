"""What does Ray cost on one machine?  The same items judged by ``suffice judge`` in
process and with ``--ray local --actors 1`` (one actor holding one engine bound to
the same cores), one fresh process each, engine start included, side by side in one
run.  Also: how many verdicts are identical (temperature 0), and the decision
probabilities' largest difference.

Target (issue 11): Ray's overhead at most 15 % on this machine.  On two cores a
second actor cannot help (NOTES: two engines are no faster than one bound to both);
Ray pays off with more machines.

    .venv/bin/python benchmarks/bench_ray.py --items 32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import TreeMemory, load_items, report


def run(source: Path, output: Path, *extra: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "suffice.cli.main", "judge", str(source), "-o", str(output), "--no-progress"]
    began = time.perf_counter()
    process = subprocess.Popen(
        [*command, "--overwrite", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    with TreeMemory(process.pid) as memory:
        _, stderr = process.communicate()
    wall = time.perf_counter() - began
    rows = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    return {
        "exit": process.returncode,
        "wall_s": wall,
        "tree_gib": memory.total / 2**30,
        "rows": rows,
        "stderr_tail": stderr[-600:] if process.returncode not in (0, 3) else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    items = load_items(args.items, seed=11)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "in.jsonl"
        source.write_text("".join(json.dumps(item) + "\n" for item in items))
        size = ["--batch-size", str(args.batch_size)]
        legs = {
            "in-process": run(source, Path(tmp) / "local.jsonl", *size),
            "ray local, 1 actor": run(source, Path(tmp) / "ray.jsonl", *size, "--ray", "local", "--actors", "1"),
        }
    base = legs["in-process"]
    local = {r["id"]: r for r in base["rows"]}
    rows: list[dict[str, Any]] = []
    for mode, leg in legs.items():
        same = sum(
            1
            for r in leg["rows"]
            if r["verdict"] is not None
            and {k: v for k, v in r["verdict"].items() if k != "p_sufficient"}
            == {k: v for k, v in (local[r["id"]]["verdict"] or {}).items() if k != "p_sufficient"}
        )
        gaps = [
            abs(r["verdict"]["p_sufficient"] - local[r["id"]]["verdict"]["p_sufficient"])
            for r in leg["rows"]
            if r["verdict"] and local[r["id"]]["verdict"] and r["verdict"].get("p_sufficient") is not None
        ]
        rows.append(
            {
                "mode": mode,
                "items": len(leg["rows"]),
                "wall_s": leg["wall_s"],
                "verdicts_per_s": len(leg["rows"]) / leg["wall_s"],
                "overhead": leg["wall_s"] / base["wall_s"] - 1,
                "tree_gib": leg["tree_gib"],
                "same_verdicts": same,
                "max_p_gap": max(gaps) if gaps else None,
                "exit": leg["exit"],
                "stderr": leg["stderr_tail"],
            }
        )
        print({k: v for k, v in rows[-1].items()}, flush=True)
    report(
        "ray.json",
        rows,
        [
            ("mode", "mode", "s"),
            ("items", "items", "d"),
            ("wall_s", "wall s", ".1f"),
            ("verdicts_per_s", "verdicts/s", ".3f"),
            ("overhead", "overhead vs in-process", "+.1%"),
            ("tree_gib", "peak RSS GiB (tree)", ".2f"),
            ("same_verdicts", "same verdicts", "d"),
            ("max_p_gap", "max p gap", ".1e"),
            ("exit", "exit", "d"),
        ],
        batch_size=args.batch_size,
    )


if __name__ == "__main__":
    main()
