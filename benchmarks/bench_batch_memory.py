"""Does the batch runner's memory grow with its input?  Peak RSS of ``suffice judge``
on inputs of growing size whose records need no model call (empty chunk lists: the
gate answers "insufficient" without the model), so the runner's own reading,
indexing and writing is all that grows.

Each size runs in a fresh process; the driver's peak RSS (the ``suffice`` process,
where the runner lives) and the whole tree's (the engine still starts, at a fixed
cost) are sampled every 0.2 s.  Then each size is resumed with nothing left to do
(every id is looked up in the on-disk index).  The target: the largest input's
driver peak within 10 % of the smallest's.

    .venv/bin/python benchmarks/bench_batch_memory.py --sizes 10000 1000000
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

from common import TreeMemory, report


def write_input(path: Path, count: int) -> None:
    with path.open("w") as handle:
        for i in range(count):
            handle.write(json.dumps({"id": f"trace-{i:08d}", "question": f"What happened in case {i}?", "chunks": []}))
            handle.write("\n")


def run(source: Path, output: Path, *extra: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "suffice.cli.main", "judge", str(source), "-o", str(output), "--no-progress"]
    began = time.perf_counter()
    process = subprocess.Popen([*command, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with TreeMemory(process.pid) as memory:
        _, stderr = process.communicate()
    return {
        "exit": process.returncode,
        "wall_s": time.perf_counter() - began,
        "driver_gib": memory.root_peak / 2**30,
        "tree_gib": memory.total / 2**30,
        "stderr_tail": stderr[-400:] if process.returncode not in (0, 3) else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            source, output = Path(tmp) / f"in-{size}.jsonl", Path(tmp) / f"out-{size}.jsonl"
            write_input(source, size)
            first = run(source, output, "--overwrite")
            lines = sum(1 for _ in output.open()) if output.exists() else 0
            again = run(source, output)
            rows.append(
                {
                    "records": size,
                    "rows": lines,
                    "judge_s": first["wall_s"],
                    "records_per_s": size / first["wall_s"],
                    "driver_gib": first["driver_gib"],
                    "tree_gib": first["tree_gib"],
                    "resume_s": again["wall_s"],
                    "resume_driver_gib": again["driver_gib"],
                    "exit": f"{first['exit']}/{again['exit']}",
                    "stderr": first["stderr_tail"] or again["stderr_tail"],
                }
            )
            print(rows[-1], flush=True)
            source.unlink()
            output.unlink(missing_ok=True)
    base = rows[0]
    for row in rows:
        row["driver_ratio"] = row["driver_gib"] / base["driver_gib"]
        row["resume_driver_ratio"] = row["resume_driver_gib"] / base["resume_driver_gib"]
    report(
        "batch_memory.json",
        rows,
        [
            ("records", "records", "d"),
            ("rows", "rows out", "d"),
            ("judge_s", "judge s", ".0f"),
            ("records_per_s", "records/s", ".0f"),
            ("driver_gib", "driver peak GiB", ".3f"),
            ("driver_ratio", "vs smallest", ".3f"),
            ("tree_gib", "tree peak GiB", ".2f"),
            ("resume_s", "resume s", ".0f"),
            ("resume_driver_gib", "resume driver GiB", ".3f"),
            ("resume_driver_ratio", "vs smallest", ".3f"),
            ("exit", "exit", "s"),
        ],
    )


if __name__ == "__main__":
    main()
