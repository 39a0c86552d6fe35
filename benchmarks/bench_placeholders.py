"""How often does the model copy the prompt's example text into its verdicts?

A small model fills a constrained string with whatever the prompt showed it: the
first prompts' examples ("Entity 1", "Concise reasoning for the judgment") came back
verbatim in verdicts.  This script judges the same items from ``../shared/data`` and
counts the verdicts in which any string the model wrote is (or contains) a
placeholder of any prompt version: an example value, or a description in angle
brackets.  Run it on two checkouts to compare prompt versions on the same items:

    PYTHONPATH=OLD .venv/bin/python benchmarks/bench_placeholders.py --items 40 --label before
    PYTHONPATH=NEW .venv/bin/python benchmarks/bench_placeholders.py --items 40 --label after
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import DATA, SAMPLE, report

#: Example values and descriptions from every sufficiency prompt so far (v1: the seed's
#: own example; v2 and v3: descriptions), compared case-insensitively.
PLACEHOLDERS = (
    "entity 1",
    "entity 2",
    "missing information 1",
    "missing information 2",
    "conflicting figures/statements if any",
    "step-by-step reasoning for the judgment",
    "concise reasoning for the judgment",
    "your reasoning",
    "what is missing",
    "a required entity",
    "a missing fact",
    "a conflicting statement in the context",
    "your step-by-step reasoning",
)
_ANGLE = re.compile(r"^<[^<>]*>$")


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def copied(verdict: dict[str, Any]) -> bool:
    """Whether any string the model wrote is a placeholder of a prompt."""
    written = strings({k: v for k, v in verdict.items() if k not in ("prompt_version",)})
    for text in written:
        lowered = text.strip().lower()
        if _ANGLE.match(lowered) or any(p in lowered for p in PLACEHOLDERS):
            return True
    return False


def items(count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names = ["squad2.jsonl", "hotpotqa.jsonl", "musique.jsonl"]
    handles = [(DATA / n).open() if (DATA / n).exists() else SAMPLE.open() for n in names]
    try:
        while len(out) < count:
            for handle in handles:
                line = handle.readline()
                if line:
                    out.append(json.loads(line))
    finally:
        for handle in handles:
            handle.close()
    return out[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--label", default="run")
    parser.add_argument("--backend", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in items(args.items)))
        command = [sys.executable, "-m", "suffice.cli.main", "judge", str(source), "-o", str(out), "--no-progress"]
        if args.backend:
            command += ["--backend", args.backend]
        began = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - began
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    verdicts = [r["verdict"] for r in rows if r.get("verdict") and r["verdict"].get("model_called", True)]
    with_copy = sum(copied(v) for v in verdicts)
    called = [r for r in rows if r.get("verdict") and r["verdict"].get("model_called", True)]
    completion = sum(r["tokens"]["completion"] for r in called) / len(called) if called else None
    prompt = rows[0]["prompt_version"] if rows else "n/a"
    row = {
        "label": args.label,
        "prompt": prompt,
        "items": args.items,
        "verdicts": len(verdicts),
        "copied": with_copy,
        "share": with_copy / len(verdicts) if verdicts else None,
        "sufficient": sum(bool(v.get("is_sufficient")) for v in verdicts),
        "exit": proc.returncode,
        "seconds": seconds,
        "completion": completion,
    }
    columns = [
        ("label", "run", "s"),
        ("prompt", "prompt", "s"),
        ("verdicts", "verdicts", "d"),
        ("copied", "with copied placeholder", "d"),
        ("share", "share", ".1%"),
        ("sufficient", "judged sufficient", "d"),
        ("exit", "exit", "d"),
        ("completion", "output tokens per verdict", ".0f"),
        ("seconds", "wall s", ".0f"),
    ]
    report(f"placeholders-{args.label}.json", [row], columns)


if __name__ == "__main__":
    main()
