"""Throughput against this machine's prefill roofline, full verdicts beside decision-only.

One engine on ``--backend``; the same items from ``../shared/data`` judged with the
full verdict, then with ``--detail decision``.  For each: verdicts per second and
prompt tokens per second over the whole run (prefill and decode), and that rate as
a share of the prefill roofline computed here, at run time:

    peak FLOP/s  = cores in the affinity mask x clock x FMA units (2) x 2 x SIMD lanes
                   (lanes: 16 with AVX-512, 8 with AVX2, 4 otherwise; x2 when the CPU has
                   native bfloat16 and the engine computes in it)
    FLOPs/token  = 2 x the model's non-embedding parameters (prefill computes no logits
                   but the last position's; attention's quadratic term is left out)
    roofline     = peak FLOP/s / FLOPs per token   (prompt tokens per second)

Prompt tokens include those the prefix cache serves (the shared instructions), as a
user counts them; the roofline is what a machine could prefill with no cache at all.

That roofline counts compute only, but decoding on a CPU is bound by memory
bandwidth: each output token reads its sequence's whole KV cache (SmolLM2 in float32:
46 KB a token of context, about 90 MB a step for a 2,000-token prompt).  So the
benchmark also measures the machine's copy bandwidth (torch, all cores in the
affinity mask, before the engine starts) and prints the share a run could reach at
best, with prefill at the compute roofline and decode at that bandwidth:

    decode bytes  >= items x output tokens x (prompt + output / 2) x KV bytes a token
                     (weights read once a step, shared by the batch, left out)
    attainable    =  (prompt tokens / roofline) / (that + decode bytes / bandwidth)

and each run's share of it.

Neither roofline says what the matrix library reaches on this model's shapes, so
the benchmark also times torch's own ``linear`` on every projection of one layer
(QKV, output, gate and up, down; vLLM fuses them the same way) for a chunk of
``--gemm-tokens`` prompt tokens, in the engine's compute dtype on the same cores,
and counts attention's quadratic term for the run's mean prompt length (each
prompt token attends to half its prompt on average: 2 x prompt x heads x head size
FLOPs a layer, which the roofline leaves out):

    GEMM ceiling  = (FLOPs of the projections / their time) / (2 x non-embedding
                    parameters + attention's FLOPs a token), as a share of the roofline

the share prefill alone could reach if every projection ran at torch's speed and
attention cost no more than its FLOPs at that speed.

    .venv/bin/python benchmarks/bench_throughput.py --items 240
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import time
from pathlib import Path
from typing import Any

from common import load_items, report

from suffice.config import BACKENDS, DEFAULT_BACKEND, JudgeConfig
from suffice.gates import DecisionGate
from suffice.gates.sufficiency import SufficiencyGate
from suffice.judge import Judge
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import cpu_flags
from suffice.serving.vllm_engine import VLLMEngine


def parameter_counts(folder: Path) -> tuple[int, int]:
    """(all parameters, embedding parameters) from the safetensors headers (no tensor is loaded)."""
    total = embedding = 0
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in meta["shape"]:
                count *= dim
            total += count
            if "embed" in name:
                embedding += count
    return total, embedding


def clock_ghz() -> float:
    """The highest clock the kernel reports (``cpu MHz`` lines), in GHz."""
    best = 0.0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                best = max(best, float(line.split(":")[1]))
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError, ValueError):
        best = max(best, int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1000)
    return best / 1000 if best else 2.0


def roofline(folder: Path, dtype: str) -> dict[str, Any]:
    flags = cpu_flags()
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    bf16 = dtype != "float32" and any(f in flags for f in ("avx512_bf16", "amx_bf16"))
    cores = len(os.sched_getaffinity(0))
    ghz = clock_ghz()
    peak = cores * ghz * 1e9 * 2 * 2 * lanes * (2 if bf16 else 1)
    total, embedding = parameter_counts(folder)
    per_token = 2 * (total - embedding)
    return {
        "cores": cores,
        "clock_ghz": ghz,
        "simd_lanes_fp32": lanes,
        "native_bf16": bf16,
        "compute_dtype": dtype,
        "peak_gflops": peak / 1e9,
        "parameters": total,
        "non_embedding_parameters": total - embedding,
        "roofline_prompt_tokens_per_s": peak / per_token,
    }


def copy_bandwidth_gbs(mib: int = 512, repeats: int = 5) -> float:
    """Memory bandwidth (GB/s, read and write counted) of a large copy: the best of a few."""
    import torch

    source = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    target.copy_(source)  # first touch
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - began)
    return 2 * source.numel() * 4 / best / 1e9


def layer_shapes(folder: Path) -> tuple[list[tuple[int, int]], int, int]:
    """Each projection of one decoder layer as (inputs, outputs), the attention
    width (heads x head size) and the number of layers, from config.json."""
    config = json.loads((folder / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads", heads)
    ffn = config["intermediate_size"]
    shapes = [
        (hidden, (heads + 2 * kv_heads) * head_dim),  # QKV, fused
        (heads * head_dim, hidden),  # output
        (hidden, 2 * ffn),  # gate and up, fused
        (ffn, hidden),  # down
    ]
    return shapes, heads * head_dim, config["num_hidden_layers"]


def gemm_gflops(folder: Path, dtype: str, tokens: int, repeats: int = 10) -> float:
    """What torch's ``linear`` reaches on one layer's projections for ``tokens`` rows
    (GFLOP/s over all four, the best of ``repeats`` passes), on this process's cores."""
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    kind = torch.float32 if dtype == "float32" else torch.bfloat16
    shapes, _, _ = layer_shapes(folder)
    pairs = [(torch.randn(tokens, k, dtype=kind), torch.randn(n, k, dtype=kind)) for k, n in shapes]
    flops = sum(2 * tokens * k * n for k, n in shapes)
    best = float("inf")
    for _ in range(repeats + 2):  # two passes to warm up
        began = time.perf_counter()
        for x, w in pairs:
            torch.nn.functional.linear(x, w)
        best = min(best, time.perf_counter() - began)
    return flops / best / 1e9


def gemm_ceiling(folder: Path, roof: dict[str, Any], gflops: float, prompt_tokens: float) -> float:
    """The share of the roofline prefill could reach at torch's GEMM speed, attention's
    quadratic term counted for prompts of ``prompt_tokens`` (module docstring)."""
    _, width, layers = layer_shapes(folder)
    per_token = 2 * roof["non_embedding_parameters"] + 2 * prompt_tokens * width * layers
    return gflops * 1e9 / per_token / roof["roofline_prompt_tokens_per_s"]


def kv_bytes_per_token(folder: Path, dtype: str) -> int:
    """KV cache bytes one token of context takes, from the model's config.json."""
    config = json.loads((folder / "config.json").read_text())
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    width = 4 if dtype == "float32" else 2
    return 2 * config["num_hidden_layers"] * config.get("num_key_value_heads", heads) * head_dim * width


def attainable_share(row: dict[str, Any], rate: float, kv_per_token: int, bandwidth_gbs: float) -> float:
    """The best share of the compute roofline this run's tokens allow (module docstring)."""
    n = row["items"]
    prompt, output = row["prompt_tokens"] / n, row["output_tokens"] / n
    decode_bytes = n * output * (prompt + output / 2) * kv_per_token
    prefill_s = row["prompt_tokens"] / rate
    return prefill_s / (prefill_s + decode_bytes / (bandwidth_gbs * 1e9))


def run(judge: Judge, items: list[dict[str, Any]], label: str, roof: float) -> dict[str, Any]:
    prompt_before = judge.stats.prompt_tokens
    completion_before = judge.stats.completion_tokens
    began = time.perf_counter()
    results = judge.judge_batch(items)
    seconds = time.perf_counter() - began
    prompt = judge.stats.prompt_tokens - prompt_before
    return {
        "mode": label,
        "items": len(items),
        "verdicts": sum(r.verdict is not None for r in results),
        "seconds": seconds,
        "verdicts_per_s": len(items) / seconds,
        "prompt_tokens": prompt,
        "output_tokens": judge.stats.completion_tokens - completion_before,
        "prompt_tokens_per_s": prompt / seconds,
        "share_of_roofline": prompt / seconds / roof,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS)
    parser.add_argument("--compile", action="store_true", help="let vLLM compile the model (slower start)")
    parser.add_argument("--gemm-tokens", type=int, default=2048, help="prompt tokens a timed projection multiplies")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="the engine's compute dtype")
    args = parser.parse_args()
    items = load_items(args.items)
    bandwidth = copy_bandwidth_gbs()
    engine_config = EngineConfig(backend=args.backend, enforce_eager=not args.compile, dtype=args.dtype)
    config = JudgeConfig(engine=engine_config)
    began = time.perf_counter()
    engine = VLLMEngine(config.engine)
    startup = time.perf_counter() - began
    try:
        roof = roofline(engine.model_path, engine.settings.dtype)
        rate = roof["roofline_prompt_tokens_per_s"]
        decision = run(Judge(engine, DecisionGate(SufficiencyGate()), config), items, "decision only", rate)
        full = run(Judge(engine, SufficiencyGate(), config), items, "full verdict", rate)
    finally:
        engine.close()
    rows = [full, decision]
    kv = kv_bytes_per_token(engine.model_path, engine.settings.dtype)
    # After the engine has gone: its threads would share the cores with the timing.
    gemm = gemm_gflops(engine.model_path, engine.settings.dtype, args.gemm_tokens)
    for row in rows:
        row["vs_full"] = row["verdicts_per_s"] / full["verdicts_per_s"]
        row["attainable_share"] = attainable_share(row, rate, kv, bandwidth)
        row["share_of_attainable"] = row["share_of_roofline"] / row["attainable_share"]
        row["gemm_ceiling"] = gemm_ceiling(engine.model_path, roof, gemm, row["prompt_tokens"] / row["items"])
    print(
        f"roofline: {roof['cores']} cores x {roof['clock_ghz']:.2f} GHz x 2 FMA x 2 x {roof['simd_lanes_fp32']} lanes"
        f"{' x 2 (bf16)' if roof['native_bf16'] else ''} = {roof['peak_gflops']:.0f} GFLOP/s; "
        f"{roof['non_embedding_parameters'] / 1e6:.0f} M non-embedding parameters -> "
        f"{rate:,.0f} prompt tokens/s; engine start-up {startup:.0f} s"
    )
    print(f"copy bandwidth {bandwidth:.1f} GB/s; KV cache {kv / 1024:.1f} KiB a token of context")
    print(
        f"torch linear on one layer's projections, {args.gemm_tokens} tokens: {gemm:.0f} GFLOP/s "
        f"({gemm / roof['peak_gflops']:.0%} of peak)"
    )
    columns = [
        ("mode", "mode", ""),
        ("items", "items", "d"),
        ("seconds", "seconds", ".0f"),
        ("verdicts_per_s", "verdicts/s", ".2f"),
        ("vs_full", "vs full", ".2f"),
        ("prompt_tokens", "prompt tokens", ",d"),
        ("output_tokens", "output tokens", ",d"),
        ("prompt_tokens_per_s", "prompt tokens/s", ",.0f"),
        ("share_of_roofline", "% of roofline", ".0%"),
        ("attainable_share", "attainable % (bandwidth-bound decode)", ".0%"),
        ("share_of_attainable", "% of attainable", ".0%"),
        ("gemm_ceiling", "GEMM ceiling % (prefill at torch's speed)", ".0%"),
    ]
    report(
        "throughput.json" if args.dtype is None else f"throughput_{args.dtype}.json",
        rows,
        columns,
        backend=args.backend,
        startup_s=startup,
        roofline=roof,
        copy_bandwidth_gbs=bandwidth,
        gemm_gflops=gemm,
        gemm_tokens=args.gemm_tokens,
        kv_bytes_per_token=kv,
    )


if __name__ == "__main__":
    main()
