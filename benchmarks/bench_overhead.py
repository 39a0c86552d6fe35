"""What the constraint costs: warm overhead per backend, and cold (compile) cost per gate.

For each backend, one engine:

* **cold cost per gate**: one request of each gate on a fresh engine (the gate's
  head segment is compiled inside it), then the same request again (warm); the
  difference is the compile cost.
* **warm overhead**: the gate's requests for ``--items`` items generated under the
  constraint (segments and all), then the same prompts generated without any
  constraint to exactly the same number of decoded tokens per request
  (``min_tokens`` = ``max_tokens``, end-of-sequence ignored), both after a warm-up
  and both from an emptied prefix cache (the first version of this benchmark ran the
  unconstrained leg on prompts the constrained leg had just cached, so it skipped
  their prefill and the overhead read +134 %).  The unconstrained leg asks for no
  log-probabilities (the constrained one asks for them at the decision only), so
  they count against the constraint.  The ratio is the overhead: mask computation,
  the extra step of each segment, and the decision the backend makes per token.
  Prefilled segment prefixes are not decoded, so they are not in the unconstrained
  leg's count; a third leg decodes the whole verdict's length unconstrained (what
  the same output would take without a constraint to prefill it).
  ``--rounds`` repeats the legs, alternating which goes first, and reports medians:
  on this shared 2-core machine the same leg varied by up to 20 % between two runs,
  so one pair of legs cannot resolve a 5 % bound.
* **CPU time**: every leg also reports the CPU seconds of this process and the
  engine's (user and system), and the overhead in CPU time.  The legs take the same
  number of engine steps (296 for 12 items, counted), so the constraint's cost is work
  per step; CPU time was meant to measure it without the wall time's swings.  It does
  not here: vLLM's OpenMP threads spin while they wait, so CPU time is about twice the
  wall time and swings with it (2026-12-02, 12 items: +11.0 % and +6.8 % in wall time,
  +10.8 % and +6.8 % in CPU time; an earlier single pair read +1.1 % in both, its
  unconstrained leg 12 s slower than this run's).  The segment transitions computed
  778 prompt tokens more than the unconstrained leg (13,330 against 12,552).
* **prefill only**: the same prompts with one output token, for scale.

    .venv/bin/python benchmarks/bench_overhead.py --items 16 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psutil
from common import load_items, report

from suffice.config import BACKENDS, JudgeConfig
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from suffice.serving.engine_config import EngineConfig
from suffice.serving.vllm.engine import VLLMEngine


def _recovery_item(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "response": str(item.get("answer") or "It is not known.") + " This is well documented."}


def _cpu_s(engine: VLLMEngine) -> float:
    """CPU seconds (user and system) used so far by this process and the engine's."""
    total = 0.0
    for process in [psutil.Process(), *engine._life.processes]:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def _unconstrained(engine: VLLMEngine, requests: list[GenerationRequest], lengths: list[int]) -> tuple[float, float]:
    """Wall and CPU seconds of generating ``lengths`` tokens per prompt, unconstrained."""
    from vllm import SamplingParams, TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=engine.prompt_ids(r.messages)) for r in requests]
    params = [SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True) for n in lengths]
    _empty_cache(engine)
    cpu = _cpu_s(engine)
    began = time.perf_counter()
    engine._llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - began, _cpu_s(engine) - cpu


def _empty_cache(engine: VLLMEngine) -> None:
    """Forget every cached prompt block, so each timed leg computes its prompts."""
    if not engine._llm.reset_prefix_cache():
        raise RuntimeError("vLLM could not reset its prefix cache (requests still running?)")


def _prefill_only(engine: VLLMEngine, requests: list[GenerationRequest]) -> float:
    return _unconstrained(engine, requests, [1] * len(requests))[0]


def run_backend(backend: str, items: list[dict[str, Any]], rounds: int, *, whole_leg: bool = True) -> dict[str, Any]:
    config = JudgeConfig(engine=EngineConfig(backend=backend))
    engine = VLLMEngine(config.engine)
    try:
        row: dict[str, Any] = {"backend": backend}
        probes = {
            "sufficiency": items[0],
            "recovery": _recovery_item(items[0]),
            "adequacy": items[0],
        }
        for gate, record in probes.items():
            judge = Judge(
                engine,
                gate,
                JudgeConfig(
                    gate=gate,
                    engine=EngineConfig(backend=backend),
                    options={"rubric": "customer-support"} if gate == "adequacy" else {},
                ),
            )
            began = time.perf_counter()
            judge.judge_batch([record])
            cold = time.perf_counter() - began
            began = time.perf_counter()
            judge.judge_batch([record])
            warm = time.perf_counter() - began
            row[f"cold_{gate}_s"] = cold
            row[f"compile_{gate}_s"] = max(cold - warm, 0.0)

        judge = Judge(engine, "sufficiency", config)
        requests = judge.requests(items)
        judge.judge_batch(items[:4])  # warm-up: every segment pattern seen at least once
        legs: dict[str, list[float]] = {"constrained": [], "unconstrained": [], "whole": []}
        cpu: dict[str, list[float]] = {"constrained": [], "unconstrained": [], "whole": []}
        decoded: list[int] = []
        whole: list[int] = []
        valid = 0.0
        for round_ in range(rounds):

            def constrained() -> None:
                nonlocal decoded, whole, valid
                _empty_cache(engine)
                used = _cpu_s(engine)
                began = time.perf_counter()
                generations = engine.generate(requests)
                legs["constrained"].append(time.perf_counter() - began)
                cpu["constrained"].append(_cpu_s(engine) - used)
                decoded = [max(g.completion_tokens, 1) for g in generations]
                whole = [max(len(engine.text_ids(g.text)), 1) for g in generations]
                valid = sum(r.constraint.matches(g.text) for r, g in zip(requests, generations, strict=True)) / len(
                    requests
                )

            def free() -> None:
                for leg, lengths in [("unconstrained", decoded), *([("whole", whole)] if whole_leg else [])]:
                    wall, used = _unconstrained(engine, requests, lengths)
                    legs[leg].append(wall)
                    cpu[leg].append(used)

            # The unconstrained legs need the constrained leg's lengths: the first round
            # starts constrained, later rounds alternate (the lengths are the same at
            # temperature 0, checked below).
            order = (constrained, free) if round_ % 2 == 0 or not decoded else (free, constrained)
            before = list(decoded)
            for leg in order:
                leg()
            print(
                f"{backend} round {round_ + 1}/{rounds}: "
                + ", ".join(
                    f"{name} {times[-1]:.1f} s ({cpu[name][-1]:.1f} CPU s)" for name, times in legs.items() if times
                ),
                flush=True,
            )
            if before and before != decoded:
                print(f"warning: round {round_ + 1} decoded other lengths than the round before")
        prefill = _prefill_only(engine, requests)
        ratios = [c / u for c, u in zip(legs["constrained"], legs["unconstrained"], strict=True)]
        ratios_whole = [c / u for c, u in zip(legs["constrained"], legs["whole"], strict=True)] if whole_leg else []
        ratios_cpu = [c / u for c, u in zip(cpu["constrained"], cpu["unconstrained"], strict=True)]
        row.update(
            {
                "items": len(requests),
                "rounds": rounds,
                "output_tokens": sum(decoded),
                "verdict_tokens": sum(whole),
                "constrained_s": statistics.median(legs["constrained"]),
                "unconstrained_s": statistics.median(legs["unconstrained"]),
                "whole_unconstrained_s": statistics.median(legs["whole"]) if whole_leg else None,
                "prefill_only_s": prefill,
                "overhead": statistics.median(ratios) - 1.0,
                "overhead_rounds": [r - 1.0 for r in ratios],
                "overhead_vs_whole": statistics.median(ratios_whole) - 1.0 if whole_leg else None,
                "overhead_cpu": statistics.median(ratios_cpu) - 1.0,
                "overhead_cpu_rounds": [r - 1.0 for r in ratios_cpu],
                "legs_s": legs,
                "legs_cpu_s": cpu,
                "valid": valid,
            }
        )
        return row
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="repeat the warm legs, alternating; medians")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument(
        "--whole",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also decode the whole verdict unconstrained each round (--no-whole: a third less time per round)",
    )
    args = parser.parse_args()
    items = load_items(args.items)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    columns = [
        ("backend", "backend", ""),
        ("items", "items", "d"),
        ("rounds", "rounds", "d"),
        ("output_tokens", "decoded tokens", "d"),
        ("verdict_tokens", "verdict tokens", "d"),
        ("constrained_s", "constrained s", ".1f"),
        ("unconstrained_s", "same decoded tokens unconstrained s", ".1f"),
        ("overhead", "warm overhead (median)", "+.1%"),
        ("overhead_cpu", "warm overhead in CPU time (median)", "+.1%"),
        ("whole_unconstrained_s", "whole verdict unconstrained s", ".1f"),
        ("overhead_vs_whole", "vs whole verdict", "+.1%"),
        ("prefill_only_s", "prefill only s", ".1f"),
        ("valid", "valid", ".0%"),
        ("compile_sufficiency_s", "compile sufficiency s", ".1f"),
        ("compile_recovery_s", "compile recovery s", ".1f"),
        ("compile_adequacy_s", "compile adequacy s", ".1f"),
    ]
    rows: list[dict[str, Any]] = []
    for backend in args.backends:
        rows.append(run_backend(backend, items, args.rounds, whole_leg=args.whole))
        # Each backend takes 10-20 minutes here: its row is written as soon as it is
        # measured, so a run cut short keeps what it finished.
        report("overhead.json", rows, columns)


if __name__ == "__main__":
    main()
