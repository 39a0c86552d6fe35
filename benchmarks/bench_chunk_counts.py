"""Does the constraint's cost grow with the variety of the input?  Distinct chunk counts
against a fixed chunk count, per structured-output backend, cold start included.

The same ``--items`` texts (HotpotQA contexts cut to ``--words`` words) are judged
twice per backend, each time by a fresh ``suffice judge`` process: once split into
1, 2, ..., ``--items`` chunks (one distinct count per item), once all split into 8
chunks.  Wall time is the whole process (engine start, compiling, judging); peak
RSS is the largest single process of its tree (the engine core) and the tree's
total, sampled every 0.2 s.  Before constraints were decoded in segments, outlines
compiled a full index per distinct count and the engine was killed at 20.5 GB.

    .venv/bin/python benchmarks/bench_chunk_counts.py --items 64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import DATA, SAMPLE, TreeMemory, report

from suffice.config import BACKENDS

FIXED_CHUNKS = 8


def texts(count: int, words: int) -> list[tuple[str, str]]:
    """(question, text) pairs: HotpotQA contexts, each cut to ``words`` words."""
    path = DATA / "hotpotqa.jsonl"
    if not path.exists():
        path = SAMPLE
    out: list[tuple[str, str]] = []
    with path.open() as handle:
        for line in handle:
            record = json.loads(line)
            body = " ".join(c["text"] for c in record["chunks"]).split()
            if len(body) >= words:
                out.append((record["question"], " ".join(body[:words])))
            if len(out) == count:
                break
    return out


def split(text: str, parts: int) -> list[str]:
    words = text.split()
    size, extra = divmod(len(words), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(" ".join(words[start:end]))
        start = end
    return out


def write_items(path: Path, pairs: list[tuple[str, str]], counts: list[int]) -> None:
    with path.open("w") as handle:
        for index, ((question, text), n) in enumerate(zip(pairs, counts, strict=True)):
            chunks = [{"id": j, "text": t} for j, t in enumerate(split(text, n))]
            handle.write(json.dumps({"id": f"item-{index}", "question": question, "chunks": chunks}) + "\n")


def run_leg(backend: str, source: Path, output: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "suffice.cli.main",
        "judge",
        str(source),
        "-o",
        str(output),
        "--backend",
        backend,
        "--overwrite",
        "--no-progress",
    ]
    began = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with TreeMemory(process.pid) as memory:
        _, stderr = process.communicate()
    wall = time.perf_counter() - began
    rows = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    return {
        "exit": process.returncode,
        "wall_s": wall,
        "largest_rss_gib": memory.largest / 2**30,
        "tree_rss_gib": memory.total / 2**30,
        "verdicts": sum(r["verdict"] is not None for r in rows),
        "prompt_tokens": sum(r["tokens"]["prompt"] for r in rows),
        "completion_tokens": sum(r["tokens"]["completion"] for r in rows),
        "errors": sum(r["error"] is not None for r in rows),
        "stderr_tail": stderr[-400:] if process.returncode not in (0, 3) else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--words", type=int, default=240)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    args = parser.parse_args()
    pairs = texts(args.items, args.words)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        distinct = work / "distinct.jsonl"
        fixed = work / "fixed.jsonl"
        write_items(distinct, pairs, [i + 1 for i in range(len(pairs))])
        write_items(fixed, pairs, [FIXED_CHUNKS] * len(pairs))
        for backend in args.backends:
            legs = {}
            for name, source in (("distinct", distinct), ("fixed", fixed)):
                legs[name] = run_leg(backend, source, work / f"{backend}-{name}.out.jsonl")
                print(f"{backend} {name}: {legs[name]}", file=sys.stderr, flush=True)
            d, f = legs["distinct"], legs["fixed"]
            rows.append(
                {
                    "backend": backend,
                    "items": len(pairs),
                    "distinct_s": d["wall_s"],
                    "fixed_s": f["wall_s"],
                    "time_ratio": d["wall_s"] / f["wall_s"],
                    "distinct_gib": d["largest_rss_gib"],
                    "fixed_gib": f["largest_rss_gib"],
                    "memory_ratio": d["largest_rss_gib"] / f["largest_rss_gib"] if f["largest_rss_gib"] else None,
                    "distinct_tree_gib": d["tree_rss_gib"],
                    "fixed_tree_gib": f["tree_rss_gib"],
                    "verdicts": f"{d['verdicts']}+{f['verdicts']}",
                    # The distinct items carry more chunk labels in and more flags out: the
                    # token ratios say how much of the time ratio is more work, not compiling.
                    "prompt_token_ratio": d["prompt_tokens"] / max(f["prompt_tokens"], 1),
                    "completion_token_ratio": d["completion_tokens"] / max(f["completion_tokens"], 1),
                    "errors": d["errors"] + f["errors"],
                    "legs": legs,
                }
            )
    columns = [
        ("backend", "backend", ""),
        ("items", "items", "d"),
        ("distinct_s", f"1..{len(pairs)} chunks s", ".0f"),
        ("fixed_s", f"all {FIXED_CHUNKS} chunks s", ".0f"),
        ("time_ratio", "time ratio", ".2f"),
        ("distinct_gib", "peak RSS GiB (distinct)", ".2f"),
        ("fixed_gib", "peak RSS GiB (fixed)", ".2f"),
        ("memory_ratio", "memory ratio", ".2f"),
        ("prompt_token_ratio", "prompt tokens ratio", ".2f"),
        ("completion_token_ratio", "output tokens ratio", ".2f"),
        ("verdicts", "verdicts", ""),
        ("errors", "errors", "d"),
    ]
    report("chunk_counts.json", rows, columns, cores=len(os.sched_getaffinity(0)))


if __name__ == "__main__":
    main()
