"""Ray on this machine with the embedded model: the same verdicts as a run without Ray,
an actor killed mid-run replaced without loss, no engine process left behind, and the
Ray Data entry.  One module fixture does all the runs (engines start once each).

Every engine here computes in float32: that Ray changes no verdict is the subject, and
bfloat16 moves decision probabilities, and with them tokens, with the batch a request
shares and with what the prefix cache holds (tests/serving/test_dtype_engine.py); under
bfloat16 the Ray Data entry's verdicts differed from the in-process run's.  The run
without Ray judges through the session's float32 vLLM server (``vllm_server``): the same
weights, dtype and prompts, and no engine start of its own (about 40 s of a CI run).

The Ray run is ``suffice judge --ray local`` as a user runs it, watched by strace in a network namespace with only
loopback: tests/test_no_network.py's proof for Ray rides on it (each engine start is about a minute of CI).  Its actor
is SIGKILLed from outside once the first batch's rows are written, as a crash would end it.

The Ray Data entry's actor judges through the same session server, with no engine of its own: what it adds is Ray
Data's batches and columns, and engines inside actors are the CLI run's subject."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK
from suffice.serving.engine_config import EngineConfig
from tests import test_no_network as network
from tests.conftest import load_records

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.engine
ITEMS = 4  # two batches of two: the first done, the second in flight when its actor is killed
#: The Ray Data entry judges the first two records (one batch).
DATASET_ITEMS = 2
#: Seconds the Ray run may take: two actor starts (about 90 s each here, 2026-12-02) and two batches.
RUN_TIMEOUT_S = 600
#: Seconds the processes under the actors may take to end once the run has exited.
EXIT_GRACE_S = 10.0


def _titled(marker: str) -> list[psutil.Process]:
    """Live processes whose name or command line holds ``marker``.  The kernel keeps 15 characters of a process
    name (``VLLM::EngineCor``), and the command line is renamed only once the process has set itself up: match on
    either.  A zombie (exited, not yet reaped by its parent) holds no memory and is not counted."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            text = (proc.info["name"] or "") + " " + " ".join((proc.info["cmdline"] or [])[:1])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if marker in text and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _engine_cores() -> set[int]:
    """vLLM's engine processes (``VLLM::EngineCore``, ``VLLM::Worker``)."""
    return {proc.pid for proc in _titled("VLLM::")}


def _ident(proc: psutil.Process) -> tuple[int, float]:
    """A process as itself, not its pid alone: a pid is reused once its process is gone."""
    return proc.pid, proc.create_time()


def _alive(ident: tuple[int, float]) -> bool:
    try:
        proc = psutil.Process(ident[0])
        return proc.create_time() == ident[1] and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _is_engine(text: str) -> bool:
    """vLLM's engine core or worker: titled ``VLLM::...`` by setproctitle, and ``spawn_main`` on its command line
    where it is not (under a Ray actor the title is not always set, so the title alone cannot be the test)."""
    return "VLLM::" in text or "spawn_main" in text


def _under_actors(actors: dict[tuple[int, float], str], under: dict[tuple[int, float], tuple[int, str]]) -> None:
    """Adds the run's live Ray actors to ``actors`` and every process under them to ``under`` (with its actor's
    pid and what it runs), found by parentage rather than by title."""
    for actor in _actors():
        try:
            actors[_ident(actor)] = actor.name()
            for proc in actor.children(recursive=True):
                text = f"{proc.name()}: {' '.join(proc.cmdline())[:160]}"
                under[_ident(proc)] = (actor.pid, text)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _actors() -> list[psutil.Process]:
    """The run's Ray actor processes (Ray titles them ``ray::JudgeWorker``, and ``...JudgeWorker.<method>`` while
    one runs)."""
    return _titled("ray::JudgeWorker")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vllm_server):
    tmp = tmp_path_factory.mktemp("ray")
    source = tmp / "in.jsonl"
    records = load_records("squad2.jsonl", ITEMS)
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    found: dict[str, object] = {"records": records, "cores_before": _engine_cores()}

    # Without Ray: the session's vLLM server, in float32 as the actors' engines are.
    served = JudgeConfig(engine=EngineConfig(kind="openai", base_url=vllm_server))
    judge_file(served, source, tmp / "local.jsonl", BatchOptions(batch_size=2))
    found["local"] = _rows(tmp / "local.jsonl")

    killed: list[int] = []
    during: set[int] = set()
    actors: dict[tuple[int, float], str] = {}
    under: dict[tuple[int, float], tuple[int, str]] = {}
    errors: list[str] = []

    stop = threading.Event()

    def watch() -> None:
        """Samples engine processes all through the Ray run, not only when a row lands:
        a row can be written before the replacement actor's engine has started."""
        while not stop.wait(0.25):
            try:
                during.update(_engine_cores() - found["cores_before"])
                _under_actors(actors, under)
            except Exception as exc:  # one bad sample must not end the watch
                errors.append(repr(exc))

    out = tmp / "ray.jsonl"
    args = ["judge", str(source), "-o", str(out), "--ray", "local", "--actors", "1", "--batch-size", "2"]
    args += ["--dtype", "float32", "--no-progress"]
    watched = network.strace_works() is None
    found["trace"] = tmp / "trace" if watched else None
    found["jailed"] = bool(network.jail_prefix()) if watched else False
    command = (
        network.command_line(str(network.STRACE), found["trace"], args, jail=found["jailed"])
        if watched
        else [sys.executable, "-m", "suffice.cli.main", *args]
    )
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    log = tmp / "ray.stderr"
    with log.open("w") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=sink, env=network.suffice_env(), start_new_session=True)
    try:
        # The first batch's rows written, the second batch on the actor: the actor dies as a crash would end it.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while proc.poll() is None and not killed and time.monotonic() < deadline:
            if _lines(out) >= 2:
                for actor in _actors():
                    actor.kill()
                    killed.append(actor.pid)
            time.sleep(0.05)
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # what a hung run left: its Ray and its engines
            proc.wait()
        stop.set()
        watcher.join()
    stderr = log.read_text(errors="replace")
    found["ray_status"], found["ray_stderr"] = proc.returncode, stderr
    found["ray"] = _rows(out)
    found["killed"] = killed
    found["messages"] = stderr.splitlines()
    found["cores_after_ray"] = _engine_cores()
    found["cores_during_ray"] = during
    found["watch_errors"] = errors
    found["under_actors"] = under
    # What the actors started ends with them, but not at the same instant (a resource tracker reads its pipe's end):
    # a few seconds' grace, then whatever is left has outlived the run.
    deadline = time.monotonic() + EXIT_GRACE_S
    while (alive := [ident for ident in [*actors, *under] if _alive(ident)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    found["alive_after_ray"] = [(ident, actors.get(ident) or under[ident][1]) for ident in alive]

    from suffice.batch.ray_data import judge_dataset

    ray.init(address="local", include_dashboard=False, log_to_driver=False, object_store_memory=256 * 1024**2)
    try:
        dataset = judge_dataset(ray.data.from_items(records[:DATASET_ITEMS]), served, BatchOptions(batch_size=2))
        found["dataset"] = dataset.take_all()
    finally:
        ray.shutdown()
    return found


def _verdicts(rows):
    """Verdicts without their decision probability, which is compared apart."""
    return {r["id"]: {k: v for k, v in r["verdict"].items() if k != "p_sufficient"} for r in rows}


def _probabilities(rows):
    return {r["id"]: r["verdict"]["p_sufficient"] for r in rows}


def test_the_ray_run_finishes(runs):
    assert runs["ray_status"] == EXIT_OK, runs["ray_stderr"][-3000:]


def test_ray_gives_every_record_one_row_in_input_order(runs):
    assert [r["id"] for r in runs["ray"]] == [str(r["id"]) for r in runs["records"]]


def test_ray_gives_the_same_verdicts_as_the_in_process_run(runs):
    assert _verdicts(runs["ray"]) == _verdicts(runs["local"])


def test_ray_gives_the_same_decision_probabilities_to_float_noise(runs):
    """A prefix-cache hit, a fresh engine or another batch sums the same float32 logits in another order, which
    moves a probability by up to about 1e-4 while every token stays the same; a different decision token would
    move it far more than the 1e-3 allowed."""
    local = _probabilities(runs["local"])
    assert _probabilities(runs["ray"]) == pytest.approx(local, abs=1e-3)


def test_the_actor_was_killed_mid_run_and_replaced(runs):
    assert len(runs["killed"]) == 1
    assert any("Ray actor died" in m for m in runs["messages"])


def test_the_ray_actors_ran_their_engines_in_engine_processes(runs):
    """The positive control for the test below: the watch saw an engine under each actor, the first and its
    replacement.  A failure says what it saw (a string: pytest would cut a dict short)."""
    with_engines = {actor for actor, text in runs["under_actors"].values() if _is_engine(text)}
    seen = {"watch errors": runs["watch_errors"], "under the actors": list(runs["under_actors"].values())}
    assert len(with_engines) >= 2, json.dumps(seen, indent=1)


def test_no_engine_process_outlives_the_ray_run(runs):
    """Neither an actor nor any process under one (its engine, its compilers), nor a titled engine process."""
    assert runs["alive_after_ray"] == []
    assert not runs["cores_during_ray"] & runs["cores_after_ray"]
    assert runs["cores_after_ray"] <= runs["cores_before"]


def test_the_ray_data_entry_gives_the_same_verdicts(runs):
    got = [json.loads(row["result"]) for row in runs["dataset"]]
    assert _verdicts(got) == _verdicts(runs["local"][:DATASET_ITEMS])


def test_the_ray_data_entry_says_which_records_are_positive(runs):
    local = {r["id"]: r["verdict"]["is_sufficient"] for r in runs["local"][:DATASET_ITEMS]}
    assert {row["id"]: row["positive"] for row in runs["dataset"]} == local


def test_judge_on_a_local_ray_instance_tries_no_address_off_the_machine(runs):
    """Every connect of every process of the Ray run (the CLI, Ray's own, the actors, their engines) is loopback
    or local, in a network namespace with only loopback where this machine allows one (tests/test_no_network.py)."""
    network.need(runs["trace"] is not None, network.strace_works() or "no strace")
    network.need(runs["jailed"], "no network namespace with only loopback here", or_weaker=True)
    network.assert_on_the_machine(None, runs["trace"])
