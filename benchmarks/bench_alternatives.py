"""suffice against what users would otherwise run, same model, same items, one run.

1. suffice on vLLM: the whole batch in one call, constrained by the gate's regex.
2. A first attempt: transformers + Outlines, one item at a time, with the seed's
   JSON schema (``outlines.from_transformers``).  Slow, so it runs on a subset and
   its per-item rate is reported as such.
3. RAGFlow's method: unconstrained generation on the same vLLM engine with RAGFlow's
   prompt, parsed with ``json_repair``, up to two retries with the error appended.

Also: constraint overhead (constrained vs unconstrained generation of the same
length on the same engine) and prefix caching on vs off.  Validity is checked on
every output against the seed's rules (decision a bool, confidence in [0, 1],
useful ids from the request and distinct, coverage keys = required entities,
missing information empty when sufficient).

    .venv/bin/python benchmarks/bench_alternatives.py --items 120 --loop-items 12
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from common import PeakMemory, load_items, table, write_json

from suffice.config import JudgeConfig
from suffice.gates.sufficiency.grammar import RAGFLOW_SCHEMA, SufficiencyVerdict
from suffice.judge import Judge
from suffice.serving.engine_config import EngineConfig
from suffice.serving.models import resolve_model

RAGFLOW_PROMPT = (Path(__file__).parent / "ragflow_sufficiency_select.md").read_text().split("\n", 1)[1]
MAX_TOKENS = 512


def seed_valid(data: Any, record: dict[str, Any]) -> tuple[bool, str]:
    """The seed's requirements on a parsed output, with the first violation."""
    if not isinstance(data, dict):
        return False, "output is not a JSON object"
    for key in (
        "is_sufficient",
        "required_entities",
        "coverage",
        "missing_information",
        "confidence",
        "useful_chunk_ids",
    ):
        if key not in data:
            return False, f"missing key {key!r}"
    if not isinstance(data["is_sufficient"], bool):
        return False, "is_sufficient must be a boolean"
    c = data["confidence"]
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c <= 1:
        return False, "confidence must be a number in [0, 1]"
    ids = data["useful_chunk_ids"]
    request_ids = {ch["id"] for ch in record["chunks"]}
    if not isinstance(ids, list) or any(i not in request_ids for i in ids):
        return False, "useful_chunk_ids must hold only ids of the retrieved chunks"
    if len(set(map(str, ids))) != len(ids):
        return False, "useful_chunk_ids must not repeat an id"
    if not isinstance(data["coverage"], dict) or not isinstance(data["required_entities"], list):
        return False, "coverage must be an object and required_entities a list"
    if set(data["coverage"]) != {str(e) for e in data["required_entities"]}:
        return False, "coverage keys must be exactly the required entities"
    if data["is_sufficient"] and data["missing_information"]:
        return False, "missing_information must be empty when sufficient"
    return True, ""


def ragflow_prompt(record: dict[str, Any]) -> str:
    docs = "\n".join(f"ID: {c['id']}\n{c['text']}" for c in record["chunks"])
    return RAGFLOW_PROMPT.replace("{{ question }}", record["question"]).replace("{{ retrieved_docs }}", docs)


def run_suffice(items: list[dict[str, Any]], prefix_caching: bool = True) -> dict[str, Any]:
    judge = Judge.open(JudgeConfig(engine=EngineConfig(backend="outlines", prefix_caching=prefix_caching)))
    try:
        judge.judge_batch(items[:2])  # warm-up: compile the common constraint shapes out of the timing
        with PeakMemory() as memory:
            began = time.perf_counter()
            results = judge.judge_batch(items)
            seconds = time.perf_counter() - began
    finally:
        judge.close()
    valid = 0
    for result, record in zip(results, items, strict=True):
        if isinstance(result.verdict, SufficiencyVerdict):
            valid += seed_valid(result.verdict.to_ragflow(), record)[0]
    return {
        "items": len(items),
        "seconds": seconds,
        "verdicts_per_s": len(items) / seconds,
        "share_valid": valid / len(items),
        "retries": judge.stats.retries,
        "output_tokens_per_verdict": sum(r.tokens.completion for r in results) / len(items),
        "peak_rss_gib": memory.peak_gib,
        "_completion_tokens": [r.tokens.completion for r in results],
    }


def run_ragflow(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Unconstrained generation on vLLM, json_repair, up to two retries (batched per attempt)."""
    import json_repair
    from vllm import LLM, SamplingParams

    from suffice.serving.machine import apply_settings, machine_settings
    from suffice.serving.vllm_engine import shutdown_llm

    settings = machine_settings(EngineConfig())
    apply_settings(settings)
    llm = LLM(
        model=str(resolve_model(None).path),
        enable_prefix_caching=True,
        enforce_eager=True,
        seed=0,
        dtype=settings.dtype,
    )
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    conversations = {i: [{"role": "user", "content": ragflow_prompt(r)}] for i, r in enumerate(items)}
    valid: dict[int, bool] = {}
    calls = retries = tokens = 0
    try:
        with PeakMemory() as memory:
            began = time.perf_counter()
            pending = list(conversations)
            for attempt in range(3):
                if not pending:
                    break
                outputs = llm.chat([conversations[i] for i in pending], params, use_tqdm=False)
                calls += len(pending)
                retries += len(pending) if attempt else 0
                failed = []
                for i, out in zip(pending, outputs, strict=True):
                    text = out.outputs[0].text
                    tokens += len(out.outputs[0].token_ids)
                    ok, why = seed_valid(json_repair.loads(text), items[i])
                    valid[i] = ok
                    if not ok:
                        conversations[i] = [
                            *conversations[i],
                            {"role": "assistant", "content": text},
                            {
                                "role": "user",
                                "content": f"Your output failed validation: {why}. Return the JSON again.",
                            },
                        ]
                        failed.append(i)
                pending = failed
            seconds = time.perf_counter() - began
    finally:
        shutdown_llm(llm)
    return {
        "items": len(items),
        "seconds": seconds,
        "verdicts_per_s": len(items) / seconds,
        "share_valid": sum(valid.values()) / len(items),
        "retries": retries,
        "output_tokens_per_verdict": tokens / len(items),
        "engine_calls": calls,
        "peak_rss_gib": memory.peak_gib,
    }


def run_transformers_loop(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What a user writes first: outlines.from_transformers, the seed's JSON schema, one item at a time."""
    import outlines
    import torch
    from outlines.inputs import Chat
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(None).path
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = outlines.from_transformers(
        AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32), tokenizer
    )
    with PeakMemory() as memory:
        began = time.perf_counter()
        generator = outlines.Generator(model, outlines.types.JsonSchema(RAGFLOW_SCHEMA))
        valid = tokens = 0
        for record in items:
            text = generator(Chat([{"role": "user", "content": ragflow_prompt(record)}]), max_new_tokens=MAX_TOKENS)
            tokens += len(tokenizer(text)["input_ids"])
            with contextlib.suppress(json.JSONDecodeError):
                valid += seed_valid(json.loads(text), record)[0]
        seconds = time.perf_counter() - began
    del model
    gc.collect()
    return {
        "items": len(items),
        "seconds": seconds,
        "verdicts_per_s": len(items) / seconds,
        "share_valid": valid / len(items),
        "retries": 0,
        "output_tokens_per_verdict": tokens / len(items),
        "peak_rss_gib": memory.peak_gib,
    }


def constraint_overhead(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The gate's requests generated constrained, then unconstrained to the same lengths, same engine."""
    from vllm import SamplingParams

    judge = Judge.open(JudgeConfig(engine=EngineConfig(backend="outlines", top_logprobs=0)))
    engine = judge.engine
    try:
        requests = judge.requests(items)
        engine.generate(requests[:2])  # warm-up
        began = time.perf_counter()
        generations = engine.generate(requests)
        constrained = time.perf_counter() - began
        params = [
            SamplingParams(
                temperature=0.0, max_tokens=g.completion_tokens, min_tokens=g.completion_tokens, ignore_eos=True
            )
            for g in generations
        ]
        began = time.perf_counter()
        engine._llm.chat([list(r.messages) for r in requests], params, use_tqdm=False)  # type: ignore[attr-defined]
        free = time.perf_counter() - began
    finally:
        judge.close()
    return {
        "requests": len(requests),
        "constrained_s": constrained,
        "unconstrained_same_length_s": free,
        "overhead_ratio": constrained / free,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=120)
    parser.add_argument("--loop-items", type=int, default=12, help="items for the slow one-at-a-time loop")
    args = parser.parse_args()
    items = load_items(args.items, seed=1)
    rows = []
    print(f"[suffice] {len(items)} items ...", file=sys.stderr)
    suffice = run_suffice(items)
    rows.append({"method": "suffice (vLLM, one batch, regex constraint)", **suffice})
    print("[ragflow] ...", file=sys.stderr)
    rows.append({"method": "RAGFlow: vLLM unconstrained + json_repair + 2 retries", **run_ragflow(items)})
    print(f"[transformers loop] {args.loop_items} items ...", file=sys.stderr)
    rows.append(
        {
            "method": f"transformers + Outlines JSON schema, one at a time ({args.loop_items} items)",
            **run_transformers_loop(items[: args.loop_items]),
        }
    )
    base = rows[0]["verdicts_per_s"]
    for row in rows:
        row["speed_vs_suffice"] = row["verdicts_per_s"] / base
    print("[prefix caching off] ...", file=sys.stderr)
    no_cache = run_suffice(items, prefix_caching=False)
    print("[constraint overhead] ...", file=sys.stderr)
    suffice.pop("_completion_tokens")
    overhead = constraint_overhead(items)
    no_cache.pop("_completion_tokens")
    columns = [
        ("method", "method", ""),
        ("items", "items", "d"),
        ("verdicts_per_s", "verdicts/s", ".3f"),
        ("speed_vs_suffice", "vs suffice", ".3f"),
        ("share_valid", "valid", ".1%"),
        ("retries", "retries", "d"),
        ("output_tokens_per_verdict", "out tokens/verdict", ".0f"),
        ("peak_rss_gib", "peak RSS GiB", ".1f"),
    ]
    print(table(rows, columns))
    print()
    print(
        f"prefix caching: on {suffice['verdicts_per_s']:.3f} verdicts/s, off {no_cache['verdicts_per_s']:.3f} "
        f"(on/off = {suffice['verdicts_per_s'] / no_cache['verdicts_per_s']:.2f})"
    )
    print(
        f"constraint overhead: constrained {overhead['constrained_s']:.1f} s vs unconstrained same length "
        f"{overhead['unconstrained_same_length_s']:.1f} s (ratio {overhead['overhead_ratio']:.2f})"
    )
    path = write_json(
        "alternatives.json",
        {
            "command": " ".join(["benchmarks/bench_alternatives.py", *sys.argv[1:]]),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "rows": rows,
            "prefix_caching": {"on": suffice, "off": no_cache},
            "constraint_overhead": overhead,
        },
    )
    print(f"written to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
