"""suffice against what users would otherwise run, same model, same items, one run.

1. suffice on vLLM: the whole batch in one call, constrained by the gate's regex.
2. A first attempt: transformers + Outlines, one item at a time, with the seed's
   JSON schema (``outlines.from_transformers``).  Slow, so it runs on a subset and
   its per-item rate is reported as such.
3. RAGFlow's method: unconstrained generation on the same vLLM engine with RAGFlow's
   prompt, parsed with ``json_repair``, up to two retries with the error appended.
4. The peer a user would write on vLLM alone: RAGFlow's prompt with vLLM's own
   JSON-schema structured outputs (the seed's schema, ``RAGFLOW_SCHEMA``, xgrammar),
   the whole batch in one call, parsed with ``json.loads``; no retries.

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
from suffice.serving.weights import resolve_model

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


def run_vllm_peers(items: list[dict[str, Any]], ragflow: bool = True) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """RAGFlow's method (unless ``ragflow`` is false) and vLLM's own JSON-schema outputs, one engine (xgrammar for
    the schema)."""
    from vllm import LLM

    from suffice.serving.machine import apply_machine_config, machine_config
    from suffice.serving.vllm.lifecycle import shutdown_llm

    settings = machine_config(EngineConfig())
    apply_machine_config(settings)
    llm = LLM(
        model=str(resolve_model(None).path),
        enable_prefix_caching=True,
        enforce_eager=True,
        seed=0,
        dtype=settings.dtype,
        structured_outputs_config={"backend": "xgrammar"},
    )
    try:
        return (run_ragflow(llm, items) if ragflow else None), run_json_schema(llm, items)
    finally:
        shutdown_llm(llm)


def run_json_schema(llm: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    """vLLM's structured outputs with the seed's JSON schema: one batched call, ``json.loads``, no retries."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    # vLLM refuses the seed's schema with xgrammar ("features not supported": ``uniqueItems`` on the two id lists),
    # so the peer drops them, as a user would; the repeats it then allows are what ``seed_valid`` counts invalid.
    schema = {
        **RAGFLOW_SCHEMA,
        "properties": {
            name: {k: v for k, v in prop.items() if k != "uniqueItems"}
            for name, prop in RAGFLOW_SCHEMA["properties"].items()
        },
    }
    params = SamplingParams(
        temperature=0.0, max_tokens=MAX_TOKENS, structured_outputs=StructuredOutputsParams(json=schema)
    )
    conversations = [[{"role": "user", "content": ragflow_prompt(r)}] for r in items]
    llm.chat(conversations[:2], params, use_tqdm=False)  # warm-up: the schema's grammar compiled out of the timing
    valid = parsed = tokens = 0
    with PeakMemory() as memory:
        began = time.perf_counter()
        outputs = llm.chat(conversations, params, use_tqdm=False)
        seconds = time.perf_counter() - began
    for out, record in zip(outputs, items, strict=True):
        tokens += len(out.outputs[0].token_ids)
        try:
            data = json.loads(out.outputs[0].text)
        except ValueError:  # cut at max_tokens inside the object
            continue
        parsed += 1
        valid += seed_valid(data, record)[0]
    return {
        "items": len(items),
        "seconds": seconds,
        "verdicts_per_s": len(items) / seconds,
        "share_valid": valid / len(items),
        "share_parsed": parsed / len(items),
        "retries": 0,
        "output_tokens_per_verdict": tokens / len(items),
        "engine_calls": len(items),
        "peak_rss_gib": memory.peak_gib,
    }


def run_ragflow(llm: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Unconstrained generation on vLLM, json_repair, up to two retries (batched per attempt)."""
    import json_repair
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    conversations = {i: [{"role": "user", "content": ragflow_prompt(r)}] for i, r in enumerate(items)}
    valid: dict[int, bool] = {}
    calls = retries = tokens = 0
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
    parser.add_argument(
        "--peers-only",
        action="store_true",
        help="suffice against the vLLM peers only (no transformers loop, prefix caching off or constraint overhead)",
    )
    parser.add_argument(
        "--json-schema-only",
        action="store_true",
        help="suffice against vLLM's own JSON-schema outputs only (RAGFlow's retries take about 4 s an item here)",
    )
    args = parser.parse_args()
    args.peers_only = args.peers_only or args.json_schema_only
    items = load_items(args.items, seed=1)
    rows = []
    print(f"[suffice] {len(items)} items ...", file=sys.stderr)
    suffice = run_suffice(items)
    rows.append({"method": "suffice (vLLM, one batch, regex constraint)", **suffice})
    print("[ragflow, vLLM JSON schema] ...", file=sys.stderr)
    ragflow, json_schema = run_vllm_peers(items, ragflow=not args.json_schema_only)
    if ragflow is not None:
        rows.append({"method": "RAGFlow: vLLM unconstrained + json_repair + 2 retries", **ragflow})
    rows.append({"method": "vLLM JSON-schema outputs (seed schema, one batch)", **json_schema})
    if not args.peers_only:
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
    no_cache: dict[str, Any] | None = None
    overhead: dict[str, Any] | None = None
    if not args.peers_only:
        print("[prefix caching off] ...", file=sys.stderr)
        no_cache = run_suffice(items, prefix_caching=False)
        no_cache.pop("_completion_tokens")
        print("[constraint overhead] ...", file=sys.stderr)
        overhead = constraint_overhead(items)
    suffice.pop("_completion_tokens")
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
    if no_cache is not None and overhead is not None:
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
        "alternatives-json-schema.json"
        if args.json_schema_only
        else "alternatives-peers.json"
        if args.peers_only
        else "alternatives.json",
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
