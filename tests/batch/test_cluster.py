"""The Ray path on a local Ray instance with scripted engines inside the actors: the
pool's order, its replacement of a killed actor, its errors.  The same path on the
real engine is in tests/batch/test_cluster_engine.py."""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, RayOptions, judge_file, ray_scorer, resources
from suffice.batch.ray_data import _DatasetWorker, judge_dataset
from suffice.batch.resources import placeable
from suffice.batch.run_settings import settings_path
from suffice.config import JudgeConfig
from suffice.exceptions import (
    ConfigError,
    EngineDeadError,
    EngineError,
    EngineUnreachableError,
    ModelNotFoundError,
    OutputMismatchError,
)
from suffice.judge import Judge
from suffice.serving.base import OnRecords
from tests.batch.test_runner import good, record, rows, write_lines
from tests.fakes import ScriptedEngine

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]
CONFIG = JudgeConfig()


@pytest.fixture(scope="module")
def local_ray():
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        namespace="suffice",
        object_store_memory=256 * 1024**2,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    yield ray
    ray.shutdown()


def slow_opener(config: JudgeConfig) -> Judge:
    def answer(request):
        time.sleep(0.05)
        return good(request)

    return Judge(ScriptedEngine(answer), config=config)


def fast_opener(config: JudgeConfig) -> Judge:
    return Judge(ScriptedEngine(good), config=config)


def test_two_actors_give_every_record_one_row_in_input_order(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(30)])
    options = BatchOptions(batch_size=4, ray=RayOptions(address="local", actors=2))
    report = judge_file(CONFIG, source, out, options, open_judge=fast_opener)
    got = rows(out)
    assert [r["id"] for r in got] == [f"r{i}" for i in range(30)]
    assert all(r["verdict"] is not None for r in got)
    assert report.summary.verdicts == 30


def test_an_actor_killed_mid_run_is_replaced_and_nothing_is_lost_or_repeated(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(24)])
    killed: list[str] = []
    messages: list[str] = []

    def progress(total, done):
        def update(n):
            if not killed:
                names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
                for name in names:
                    if name.startswith("suffice-"):
                        ray.kill(ray.get_actor(name, namespace="suffice"))
                        killed.append(name)

        return OnRecords(update), (lambda: None)

    options = BatchOptions(batch_size=3, ray=RayOptions(address="local", actors=1, queue_per_actor=2))
    judge_file(CONFIG, source, out, options, open_judge=slow_opener, progress=progress, notify=messages.append)
    got = rows(out)
    assert len(killed) == 1
    assert [r["id"] for r in got] == [f"r{i}" for i in range(24)]
    assert all(r["verdict"] is not None for r in got)
    assert any("Ray actor died" in m for m in messages)


def missing_model(config: JudgeConfig) -> Judge:
    raise ModelNotFoundError("/nowhere", "is not a folder")


def test_an_error_no_retry_can_fix_stops_the_run_with_that_error(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    options = BatchOptions(ray=RayOptions(address="local", actors=1))
    with pytest.raises(ModelNotFoundError, match="nowhere"):
        judge_file(CONFIG, source, out, options, open_judge=missing_model)


def person_opener(config: JudgeConfig) -> Judge:
    from tests.audit.test_routes_reach_a_person import PARTIAL

    return Judge(ScriptedEngine(PARTIAL), config=config)


def test_a_ray_run_audits_every_record_and_queues_its_routes_to_a_person(local_ray, tmp_path):
    # The actors judge; the driver writes the audit rows and queues the reviews (one log, on the driver's disk).
    from suffice.audit import AuditLog
    from tests.audit.test_routes_reach_a_person import record as recovery_record

    source, out, db = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "audit.db"
    write_lines(source, [json.dumps(recovery_record(f"q{i}")).encode() for i in range(6)])
    options = BatchOptions(batch_size=2, audit_db=db, ray=RayOptions(address="local", actors=2))
    report = judge_file(JudgeConfig(gate="recovery"), source, out, options, open_judge=person_opener)
    log = AuditLog(db)
    try:
        audited, reviews = list(log.rows()), list(log.reviews())
        assert log.verify().ok
    finally:
        log.close()
    assert sorted(r["item_id"] for r in audited) == [f"q{i}" for i in range(6)]
    assert {(r["decision"], r["rule"]) for r in audited} == {("human_review", "partial_under_high_stakes")}
    assert len(reviews) == 6 and report.reviews == 6 and report.unqueued_reviews == 0


def test_zero_actors_is_refused_naming_the_option():
    with pytest.raises(ConfigError) as caught:
        RayOptions(actors=0)
    assert caught.value.parameter == "actors"


def test_a_ray_run_with_nothing_left_to_judge_starts_no_actor(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])
    judge_file(CONFIG, source, out, open_judge=fast_opener)
    messages: list[str] = []
    options = BatchOptions(ray=RayOptions(address="local", actors=1))
    report = judge_file(CONFIG, source, out, options, open_judge=fast_opener, notify=messages.append)
    assert report.skipped == 4
    assert not any("Ray actor" in m for m in messages)


def test_a_ray_run_resumes_skipping_finished_ids(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(10)])
    judge_file(CONFIG, source, out, open_judge=fast_opener)
    kept = out.read_text().splitlines(keepends=True)
    out.write_text("".join(kept[5:] + kept[:2]))  # shards, out of order
    options = BatchOptions(batch_size=2, ray=RayOptions(address="local", actors=1))
    report = judge_file(CONFIG, source, out, options, open_judge=fast_opener)
    assert report.skipped == 7
    assert report.summary.items == 3
    assert [r["id"] for r in rows(out)] == [f"r{i}" for i in range(10)]


def test_more_actors_than_the_cluster_can_place_is_refused_naming_actors(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    options = BatchOptions(ray=RayOptions(address="local", actors=5))
    with pytest.raises(ConfigError) as caught:
        judge_file(CONFIG, source, out, options, open_judge=fast_opener)
    assert caught.value.parameter == "actors"


def poisoned_opener(config: JudgeConfig) -> Judge:
    """An engine whose process dies on any request that carries POISON (a record that
    crashes the engine: a tokenizer or kernel bug, memory it alone exhausts)."""

    def answer(request):
        if "POISON" in request.messages[-1]["content"]:
            os._exit(1)
        return good(request)

    return Judge(ScriptedEngine(answer), config=config)


POISON_RUN = RayOptions(address="local", actors=1, queue_per_actor=1, max_batch_retries=1, replace_delay_s=0)


@pytest.fixture(scope="module")
def poisoned_run(local_ray, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("poison")
    source, out = tmp / "in.jsonl", tmp / "out.jsonl"
    lines = [record(i, "POISON" if i == 5 else "Ada wrote it.") for i in range(12)]
    write_lines(source, [json.dumps(line).encode() for line in lines])
    report = judge_file(CONFIG, source, out, BatchOptions(batch_size=4, ray=POISON_RUN), open_judge=poisoned_opener)
    return report, rows(out)


def test_a_record_that_kills_every_actor_gets_an_engine_crash_row(poisoned_run):
    _, got = poisoned_run
    crashed = [r["id"] for r in got if r["error"] is not None and r["error"]["type"] == "EngineCrashError"]
    assert crashed == ["r5"]


def test_every_other_record_of_a_poisoned_run_gets_its_verdict(poisoned_run):
    _, got = poisoned_run
    judged = [r["id"] for r in got if r["verdict"] is not None]
    assert judged == [f"r{i}" for i in range(12) if i != 5]


def test_a_poisoned_run_keeps_input_order(poisoned_run):
    _, got = poisoned_run
    assert [r["id"] for r in got] == [f"r{i}" for i in range(12)]


def test_a_poisoned_run_counts_one_error(poisoned_run):
    report, _ = poisoned_run
    assert report.errors == 1


def test_actors_that_die_on_every_record_stop_the_run(local_ray, tmp_path):
    """Nothing judged: the engine itself may be what dies, so no record is blamed."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i, "POISON")).encode() for i in range(2)])
    options = BatchOptions(batch_size=2, ray=POISON_RUN)
    with pytest.raises(EngineDeadError, match="none was judged"):
        judge_file(CONFIG, source, out, options, open_judge=poisoned_opener)


def test_a_poisoned_first_batch_still_judges_its_other_record(local_ray, tmp_path):
    """The poisoned half dies alone before anything was judged: it waits for the other
    half to show that the engine works, then gets its row."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0, "POISON")).encode(), json.dumps(record(1)).encode()])
    judge_file(CONFIG, source, out, BatchOptions(batch_size=2, ray=POISON_RUN), open_judge=poisoned_opener)
    got = rows(out)
    assert [r["error"]["type"] if r["error"] else "verdict" for r in got] == ["EngineCrashError", "verdict"]


def unreachable_opener(config: JudgeConfig) -> Judge:
    def answer(request):
        if "GONE" in request.messages[-1]["content"]:
            raise EngineUnreachableError("the server went away")
        return good(request)

    return Judge(ScriptedEngine(answer), config=config)


def test_a_server_that_went_away_stops_the_run_blaming_no_record(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i, "GONE" if i == 3 else "Ada wrote it.")).encode() for i in range(6)])
    with pytest.raises(EngineUnreachableError):
        judge_file(CONFIG, source, out, BatchOptions(batch_size=2, ray=POISON_RUN), open_judge=unreachable_opener)
    assert not [r for r in rows(out) if r["error"] is not None]


class ServingEngine(ScriptedEngine):
    """A scripted engine that says which model its server serves (as the openai engine does)."""

    def __init__(self, root: str) -> None:
        super().__init__(good)
        self.root = root

    def served(self) -> dict[str, str]:
        return {"served_model": "judge", "served_root": self.root}


def serving_opener(config: JudgeConfig, root: str) -> Judge:
    return Judge(ServingEngine(root), config=config)


def _judge_on_ray(source: Path, out: Path, root: str) -> None:
    options = BatchOptions(batch_size=2, ray=RayOptions(address="local", actors=1))
    judge_file(CONFIG, source, out, options, open_judge=functools.partial(serving_opener, root=root))


def test_a_ray_run_records_what_its_actors_engine_serves(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(2)])
    _judge_on_ray(source, out, "/models/a")
    recorded = json.loads(settings_path(out).read_text())
    assert recorded["served"] == {"served_model": "judge", "served_root": "/models/a"}


def test_a_ray_resume_against_a_server_now_serving_another_model_is_refused(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(2)])
    _judge_on_ray(source, out, "/models/a")
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])
    with pytest.raises(OutputMismatchError) as caught:
        _judge_on_ray(source, out, "/models/b")
    assert caught.value.setting == "served_root"


def test_a_negative_replacement_delay_is_refused_naming_the_option():
    with pytest.raises(ConfigError) as caught:
        RayOptions(replace_delay_s=-1)
    assert caught.value.parameter == "replace_delay_s"


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"actors": 1.5}, "actors"),
        ({"queue_per_actor": 1.5}, "queue_per_actor"),
        ({"max_batch_retries": float("inf")}, "max_batch_retries"),
        ({"replace_delay_s": float("nan")}, "replace_delay_s"),
        ({"gpus_per_actor": float("inf")}, "gpus_per_actor"),
        ({"cpus_per_actor": float("nan")}, "cpus_per_actor"),
        ({"actors": True}, "actors"),
        ({"address": None}, "ray"),
    ],
)
def test_ray_options_that_are_not_usable_numbers_are_refused_naming_the_option(settings, parameter):
    # Each was accepted and failed mid-run with a raw TypeError or ValueError.
    with pytest.raises(ConfigError) as caught:
        RayOptions(**settings)
    assert caught.value.parameter == parameter


@pytest.mark.parametrize(
    ("options", "parameter"),
    [({"overwrite": True}, "overwrite"), ({"shard": "0/2"}, "shard"), ({"fields": ["question=q"]}, None)],
)
def test_judge_dataset_refuses_a_batch_setting_it_does_not_use_naming_it(options, parameter):
    if parameter is None:
        judge_dataset(_Lazy(), CONFIG, BatchOptions(**options, ray=RayOptions(gpus_per_actor=0)))
        return
    with pytest.raises(ConfigError) as caught:
        judge_dataset(object(), CONFIG, BatchOptions(**options))
    assert caught.value.parameter == parameter


class _Lazy:
    """A dataset that takes its transform and runs nothing."""

    def map_batches(self, *args, **kwargs):
        return self


def broken_torch(config: JudgeConfig) -> Judge:
    raise RuntimeError("CUDA error: no kernel image is available for execution on the device")


def test_an_engine_that_cannot_start_for_a_reason_outside_suffice_stops_the_run_saying_why(local_ray, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    options = BatchOptions(ray=RayOptions(address="local", actors=1, replace_delay_s=0))
    with pytest.raises(EngineError, match="no kernel image") as caught:
        judge_file(CONFIG, source, out, options, open_judge=broken_torch)
    # Not "dead, rerun to resume": a rerun would fail the same way.
    assert not isinstance(caught.value, EngineDeadError)


def node(cpus: float, gpus: float = 0, alive: bool = True) -> dict:
    """A node as ``ray.nodes()`` lists it."""
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), "memory": 1e9}
    return {"Alive": alive, "Resources": resources}


@pytest.mark.parametrize(
    ("nodes", "cpus", "gpus", "expected"),
    [
        ([node(8, 1), node(8, 1)], 1.0, 2.0, 0),  # 2 GPUs in the cluster, never 2 on one node
        ([node(8, 1), node(8, 1)], 1.0, 1.0, 2),
        ([node(8, 4)], 1.0, 2.0, 2),
        ([node(2), node(2, alive=False)], 1.0, 0.0, 2),  # a lost node holds nothing
        ([node(3)], 2.0, 0.0, 1),
    ],
    ids=["split-gpus", "one-gpu-each", "two-pairs", "dead-node", "cpus"],
)
def test_actors_are_counted_per_node(nodes, cpus, gpus, expected):
    assert placeable(nodes, cpus=cpus, gpus=gpus) == expected


def dying_once_opener(config: JudgeConfig, root: str, mark: str) -> Judge:
    """Its first actor dies while it opens the engine (a lost node, the OOM killer)."""
    if not os.path.exists(mark):
        Path(mark).touch()
        os._exit(1)
    return serving_opener(config, root)


def test_a_ray_resume_against_another_model_is_refused_even_when_the_first_actor_dies(local_ray, tmp_path):
    # The check used to be skipped when no first actor answered: the replacement then
    # judged with the other model into the same output.
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(2)])
    _judge_on_ray(source, out, "/models/a")
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])
    options = BatchOptions(batch_size=2, ray=RayOptions(address="local", actors=1, replace_delay_s=0))
    opener = functools.partial(dying_once_opener, root="/models/b", mark=str(tmp_path / "died"))
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(CONFIG, source, out, options, open_judge=opener)
    assert caught.value.setting == "served_root"


class DyingEngine(ScriptedEngine):
    """A scripted engine whose process "dies" on any batch holding the poison record."""

    def __init__(self, poison: str | None) -> None:
        super().__init__(good)
        self.poison = poison

    def generate(self, requests, progress=None, cancel=None):
        if self.poison is not None and any(self.poison in r.messages[-1]["content"] for r in requests):
            raise EngineDeadError("the engine process exited")
        return super().generate(requests, progress, cancel)


def poison_opener(config: JudgeConfig, poison: str | None = "Who wrote 5?") -> Judge:
    return Judge(DyingEngine(poison), config=config)


@pytest.fixture(scope="module")
def dataset_rows(local_ray) -> dict[str, dict]:
    records = [record(i) for i in range(8)]
    options = BatchOptions(batch_size=4, ray=RayOptions(actors=1, cpus_per_actor=0.5))
    dataset = judge_dataset(ray.data.from_items(records), CONFIG, options, open_judge=poison_opener)
    return {row["id"]: row for row in dataset.take_all()}


def test_a_record_that_kills_the_engine_gets_a_crash_row_in_a_dataset(dataset_rows):
    assert dataset_rows["r5"]["error"] == "EngineCrashError"


def test_the_other_records_of_a_poisoned_dataset_get_verdicts(dataset_rows):
    assert [i for i, row in sorted(dataset_rows.items()) if row["error"] is None] == [
        "r0",
        "r1",
        "r2",
        "r3",
        "r4",
        "r6",
        "r7",
    ]


def always_dead_opener(config: JudgeConfig) -> Judge:
    return poison_opener(config, poison="Who wrote")


def test_an_engine_that_dies_on_every_record_fails_the_dataset_instead_of_looping(local_ray):
    dataset = judge_dataset(
        ray.data.from_items([record(i) for i in range(2)]),
        CONFIG,
        BatchOptions(batch_size=2, ray=RayOptions(actors=1, cpus_per_actor=0.5)),
        open_judge=always_dead_opener,
    )
    with pytest.raises(Exception, match="the engine itself is failing"):
        dataset.take_all()


def counting_opener(config: JudgeConfig, started: str) -> Judge:
    """Each batch takes two seconds and leaves a line in ``started`` when it begins."""

    def answer(request):
        with open(started, "a") as handle:
            handle.write("batch\n")
        time.sleep(2.0)
        return good(request)

    return Judge(ScriptedEngine(answer), config=config)


def interrupting(total: int | None, done: int):
    def update(amount: float) -> None:
        raise KeyboardInterrupt

    return OnRecords(update), lambda: None


def test_a_stopped_ray_run_does_not_judge_the_batches_queued_on_its_actors(local_ray, tmp_path):
    source, out, started = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "started"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(6)])
    options = BatchOptions(batch_size=1, ray=RayOptions(address="local", actors=1, queue_per_actor=4))
    opener = functools.partial(counting_opener, started=str(started))
    with pytest.raises(KeyboardInterrupt):
        judge_file(CONFIG, source, out, options, progress=interrupting, open_judge=opener)
    time.sleep(4.0)  # a batch the stop did not cancel would have begun by now
    # The first batch (whose progress stopped the run) and the one running then; the
    # three queued behind them are cancelled, not judged for nothing.
    assert len(started.read_text().splitlines()) <= 3


def test_a_ray_run_whose_cluster_can_no_longer_hold_its_actors_stops_instead_of_waiting(
    local_ray, tmp_path, monkeypatch
):
    # A node lost for good: its actor's replacement can never be placed, and the run
    # waited for ever.  Here the cluster's node list says so after the pool started.
    answers = iter([1])
    monkeypatch.setattr(resources, "placeable", lambda nodes, cpus, gpus: next(answers, 0))
    monkeypatch.setattr(ray_scorer, "CAPACITY_CHECK_S", 0.3)
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])
    options = BatchOptions(batch_size=1, ray=RayOptions(address="local", actors=1))
    opener = functools.partial(counting_opener, started=str(tmp_path / "started"))
    with pytest.raises(EngineDeadError, match="lost capacity"):
        judge_file(CONFIG, source, out, options, open_judge=opener)


@pytest.mark.parametrize(("gpus", "expected"), [(0.2, 5), (0.1, 10), (0.25, 4)])
def test_fractional_actors_are_counted_as_ray_places_them(gpus, expected):
    # In floats 1.0 // 0.2 is 4.0: five actors of 0.2 GPU were refused a GPU Ray gives them.
    assert placeable([node(16, 1)], cpus=1.0, gpus=gpus) == expected


def reopening_fails(config: JudgeConfig, state: dict) -> Judge:
    """The first engine dies on every batch; opening another fails (its memory not freed)."""
    state["opened"] = state.get("opened", 0) + 1
    if state["opened"] > 1:
        raise ModelNotFoundError("/models/gone", "is not a folder")
    return poison_opener(config, poison="Who wrote")


def test_a_dataset_worker_whose_engine_cannot_reopen_raises_that_error_typed():
    worker = _DatasetWorker(CONFIG, "suffice", {}, functools.partial(reopening_fails, state={}))
    with pytest.raises(ModelNotFoundError):
        worker._judged([record(0)], 4)


def test_a_ray_judge_is_a_judge_protocol_giving_the_in_process_judges_results(local_ray):
    """The Ray pool as a judge: the same calls and keywords as ``Judge``, the same results, and an integration's
    gate takes it as it takes any judge."""
    import asyncio

    from suffice import JudgeProtocol
    from suffice.batch import RayJudge
    from suffice.integrations.gating import DocumentGate, Evidence

    records = [record(i) for i in range(7)] + [{"id": "bad", "chunks": []}]
    local = Judge(ScriptedEngine(good), config=CONFIG)
    same = {"max_useful_chunks": 4}
    docs = [Evidence("Ada wrote 1.", id="a"), Evidence("Noise.", id="b")]

    async def awaited(judge: JudgeProtocol):
        return await judge.ajudge_batch(records[:3], options=same), await judge.ajudge(records[0])

    with RayJudge(CONFIG, RayOptions(address="local", actors=2), batch_size=3, open_judge=fast_opener) as judge:
        assert isinstance(judge, JudgeProtocol)
        got = judge.judge_batch(records)
        one = judge.judge(records[1], gate="sufficiency")
        batch, first = asyncio.run(awaited(judge))
        kept, outcome = DocumentGate(judge, on_insufficient="keep").select("Who wrote 1?", docs)
        assert judge.settings_for(options=same)["max_useful_chunks"] == "4"
        with pytest.raises(ConfigError) as caught:
            judge.judge_batch(records, options={"no_such_option": 1})
        assert caught.value.parameter == "no_such_option"

    def same_as(results, expected) -> None:
        assert [r.model_dump(exclude={"raw_text"}) for r in results] == [
            r.model_dump(exclude={"raw_text"}) for r in expected
        ]

    same_as(got, local.judge_batch(records))
    same_as([one, first], [local.judge(records[1]), local.judge(records[0])])
    same_as(batch, local.judge_batch(records[:3], options=same))
    assert got[-1].error is not None and got[-1].error.field == "question"
    local_kept, local_outcome = DocumentGate(local, on_insufficient="keep").select("Who wrote 1?", docs)
    assert outcome is not None and local_outcome is not None
    assert (kept, outcome.verdict) == (local_kept, local_outcome.verdict)
