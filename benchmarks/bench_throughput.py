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

Where the time goes: each leg also records, in vLLM's own processes, what ran when
(``breakdown.py``: prefill, decode, round trips between constrained segments, the
grammar bitmask, sampling, vLLM's and suffice's Python, idle time and what is left,
summing to the wall time), prints it as a table and writes it to the JSON with the
token counts behind it, each process's CPU seconds and what other processes on the
machine took meanwhile (a shared machine).  "% of attainable, forward passes alone"
is the share the run would reach if nothing but its forward passes took time: the
engine's own ceiling, whatever suffice does around it.

``--dtype both`` judges the same items on a float32 engine, then a bfloat16 one, and
prints their ratios and the largest gap between their decision probabilities.  The
bfloat16 roofline doubles float32's lanes; on a CPU with AMX torch's ``linear`` goes
past it (its GEMM ceiling reads over 100 %), so bfloat16 shares of it are upper bounds.

    .venv/bin/python benchmarks/bench_throughput.py --items 240 --modes full
    .venv/bin/python benchmarks/bench_throughput.py --items 48 --dtype both
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from breakdown import BLOCKING_WAIT, ROWS, Breakdown, use_site
from common import load_items, report, table

from suffice.config import BACKENDS, DEFAULT_BACKEND, JudgeConfig
from suffice.gates import DecisionGate
from suffice.gates.sufficiency import SufficiencyGate
from suffice.judge import Judge
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import cpu_flags
from suffice.serving.vllm.engine import VLLMEngine


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


def run(
    judge: Judge, items: list[dict[str, Any]], label: str, roof: float, breakdown: Breakdown | None, engine: VLLMEngine
) -> dict[str, Any]:
    prompt_before = judge.stats.prompt_tokens
    completion_before = judge.stats.completion_tokens
    began = time.perf_counter()
    if breakdown is not None:
        results = breakdown.measure(lambda: judge.judge_batch(items), engine._life.processes)
    else:
        results = judge.judge_batch(items)
    seconds = time.perf_counter() - began
    prompt = judge.stats.prompt_tokens - prompt_before
    row: dict[str, Any] = {
        "mode": label,
        "dtype": engine.settings.dtype,
        "items": len(items),
        "verdicts": sum(r.verdict is not None for r in results),
        "seconds": seconds,
        "verdicts_per_s": len(items) / seconds,
        "prompt_tokens": prompt,
        "output_tokens": judge.stats.completion_tokens - completion_before,
        "prompt_tokens_per_s": prompt / seconds,
        "share_of_roofline": prompt / seconds / roof,
    }
    if breakdown is not None:
        row["breakdown"] = {
            "wall_s": breakdown.wall,
            "seconds": breakdown.rows(),
            "details": breakdown.details,
            "forward_tokens": breakdown.tokens,
            "step_model": breakdown.step_model,
            "decode_steps": {str(n): {"passes": c, "mean_s": s} for n, (c, s) in breakdown.decode_steps.items()},
            "cpu_s": breakdown.cpu,
            "other_processes_cpu_s": breakdown.others_cpu,
        }
        probabilities = [getattr(r.verdict, "p_sufficient", getattr(r.verdict, "probability", None)) for r in results]
        row["decision_probabilities"] = {r.id: p for r, p in zip(results, probabilities, strict=True)}
    return row


def judge_legs(
    dtype: str | None, args: argparse.Namespace, items: list[dict[str, Any]], breakdown: Breakdown | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One engine computing in ``dtype``; the modes asked for on ``items``, decision-only first."""
    config = JudgeConfig(engine=EngineConfig(backend=args.backend, enforce_eager=not args.compile, dtype=dtype))
    began = time.perf_counter()
    engine = VLLMEngine(config.engine)
    startup = time.perf_counter() - began
    rows = []
    try:
        if breakdown is not None:
            breakdown.install_suffice(engine)
        roof = roofline(engine.model_path, engine.settings.dtype)
        rate = roof["roofline_prompt_tokens_per_s"]
        gates = {"decision": DecisionGate(SufficiencyGate()), "full": SufficiencyGate()}
        labels = {"decision": "decision only", "full": "full verdict"}
        for mode in ("decision", "full"):
            if mode in args.modes:
                rows.append(run(Judge(engine, gates[mode], config), items, labels[mode], rate, breakdown, engine))
    finally:
        engine.close()
    roof["startup_s"] = startup
    roof["kv_bytes_per_token"] = kv_bytes_per_token(engine.model_path, engine.settings.dtype)
    # After the engine has gone: its threads would share the cores with the timing.
    roof["gemm_gflops"] = gemm_gflops(engine.model_path, engine.settings.dtype, args.gemm_tokens)
    roof["model_path"] = str(engine.model_path)
    return rows, roof


def attainable_columns(rows: list[dict[str, Any]], roof: dict[str, Any], bandwidth: float) -> None:
    """Add the roofline shares to each row of one engine (module docstring)."""
    rate = roof["roofline_prompt_tokens_per_s"]
    full = next((r for r in rows if r["mode"] == "full verdict"), None)
    folder = Path(roof["model_path"])
    for row in rows:
        row["vs_full"] = row["verdicts_per_s"] / full["verdicts_per_s"] if full is not None else None
        row["attainable_share"] = attainable_share(row, rate, roof["kv_bytes_per_token"], bandwidth)
        row["share_of_attainable"] = row["share_of_roofline"] / row["attainable_share"]
        row["gemm_ceiling"] = gemm_ceiling(folder, roof, roof["gemm_gflops"], row["prompt_tokens"] / row["items"])
        parts = row.get("breakdown")
        if parts is not None:
            forward = parts["seconds"]["prefill"] + parts["seconds"]["decode"]
            ideal = row["share_of_attainable"] * row["seconds"]
            # What the share could be if nothing but the forward passes took time: the engine's own ceiling.
            row["share_of_attainable_forward_only"] = ideal / forward if forward else None


def breakdown_table(rows: list[dict[str, Any]]) -> str:
    """The breakdown, one column per run: seconds and share of the wall time."""
    measured = [r for r in rows if "breakdown" in r]
    head = "| where the time goes | " + " | ".join(f"{r['mode']}, {r['dtype']} (s, %)" for r in measured) + " |"
    rule = "|---|" + "---|" * len(measured)
    lines = [head, rule]
    for name, meaning in ROWS:
        cells = []
        for r in measured:
            seconds = r["breakdown"]["seconds"][name]
            cells.append(f"{seconds:.1f} ({seconds / r['breakdown']['wall_s']:.0%})")
        lines.append(f"| {name}: {meaning} | " + " | ".join(cells) + " |")
    total = [f"{r['breakdown']['wall_s']:.1f}" for r in measured]
    lines.append("| wall | " + " | ".join(total) + " |")
    return "\n".join(lines)


def dtype_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """bfloat16 against float32, per mode, on the same items."""
    out = []
    for mode in ("full verdict", "decision only"):
        pair = {r["dtype"]: r for r in rows if r["mode"] == mode}
        if "float32" not in pair or "bfloat16" not in pair:
            continue
        f32, bf16 = pair["float32"], pair["bfloat16"]
        gaps = [
            abs(bf16["decision_probabilities"][k] - v)
            for k, v in f32.get("decision_probabilities", {}).items()
            if v is not None and bf16.get("decision_probabilities", {}).get(k) is not None
        ]
        out.append(
            {
                "mode": mode,
                "items": f32["items"],
                "float32_s": f32["seconds"],
                "bfloat16_s": bf16["seconds"],
                "speed_ratio": f32["seconds"] / bf16["seconds"],
                "float32_share_of_attainable": f32["share_of_attainable"],
                "bfloat16_share_of_attainable": bf16["share_of_attainable"],
                "probability_gap_max": max(gaps) if gaps else None,
                "probability_gap_mean": sum(gaps) / len(gaps) if gaps else None,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS)
    parser.add_argument("--compile", action="store_true", help="let vLLM compile the model (slower start)")
    parser.add_argument("--gemm-tokens", type=int, default=2048, help="prompt tokens a timed projection multiplies")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "both"),
        default=None,
        help="the engine's compute dtype (default: the engine's own choice); both: float32, then bfloat16, "
        "on the same items",
    )
    parser.add_argument("--modes", nargs="+", choices=("full", "decision"), default=["full", "decision"])
    parser.add_argument("--no-breakdown", action="store_true", help="do not record where the time goes")
    parser.add_argument("--out", default=None, help="results file name (default: from the arguments)")
    parser.add_argument(
        "--blocking-wait",
        action="store_true",
        help="an experiment: vLLM's processes block instead of spinning while they wait for each other "
        "(breakdown.py, BLOCKING_WAIT)",
    )
    args = parser.parse_args()
    if args.blocking_wait:
        os.environ[BLOCKING_WAIT] = "1"
        use_site()
    items = load_items(args.items)
    bandwidth = copy_bandwidth_gbs()
    breakdown = None if args.no_breakdown else Breakdown.start(Path(tempfile.mkdtemp(prefix="suffice-breakdown-")))
    dtypes: list[str | None] = ["float32", "bfloat16"] if args.dtype == "both" else [args.dtype]
    rows: list[dict[str, Any]] = []
    engines: list[dict[str, Any]] = []
    for dtype in dtypes:
        legs, roof = judge_legs(dtype, args, items, breakdown)
        attainable_columns(legs, roof, bandwidth)
        rows.extend(legs)
        engines.append(roof)
        print(
            f"{roof['compute_dtype']}: roofline {roof['cores']} cores x {roof['clock_ghz']:.2f} GHz x 2 FMA x 2 x "
            f"{roof['simd_lanes_fp32']} lanes{' x 2 (bf16)' if roof['native_bf16'] else ''} = "
            f"{roof['peak_gflops']:.0f} GFLOP/s; {roof['non_embedding_parameters'] / 1e6:.0f} M non-embedding "
            f"parameters -> {roof['roofline_prompt_tokens_per_s']:,.0f} prompt tokens/s; engine start-up "
            f"{roof['startup_s']:.0f} s; KV cache {roof['kv_bytes_per_token'] / 1024:.1f} KiB a token; torch linear "
            f"on one layer's projections, {args.gemm_tokens} tokens: {roof['gemm_gflops']:.0f} GFLOP/s "
            f"({roof['gemm_gflops'] / roof['peak_gflops']:.0%} of peak)"
        )
    print(f"copy bandwidth {bandwidth:.1f} GB/s")
    columns = [
        ("mode", "mode", ""),
        ("dtype", "dtype", ""),
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
        ("share_of_attainable_forward_only", "% of attainable, forward passes alone", ".0%"),
        ("gemm_ceiling", "GEMM ceiling % (prefill at torch's speed)", ".0%"),
    ]
    extra: dict[str, Any] = {}
    if breakdown is not None:
        print(breakdown_table(rows) + "\n")
        extra["breakdown_rows"] = dict(ROWS)
    ratios = dtype_ratios(rows)
    if ratios:
        print(
            table(
                ratios,
                [
                    ("mode", "mode", ""),
                    ("items", "items", "d"),
                    ("float32_s", "float32 s", ".0f"),
                    ("bfloat16_s", "bfloat16 s", ".0f"),
                    ("speed_ratio", "bfloat16 speed-up", ".2f"),
                    ("float32_share_of_attainable", "float32 % of attainable", ".0%"),
                    ("bfloat16_share_of_attainable", "bfloat16 % of attainable", ".0%"),
                    ("probability_gap_max", "largest probability gap", ".3f"),
                    ("probability_gap_mean", "mean probability gap", ".3f"),
                ],
            )
            + "\n"
        )
        extra["dtype_ratios"] = ratios
    name = args.out or "throughput{}{}.json".format(
        "" if len(args.modes) == 2 else "_" + args.modes[0],
        "_dtypes" if args.dtype == "both" else f"_{args.dtype}" if args.dtype else "",
    )
    report(
        name,
        rows,
        columns,
        backend=args.backend,
        blocking_wait=args.blocking_wait,
        engines=engines,
        copy_bandwidth_gbs=bandwidth,
        gemm_tokens=args.gemm_tokens,
        **extra,
    )


if __name__ == "__main__":
    main()
