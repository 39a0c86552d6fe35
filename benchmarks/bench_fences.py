"""Prompt tokens a chunk's fence costs, before and after the fence of issues 38 and 41.

Before: a token of 16 hex digits on every fence line, every chunk opened and closed.
After: a token of three listed words (keyed with the process's secret), a run of chunks
closed once (each chunk ends where the next one opens).  Both are rendered through each
gate's real user template, on the bundled sample's chunks without sources, dates or
metadata (what every chunk pays); a chunk's structure is the user message's tokens with
the chunks shown, less those with none, less the chunks' own text, over the number of
chunks.  No engine: the tokenizers only.

    .venv/bin/python benchmarks/bench_fences.py [--tokenizer FOLDER ...] [--items 20]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

from common import SAMPLE, report
from transformers import AutoTokenizer

from suffice.gates.registry import make_gate
from suffice.prompts.templates import FENCE_BITS, Fence, PromptTemplate, fence_seed
from suffice.serving.models import EMBEDDED_NAME, resolve_model

GATES = {"sufficiency": None, "recovery": None, "adequacy": {"rubric": "customer-support"}}
#: What issue 41 asks a chunk's fence to cost at most, with the embedded model's tokenizer.
TARGET = 12


class HexFence(Fence):
    """The fence before: 16 hex digits of a SHA-256, every part closed by its own line."""

    def __call__(self, kind: str, text: str, label: int | None = None, close: bool = True, **attributes: Any) -> str:
        return super().__call__(kind, text, label, True, **attributes)


def fence_for(design: str, seed: str) -> Fence:
    if design == "before":
        return HexFence(hashlib.sha256(f"0:{seed}".encode()).hexdigest()[:16])
    return Fence.around([], seed)[0]


def user_message(template: PromptTemplate, fence: Fence, question: str, texts: list[str]) -> str:
    chunks = [
        {"label": i, "text": t, "source": None, "source_label": i, "score": None, "date": None, "metadata": None}
        for i, t in enumerate(texts)
    ]
    return template.user.render(question=question, response="An answer.", chunks=chunks, fence=fence).strip()


def structure_per_chunk(tokenizer: Any, gate: str, design: str, record: dict[str, Any]) -> float:
    """Tokens of fence structure a chunk costs in ``gate``'s prompt for ``record``'s chunks."""
    template = make_gate(gate, GATES[gate]).template
    texts = [c["text"] for c in record["chunks"]]
    fence = fence_for(design, fence_seed([record["question"], *texts]))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    shown = count(user_message(template, fence, record["question"], texts))
    none = count(user_message(template, fence, record["question"], []))
    return (shown - none - sum(count(t) for t in texts)) / len(texts)


def load_tokenizer(folder: str) -> Any:
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def measure(tokenizer: Any, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for gate in GATES:
        row: dict[str, Any] = {"gate": gate}
        for design in ("before", "after"):
            costs = [structure_per_chunk(tokenizer, gate, design, r) for r in records]
            row[f"{design}_mean"] = statistics.fmean(costs)
            row[f"{design}_max"] = max(costs)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", action="append", default=[], help="a model folder (default: the embedded)")
    parser.add_argument("--items", type=int, default=20)
    args = parser.parse_args()
    records = [json.loads(line) for line in SAMPLE.open()][: args.items]
    folders = args.tokenizer or [str(resolve_model(None).path)]
    rows = []
    for folder in folders:
        name = EMBEDDED_NAME if not args.tokenizer else Path(folder).name
        rows += [{"tokenizer": name, **row} for row in measure(load_tokenizer(folder), records)]
    columns = [
        ("tokenizer", "tokenizer", ""),
        ("gate", "gate", ""),
        ("before_mean", "before: tokens/chunk", ".1f"),
        ("before_max", "before: max", ".1f"),
        ("after_mean", "after: tokens/chunk", ".1f"),
        ("after_max", "after: max", ".1f"),
    ]
    chunks = sum(len(r["chunks"]) for r in records)
    report("fences.json", rows, columns, items=len(records), chunks=chunks, token_bits=FENCE_BITS, target=TARGET)


if __name__ == "__main__":
    main()
