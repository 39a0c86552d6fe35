"""Ray on this machine with the embedded model: the same verdicts as a run without Ray,
an actor killed mid-run replaced without loss, no engine process left behind, and the
Ray Data entry.  One module fixture does all the runs (engines start once each).

Every engine here computes in float32: that Ray changes no verdict is the subject, and
bfloat16 moves decision probabilities, and with them tokens, with the batch a request
shares and with what the prefix cache holds (tests/serving/test_dtype_engine.py); under
bfloat16 the Ray Data entry's verdicts differed from the in-process run's.  The run
without Ray judges through the session's float32 vLLM server (``vllm_server``): the same
weights, dtype and prompts, and no engine start of its own (about 40 s of a CI run)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psutil
import pytest

from suffice.batch import BatchOptions, RayOptions, judge_file
from suffice.config import JudgeConfig
from suffice.serving.base import OnRecords
from suffice.serving.engine_config import EngineConfig
from tests.conftest import load_records

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.engine
ITEMS = 4  # two batches of two: the first done, the second in flight when its actor is killed
#: The Ray Data entry judges the first two records (one batch): an actor's start is
#: about 90 s of its run here and each further batch of two about 20 s (2026-12-02).
DATASET_ITEMS = 2
CONFIG = JudgeConfig(engine=EngineConfig(dtype="float32"))


def _engine_cores() -> set[int]:
    """vLLM's engine processes (``VLLM::EngineCore``, ``VLLM::Worker``).  The kernel
    keeps 15 characters of a process name (``VLLM::EngineCor``), and the command line
    is renamed only once the process has set itself up: match the prefix on either.
    A zombie (exited, not yet reaped by its parent) holds no memory and is not counted."""
    found = set()
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            text = (proc.info["name"] or "") + " " + " ".join((proc.info["cmdline"] or [])[:1])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "VLLM::" in text and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.add(proc.pid)
    return found


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


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

    killed: list[str] = []
    messages: list[str] = []
    during: set[int] = set()
    errors: list[str] = []

    stop = threading.Event()

    def watch() -> None:
        """Samples engine processes all through the Ray run, not only when a row lands:
        a progress callback can fire before the actor's engine has started."""
        while not stop.wait(0.25):
            try:
                during.update(_engine_cores() - found["cores_before"])
            except Exception as exc:  # one bad sample must not end the watch
                errors.append(repr(exc))

    def kill_first_actor(total, done):
        def update(n):
            if killed:
                return
            for named in ray.util.list_named_actors(all_namespaces=True):
                if named["name"].startswith("suffice-"):
                    ray.kill(ray.get_actor(named["name"], namespace="suffice"))
                    killed.append(named["name"])

        return OnRecords(update), (lambda: None)

    options = BatchOptions(batch_size=2, ray=RayOptions(address="local", actors=1, queue_per_actor=2))
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        judge_file(CONFIG, source, tmp / "ray.jsonl", options, progress=kill_first_actor, notify=messages.append)
    finally:
        stop.set()
        watcher.join()
    found["ray"] = _rows(tmp / "ray.jsonl")
    found["killed"] = killed
    found["messages"] = messages
    found["cores_after_ray"] = _engine_cores()
    found["cores_during_ray"] = during
    found["watch_errors"] = errors

    from suffice.batch.ray_data import judge_dataset

    ray.init(address="local", include_dashboard=False, log_to_driver=False, object_store_memory=256 * 1024**2)
    try:
        dataset = judge_dataset(ray.data.from_items(records[:DATASET_ITEMS]), CONFIG, actors=1, batch_size=2)
        found["dataset"] = dataset.take_all()
    finally:
        ray.shutdown()
    return found


def _verdicts(rows):
    """Verdicts without their decision probability, which is compared apart."""
    return {r["id"]: {k: v for k, v in r["verdict"].items() if k != "p_sufficient"} for r in rows}


def _probabilities(rows):
    return {r["id"]: r["verdict"]["p_sufficient"] for r in rows}


def test_ray_gives_every_record_one_row_in_input_order(runs):
    assert [r["id"] for r in runs["ray"]] == [str(r["id"]) for r in runs["records"]]


def test_ray_gives_the_same_verdicts_as_the_in_process_run(runs):
    assert _verdicts(runs["ray"]) == _verdicts(runs["local"])


def test_ray_gives_the_same_decision_probabilities_to_float_noise(runs):
    """Measured: they differ by up to 4e-6 (a prefix-cache hit or a fresh engine sums
    the same logits in another order); every token is the same."""
    local = _probabilities(runs["local"])
    assert _probabilities(runs["ray"]) == pytest.approx(local, abs=1e-4)


def test_the_actor_was_killed_mid_run_and_replaced(runs):
    assert len(runs["killed"]) == 1
    assert any("Ray actor died" in m for m in runs["messages"])


def test_the_ray_actors_ran_their_engines_in_engine_processes(runs):
    assert runs["cores_during_ray"], runs["watch_errors"]  # the positive control for the test below


def test_no_engine_process_outlives_the_ray_run(runs):
    assert not runs["cores_during_ray"] & runs["cores_after_ray"]
    assert runs["cores_after_ray"] <= runs["cores_before"]


def test_the_ray_data_entry_gives_the_same_verdicts(runs):
    got = [json.loads(row["result"]) for row in runs["dataset"]]
    assert _verdicts(got) == _verdicts(runs["local"][:DATASET_ITEMS])


def test_the_ray_data_entry_says_which_records_are_positive(runs):
    local = {r["id"]: r["verdict"]["is_sufficient"] for r in runs["local"][:DATASET_ITEMS]}
    assert {row["id"]: row["positive"] for row in runs["dataset"]} == local
