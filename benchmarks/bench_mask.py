"""xgrammar's own mask cost per decode step, outside vLLM: is the mask the warm overhead?

Compiles the sufficiency head segment with xgrammar for the embedded model's tokenizer,
then feeds a typical verdict's tokens one at a time, timing ``fill_next_token_bitmask``
at each step; the same with the string length bounds removed (``{0,n}`` -> ``*``), for
scale.  One process, one thread: no engine.

    .venv/bin/python benchmarks/bench_mask.py
"""

from __future__ import annotations

import re
import statistics
import time
from typing import Any

import xgrammar as xgr
from common import report
from transformers import AutoTokenizer

from suffice.gates.sufficiency.grammar import _segments
from suffice.serving.weights import embedded_model

#: What follows the head's prefix in a typical verdict, up to the decision.
VERDICT = (
    '{"entity":"Paris","covered":true},{"entity":"capital of France","covered":true}],"contradictions":[],'
    '"reasoning":"Chunk 0 says that Paris is the capital of France, which answers the question directly '
    'and fully.","is_sufficient":'
)


def measure(name: str, pattern: str, compiler: Any, info: Any, ids: list[int], repeats: int) -> dict[str, Any]:
    began = time.perf_counter()
    compiled = compiler.compile_regex(pattern)
    compile_s = time.perf_counter() - began
    steps: list[float] = []
    for _ in range(repeats):
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        for token in ids:
            began = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            steps.append(time.perf_counter() - began)
            if not matcher.accept_token(token):
                raise RuntimeError(f"{name}: the pattern refused token {token}")
    return {
        "pattern": name,
        "compile_s": compile_s,
        "steps": len(ids),
        "median_ms": statistics.median(steps) * 1e3,
        "mean_ms": statistics.mean(steps) * 1e3,
        "max_ms": max(steps) * 1e3,
    }


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model().path))
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    head = _segments()["head"].pattern
    if re.fullmatch(head, VERDICT) is None:
        raise RuntimeError("the sample verdict does not match the head segment")
    ids = tokenizer(VERDICT, add_special_tokens=False)["input_ids"]
    rows = [
        measure("head, bounded", head, compiler, info, ids, repeats=3),
        measure("head, bounds removed", re.sub(r"\{0,\d+\}", "*", head), compiler, info, ids, repeats=3),
    ]
    columns = [
        ("pattern", "pattern", ""),
        ("compile_s", "compile s", ".2f"),
        ("steps", "steps", "d"),
        ("median_ms", "mask median ms", ".3f"),
        ("mean_ms", "mask mean ms", ".3f"),
        ("max_ms", "mask max ms", ".2f"),
    ]
    report("mask.json", rows, columns)


if __name__ == "__main__":
    main()
