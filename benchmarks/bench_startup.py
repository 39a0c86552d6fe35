"""Start-up: a one-record ``suffice judge`` beside vLLM itself building an engine for the same model and
answering one token, each a fresh process, side by side in one run.

Both processes get the same engine: the embedded model, the ``LLM`` arguments suffice passes
(``suffice.serving.vllm.lifecycle.llm_kwargs``: dtype, block size, backend, prefix caching, eager mode)
and the environment it sets (cores, KV cache, offline).  Wall time is taken here, from the
process's start to its exit.

Where the time goes is read from timestamps the processes log:

- suffice's own steps, from its ``suffice.serving.startup`` DEBUG lines (monotonic times; the suffice
  process is started with a handler on that logger, otherwise it is ``suffice judge`` itself);
- vLLM's steps (its engine process and worker process up, weights loaded, KV cache allocated
  and warmed up), from vLLM's own INFO lines, sent with their creation times to a file by a
  logging config given in ``VLLM_LOGGING_CONFIG_PATH`` (every vLLM process reads it);
- per segment of the first verdict, when it was queued, when its first token came (the
  constraint compiled and the prompt read) and when it ended.

Each step is the time since the previous one, so the rows sum to the wall time (the first
verdict's segments: queued to first token, first token to done, and the Python between them).

After the rounds: the same one-record job with ``--server`` against a ``suffice serve`` that has
judged a record already (what a warm service saves), and the first segment's constraint
compiled alone here (xgrammar, as vLLM calls it), to show how much of "constraint compiles and
prompt reading" is the compile.

    flock /tmp/suffice-engine.lock .venv/bin/python benchmarks/bench_startup.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_serve import start_server
from common import SAMPLE, table, write_json

from suffice.client import Client
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import apply_machine_config, gpu_build, machine_config
from suffice.serving.offline import force_offline
from suffice.serving.startup import LOGGER
from suffice.serving.vllm.lifecycle import llm_kwargs
from suffice.serving.weights import resolve_model

#: vLLM's log lines as this benchmark's logging config writes them: creation time, pid, message.
_VLLM_LINE = re.compile(r"^(\d+\.\d+) (\d+) (.*)$")
_MARK = re.compile(r"^start-up: (.+) at (\d+\.\d+)$")

#: The suffice process: ``suffice judge`` with a handler on the start-up logger writing to the file named first
#: (not to stderr: while vLLM starts, suffice sends descriptors 1 and 2 to the engine's log).
SUFFICE = f"""
import logging, sys, time
marks = sys.argv.pop(1)
with open(marks, "a") as file:
    file.write(f"start-up: interpreter up at {{time.monotonic():.6f}}\\n")
handler = logging.FileHandler(marks)
handler.setFormatter(logging.Formatter("%(message)s"))
log = logging.getLogger({LOGGER!r})
log.addHandler(handler)
log.setLevel(logging.DEBUG)
log.propagate = False
from suffice.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

#: vLLM alone: build the engine, answer one token, exit as a script does (marks to the file named first).
VLLM = """
import json, sys, time
def mark(step):
    with open(sys.argv[1], "a") as file:
        file.write(f"start-up: {step} at {time.monotonic():.6f}\\n")
mark("interpreter up")
from vllm import LLM, SamplingParams
mark("vllm imported")
llm = LLM(**json.loads(sys.argv[2]))
mark("engine ready")
llm.generate([sys.argv[3]], SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
mark("answered")
"""

#: The one-record job as a person would run it, less the progress bar (its lines would mix with the marks).
JUDGE_FLAGS = ("--overwrite", "--no-progress")

#: (row, how it ends) in order; a row whose end was not logged folds into the next.  The first verdict's
#: segments make three rows of their own (compile and prompt reading, decoding, the Python between them).
STEPS = [
    ("Python start", "interpreter up"),
    ("suffice imports (every gate)", "command line read"),
    ("input, settings check, torch import, model folder", "engine settings read"),
    ("vLLM import", "vllm imported"),
    ("engine process spawned (imports vLLM)", "core up"),
    ("worker process spawned (imports vLLM)", "worker up"),
    ("weights loaded", "weights loaded"),
    ("KV cache (profile, allocate, warm-up)", "kv cache"),
    ("engine ready (tokenizer, structured outputs)", "engine ready"),
    ("prompt fitting", "first segment queued"),
    ("first answer (prompt read, one token)", "answered"),
    ("rows written", "batch written"),
    ("shutdown", "engine closed"),
]
SEGMENTS = ["constraint compiles and prompt reading", "decoding", "Python between segments"]
#: Every row, in the order shown.
ROWS = [*[name for name, _ in STEPS[:10]], *SEGMENTS, *[name for name, _ in STEPS[10:]], "summary and exit"]


@contextmanager
def environment() -> Iterator[dict[str, str]]:
    """The environment suffice gives vLLM (restored here afterwards)."""
    saved = dict(os.environ)
    try:
        force_offline()
        apply_machine_config(machine_config(EngineConfig(), gpu=gpu_build()))
        yield dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def logging_config(path: Path, log: Path) -> Path:
    """A logging config for vLLM: its INFO lines with their creation times and pids, appended to ``log``."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"timed": {"format": "%(created).6f %(process)d %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log), "mode": "a", "formatter": "timed"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    path.write_text(json.dumps(config))
    return path


def run(command: list[str], env: dict[str, str], log: Path, marks: Path) -> dict[str, Any]:
    """Run ``command``; its wall time and the monotonic time of every step it (in ``marks``) and vLLM (in ``log``)
    logged."""
    log.unlink(missing_ok=True)
    marks.unlink(missing_ok=True)
    offset = time.time() - time.monotonic()
    began = time.monotonic()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, stderr = process.communicate()
    ended = time.monotonic()
    found = [_MARK.match(line.strip()) for line in marks.read_text().splitlines()] if marks.exists() else []
    return {
        "exit": process.returncode,
        "wall_s": ended - began,
        "began": began,
        "ended": ended,
        "marks": [(match.group(1), float(match.group(2))) for match in found if match],
        "events": vllm_events(log, process.pid, offset),
        "stderr_tail": stderr[-1500:] if process.returncode != 0 else "",
    }


def vllm_events(log: Path, main_pid: int, offset: float) -> dict[str, float]:
    """The monotonic times of vLLM's start-up steps in ``log`` (its lines carry wall-clock creation times)."""
    events: dict[str, float] = {}
    core: int | None = None
    if not log.exists():
        return events
    for line in log.read_text(errors="replace").splitlines():
        found = _VLLM_LINE.match(line)
        if not found:
            continue
        at, pid, message = float(found.group(1)) - offset, int(found.group(2)), found.group(3)
        if message.startswith("Initializing a V1 LLM engine") and core is None:
            core = pid
            events["core up"] = at
        elif pid not in (main_pid, core) and core is not None and "worker up" not in events:
            events["worker up"] = at
        if "Loading weights took" in message or "Model loading took" in message:
            events["weights loaded"] = max(at, events.get("weights loaded", at))
        if message.startswith("init engine (profile, create kv cache, warmup model) took"):
            events["kv cache"] = at
    return events


def breakdown(result: dict[str, Any]) -> dict[str, float]:
    """Seconds per step of one run, summing to its wall time."""
    marks: list[tuple[str, float]] = result["marks"]
    first: dict[str, float] = {}
    for step, at in marks:
        first.setdefault(step, at)
    ends = {**first, **result["events"]}
    queued = {s.removeprefix("segment queued "): t for s, t in marks if s.startswith("segment queued ")}
    first_token = {s.removeprefix("segment first token "): t for s, t in marks if s.startswith("segment first token ")}
    done = {s.removeprefix("segment done "): t for s, t in marks if s.startswith("segment done ")}
    compile_read = decode = 0.0
    if queued:
        ends["first segment queued"] = min(queued.values())
        for request, start in queued.items():
            end = done.get(request)
            if end is None:
                continue
            token = min(first_token.get(request, end), end)
            compile_read += token - start
            decode += end - token
    rows: dict[str, float] = {}
    previous = result["began"]
    for name, end_key in STEPS:
        at = ends.get(end_key)
        if at is None or at < previous:
            continue
        rows[name] = at - previous
        previous = at
        if end_key == "first segment queued" and done:
            last = max(done.values())
            rows[SEGMENTS[0]], rows[SEGMENTS[1]] = compile_read, decode
            rows[SEGMENTS[2]] = (last - previous) - compile_read - decode
            previous = last
    # vLLM alone shuts its engine down as the script exits; suffice has done so already.
    rows["shutdown" if "engine closed" not in ends else "summary and exit"] = result["ended"] - previous
    return rows


def to_engine_ready(result: dict[str, Any]) -> float:
    """Seconds from the process's start to its engine ready (``LLM`` built, in suffice the driver started too)."""
    steps = breakdown(result)
    names = [
        name for name, _ in STEPS[: STEPS.index(("engine ready (tokenizer, structured outputs)", "engine ready")) + 1]
    ]
    return sum(steps.get(name, 0.0) for name in names)


def compile_alone(record: dict[str, Any]) -> float | None:
    """Seconds to compile the first segment's constraint for ``record`` with xgrammar, as vLLM does (a cold
    compiler); ``None`` when xgrammar is not the default backend."""
    from suffice.config import DEFAULT_BACKEND

    if DEFAULT_BACKEND != "xgrammar":
        return None
    import xgrammar
    from transformers import AutoTokenizer

    from suffice.gates import make_gate

    gate = make_gate("sufficiency")
    item = gate.parse_item(record)
    pattern = gate.constraint_for(item.chunks).first_segment().pattern
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(None).path))
    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tokenizer), max_threads=8)
    began = time.monotonic()
    compiler.compile_regex(pattern)
    return time.monotonic() - began


def through_warm_service(folder: Path, other: dict[str, Any]) -> float:
    """Seconds of the same one-record ``suffice judge``, with ``--server``, against a ``suffice serve`` that has
    judged ``other`` already (its engine started, its constraint compiled)."""
    process, url = start_server(None)
    try:
        with Client(url) as client:
            client.judge(other)
        command = [sys.executable, "-m", "suffice.cli.main", "judge", str(folder / "one.jsonl")]
        began = time.monotonic()
        done = subprocess.run(
            [*command, "-o", str(folder / "served.jsonl"), "--server", url, *JUDGE_FLAGS],
            capture_output=True,
            text=True,
        )
        took = time.monotonic() - began
    finally:
        process.terminate()
        process.wait(120)
    if done.returncode != 0:
        raise SystemExit(f"suffice judge --server failed (exit {done.returncode}):\n{done.stderr[-1500:]}")
    return took


def one_round(folder: Path, record: dict[str, Any], vllm_first: bool) -> dict[str, dict[str, Any]]:
    source = folder / "one.jsonl"
    source.write_text(json.dumps(record) + "\n")
    config = EngineConfig()
    plain = dict(os.environ)  # suffice sets its own
    with environment() as env:
        settings = machine_config(config, gpu=gpu_build())
        kwargs = llm_kwargs(config, settings, resolve_model(None))
        legs = {
            "suffice judge": (
                [sys.executable, "-c", SUFFICE, "judge", str(source), "-o", str(folder / "out.jsonl"), *JUDGE_FLAGS],
                plain,
                folder / "suffice-vllm.log",
            ),
            "vLLM alone": (
                [sys.executable, "-c", VLLM, json.dumps(kwargs), record["question"]],
                env,
                folder / "vllm.log",
            ),
        }
    order = ["vLLM alone", "suffice judge"] if vllm_first else ["suffice judge", "vLLM alone"]
    results: dict[str, dict[str, Any]] = {}
    for name in order:
        command, leg_env, log = legs[name]
        leg_env = {**leg_env, "VLLM_LOGGING_CONFIG_PATH": str(logging_config(folder / f"{log.stem}.json", log))}
        marks = folder / f"{log.stem}.marks"
        results[name] = run([*command[:3], str(marks), *command[3:]], leg_env, log, marks)
        if results[name]["exit"] != 0:
            raise SystemExit(f"{name} failed (exit {results[name]['exit']}):\n{results[name]['stderr_tail']}")
        print(f"{name}: {results[name]['wall_s']:.1f} s", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each order alternated (default 1)")
    args = parser.parse_args()
    sample = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    record = sample[0]
    # The warm service has judged a record with as many chunks: every segment's constraint is compiled, while
    # the timed record's prompt is not in its prefix cache.
    other = next(r for r in sample[1:] if len(r["chunks"]) == len(record["chunks"]))
    # The page cache holds vLLM's and torch's files for every leg, the first too.
    subprocess.run([sys.executable, "-c", "import vllm"], check=True, capture_output=True)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            rounds.append(one_round(Path(tmp), record, vllm_first=number % 2 == 0))
        served_s = through_warm_service(Path(tmp), other)
    suffice_s = statistics.median(r["suffice judge"]["wall_s"] for r in rounds)
    vllm_s = statistics.median(r["vLLM alone"]["wall_s"] for r in rounds)
    compiled = compile_alone(record)
    shown = min(rounds, key=lambda r: abs(r["suffice judge"]["wall_s"] - suffice_s))
    ours, theirs = breakdown(shown["suffice judge"]), breakdown(shown["vLLM alone"])
    rows = [
        {"step": name, "suffice_s": ours.get(name), "vllm_s": theirs.get(name)}
        for name in ROWS
        if name in ours or name in theirs
    ]
    rows.append({"step": "wall time", "suffice_s": sum(ours.values()), "vllm_s": sum(theirs.values())})
    print(
        table(
            rows,
            [
                ("step", "step", ""),
                ("suffice_s", "suffice judge, 1 record (s)", ".1f"),
                ("vllm_s", "vLLM alone, 1 token (s)", ".1f"),
            ],
        )
    )
    ready = {
        name: statistics.median(to_engine_ready(r[name]) for r in rounds) for name in ("suffice judge", "vLLM alone")
    }
    print(
        f"\nwall time (median of {args.rounds}): suffice judge {suffice_s:.1f} s, vLLM alone {vllm_s:.1f} s, "
        f"ratio {suffice_s / vllm_s:.2f}x"
    )
    print(
        f"to the engine ready (median of {args.rounds}): suffice judge {ready['suffice judge']:.1f} s, "
        f"vLLM alone {ready['vLLM alone']:.1f} s, ratio {ready['suffice judge'] / ready['vLLM alone']:.2f}x"
    )
    print(f"the same job through a warm `suffice serve` (judge --server): {served_s:.1f} s")
    if compiled is not None:
        print(f"the first segment's constraint compiled alone (xgrammar, cold): {compiled:.1f} s")
    path = write_json(
        "startup.json",
        {
            "argv": sys.argv[1:],
            "suffice_s": suffice_s,
            "vllm_s": vllm_s,
            "ratio": suffice_s / vllm_s,
            "to_engine_ready": {
                "suffice_s": ready["suffice judge"],
                "vllm_s": ready["vLLM alone"],
                "ratio": ready["suffice judge"] / ready["vLLM alone"],
            },
            "warm_service_s": served_s,
            "first_segment_compile_s": compiled,
            "breakdown": rows,
            "rounds": [
                {name: {"wall_s": leg["wall_s"], "steps": breakdown(leg)} for name, leg in one.items()}
                for one in rounds
            ],
        },
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
