"""Faults caused for real on ``suffice judge`` with the embedded model.

One input, one output, three runs in sequence (each a real process with its own
engine): the engine core is SIGKILLed mid-batch (the run must stop within seconds
with exit 1 and blame no record), then the CLI itself is SIGKILLed mid-run (nothing
lost, nothing doubled), then a rerun finishes: every input line exactly once, a
verdict for every good record and an error row naming the field for every hostile
line.

Two proofs of other modules ride on these runs, because each needs an in-process
engine start of its own otherwise (about 40 s of CI each): the first run is verbose
(``-v``: what ``judge`` tells of its settings and lets through of the engine's own log),
and the rerun is watched by strace in a network namespace with only loopback
(tests/test_no_network.py's in-process proof: every connect of every process).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from suffice.exceptions import EXIT_FATAL, EXIT_ITEM_ERRORS
from tests import test_no_network as network
from tests.batch.test_runner import WORST
from tests.conftest import load_records

pytestmark = pytest.mark.engine

GOOD = 24


def _args(source: Path, out: Path, progress: bool = False, verbose: bool = False) -> list[str]:
    """The same settings on every run (the resume check refuses others); the guidance backend and a KV cache
    size of its own are what the verbose run shows."""
    return [
        "judge",
        str(source),
        "-o",
        str(out),
        "--detail",
        "decision",
        "--batch-size",
        "4",
        "--backend",
        "guidance",
        "--kv-cache-gib",
        "1",
        *([] if progress else ["--no-progress"]),
        *(["-v"] if verbose else []),
    ]


def _lines(out: Path) -> int:
    return out.read_bytes().count(b"\n") if out.exists() else 0


def _start(source: Path, out: Path, verbose: bool = False) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "suffice.cli.main", *_args(source, out, verbose=verbose)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait_for_lines(proc: subprocess.Popen[bytes], out: Path, count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while _lines(out) < count:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "the run wrote nothing in time"
        time.sleep(0.05)


def _engine_core(proc: subprocess.Popen[bytes]) -> psutil.Process:
    for child in psutil.Process(proc.pid).children(recursive=True):
        if "EngineCore" in child.name() or "EngineCore" in " ".join(child.cmdline()[:1]):
            return child
    raise AssertionError("no VLLM::EngineCore process under the CLI")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Whatever a SIGKILLed CLI left behind (its engine processes) goes too."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    source, out = tmp / "in.jsonl", tmp / "out.jsonl"
    good = [json.dumps(r).encode() for r in load_records("squad2.jsonl", GOOD)]
    lines = good[:4] + WORST + good[4:]
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    found: dict[str, object] = {"lines": lines}

    # 1. The engine core dies mid-batch (a verbose run).
    proc = _start(source, out, verbose=True)
    try:
        _wait_for_lines(proc, out, 4)
        before = _lines(out)
        _engine_core(proc).kill()
        killed = time.monotonic()
        _, stderr = proc.communicate(timeout=300)
        found["dead_seconds"] = time.monotonic() - killed
        found["dead_status"] = proc.returncode
        found["dead_stderr"] = stderr.decode()
        found["dead_rows"] = [json.loads(x) for x in out.read_text().splitlines()]
        found["dead_rows_before_kill"] = before
    finally:
        _kill_group(proc)

    # 2. The CLI itself is SIGKILLed at a random point while it writes (the seed is in
    #    the failure message of the exactly-once test; SUFFICE_KILL_SEED replays one).
    seed = int(os.environ.get("SUFFICE_KILL_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    extra, delay = rng.randint(1, 8), rng.uniform(0.0, 2.0)
    found["kill_point"] = f"seed {seed}: {extra} rows past the first run, then {delay:.2f} s"
    proc = _start(source, out)
    try:
        _wait_for_lines(proc, out, len(found["dead_rows"]) + extra)
        time.sleep(delay)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        _kill_group(proc)

    # 3. The rerun completes the job (with its progress bar: the one in-process run
    #    whose stderr is checked for what a user sees), every connect watched where
    #    strace can watch (the test of it says why not, and fails in CI).
    found["left_for_rerun"] = len(lines) - _lines(out)
    trace = tmp / "trace"
    watched = network.strace_works() is None
    found["trace"] = trace if watched else None
    found["jailed"] = bool(network.jail_prefix()) if watched else False
    args = _args(source, out, progress=True)
    command = (
        network.command_line(str(network.STRACE), trace, args, jail=found["jailed"])
        if watched
        else [sys.executable, "-m", "suffice.cli.main", *args]
    )
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=network.suffice_env())
    _, stderr = proc.communicate(timeout=900)
    found["final_status"] = proc.returncode
    found["final_stderr"] = stderr.decode()
    found["final_rows"] = [json.loads(x) for x in out.read_text().splitlines()]
    return found


def test_a_dead_engine_stops_the_run_with_exit_1(runs):
    assert runs["dead_status"] == EXIT_FATAL, runs["dead_stderr"][-3000:]


def test_a_dead_engine_is_noticed_within_seconds(runs):
    assert runs["dead_seconds"] < 60


def test_a_dead_engine_says_so_and_how_to_resume(runs):
    assert "rerun the same command to resume" in runs["dead_stderr"]


def test_a_dead_engine_blames_no_record(runs):
    types = {row["error"]["type"] for row in runs["dead_rows"] if row["error"] is not None}
    assert types <= {"InputError"}


def test_what_was_done_before_the_engine_died_is_kept(runs):
    assert len(runs["dead_rows"]) >= runs["dead_rows_before_kill"]


def test_the_rerun_finishes(runs):
    assert runs["final_status"] == EXIT_ITEM_ERRORS, runs["final_stderr"][-3000:]


def test_every_input_line_is_answered_exactly_once(runs):
    lines = [row["line"] for row in runs["final_rows"]]
    assert lines == list(range(1, len(runs["lines"]) + 1)), runs["kill_point"]


def test_every_id_is_answered_exactly_once(runs):
    repeated = "DuplicateIdError"
    ids = [r["id"] for r in runs["final_rows"] if r["id"] is not None and (r["error"] or {}).get("type") != repeated]
    assert len(ids) == len(set(ids)), runs["kill_point"]


def test_the_rerun_had_records_left_to_judge(runs: dict[str, Any]) -> None:
    """The positive control for the stderr tests below: the rerun started an engine."""
    assert runs["left_for_rerun"] > 0


def test_the_reruns_progress_bar_shows_its_rate(runs: dict[str, Any]) -> None:
    assert "rec/s" in runs["final_stderr"] or "s/rec" in runs["final_stderr"]


@pytest.mark.parametrize("line", ["Loading safetensors", "WARNING", "Triton"])
def test_the_engines_own_log_stays_out_of_the_reruns_stderr(runs: dict[str, Any], line: str) -> None:
    """vLLM's own lines (its loading, its warnings) go to the engine log unless -v."""
    assert line not in runs["final_stderr"]


def test_every_good_record_has_a_verdict(runs):
    verdicts = [row for row in runs["final_rows"] if row["verdict"] is not None]
    good_lines = [*range(1, 5), *range(5 + len(WORST), len(runs["lines"]) + 1)]
    assert [row["line"] for row in verdicts if row["line"] in good_lines] == good_lines


def test_every_hostile_line_has_an_error_naming_the_field(runs):
    hostile = [row for row in runs["final_rows"] if 5 <= row["line"] < 5 + len(WORST)]
    fields = [row["error"]["field"] for row in hostile if row["error"] is not None]
    assert None not in fields


# -- what the verbose first run shows (tests/cli/test_judge_cmd.py's settings, told) ------------------------------


def test_verbose_decision_mode_shows_settings_and_writes_decisions(runs):
    stderr = runs["dead_stderr"]
    assert "engine threads bound to cores" in stderr
    assert "KV cache 1 GiB (--kv-cache-gib)" in stderr
    assert "Loading safetensors" in stderr  # -v lets the engine's own output through
    assert any(row["error"] is None for row in runs["dead_rows"]), (
        "the first run wrote no verdict before its engine died"
    )
    for row in runs["dead_rows"]:
        if row["error"] is None:
            assert row["verdict"]["detail"] == "decision"
            assert row["verdict"]["decision"] in ("true", "false")
            assert 0.0 <= row["verdict"]["probability"] <= 1.0
            assert row["prompt_version"] == "sufficiency/v6/decision"
            assert row["backend"] == "guidance"


# -- the rerun, watched (tests/test_no_network.py) -----------------------------------------------------------------


def test_judge_in_process_tries_no_address_off_the_machine(runs):
    """Every connect of the rerun's processes (the CLI, its engine core) is loopback or local, and in a network
    namespace with only loopback where this machine allows one."""
    network.need(runs["trace"] is not None, network.strace_works() or "no strace")
    network.need(runs["jailed"], "no network namespace with only loopback here", or_weaker=True)
    network.assert_on_the_machine(None, runs["trace"])
    assert runs["final_status"] == EXIT_ITEM_ERRORS
