"""One results stream: a judge and a batch run publish each judged batch once, and the judge's statistics, a run's
summary and the service's /metrics count what they observe there, so the three agree on the same results."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from suffice.batch import BatchOptions, judge_file
from suffice.batch.summary import RunSummary
from suffice.config import JudgeConfig
from suffice.gates import Gate, make_gate
from suffice.gates.roles import model_positive
from suffice.judge import Judge
from suffice.results import Judged, ResultsStream
from suffice.server.metrics import Metrics
from suffice.serving.base import GenerationRequest
from tests.batch.test_runner import good
from tests.batch.test_runner import record as sufficiency_record
from tests.fakes import ScriptedEngine
from tests.monitoring import record, scripted
from tests.test_cascade import CascadeEngine
from tests.test_judge import rec

#: Every route, an override, and a record that is no item (an error row).
CASES = ["deliver", "deliver", "overridden", "review", "more"]


class Seen:
    """An observer that keeps each batch it heard."""

    def __init__(self) -> None:
        self.batches: list[Judged] = []

    def on_judged(self, judged: Judged) -> None:
        self.batches.append(judged)

    @property
    def ids(self) -> list[str | None]:
        return [result.id for batch in self.batches for result in batch.results]


def retrying_once(case: str):
    """The adequacy script, whose first output for ``case`` fails validation (the judge retries it)."""
    failed: list[str] = []

    def script(request: GenerationRequest) -> str:
        if f"Case {case}?" in request.messages[-1]["content"] and not failed:
            failed.append(case)
            return "not json"
        return scripted(request)

    return script


def summary_of(gate: Gate | str) -> RunSummary:
    """A summary as a batch run makes it, counting by ``gate``'s rules."""
    gate = make_gate(gate) if isinstance(gate, str) else gate
    return RunSummary(
        gate=gate.name,
        positive=gate.is_positive,
        route=lambda verdict: gate.route(verdict).route,
        model_positive=functools.partial(model_positive, gate),
    )


def test_an_observer_of_a_judge_hears_each_result_once_with_its_records_and_gate():
    judge = Judge(ScriptedEngine(scripted), config=JudgeConfig(gate="adequacy"))
    seen = Seen()
    judge.stream.subscribe(seen)
    records = [record(case, i) for i, case in enumerate(CASES)] + [{"id": "bad"}]
    results = judge.judge_batch(records)
    assert len(seen.batches) == 1
    (batch,) = seen.batches
    assert list(batch.records) == records and list(batch.results) == results
    assert batch.gate is judge.gate and batch.name == "adequacy" and batch.seconds >= 0


def test_a_judge_derived_for_other_options_publishes_to_its_parents_stream_once():
    judge = Judge(ScriptedEngine(good), config=JudgeConfig())
    seen = Seen()
    judge.stream.subscribe(seen)
    judge.judge_batch([sufficiency_record(0)], options={"max_useful_chunks": 4})
    judge.judge_batch([sufficiency_record(1)])
    assert seen.ids == ["r0", "r1"]
    assert judge.stats.items == 2


def test_a_cascade_publishes_each_record_once_not_once_a_pass():
    engine = CascadeEngine({0: 0.95, 1: 0.55, 2: 0.2})
    judge = Judge(engine, config=JudgeConfig(detail="auto", cache=False))
    seen, summary = Seen(), summary_of(judge.gate)
    judge.stream.subscribe(seen)
    judge.stream.subscribe(summary)
    judge.judge_batch([rec(i) for i in range(3)])
    assert engine.kinds == [["decision"] * 3, ["full"] * 2]  # two passes, one batch published
    assert seen.ids == ["r0", "r1", "r2"]
    assert (judge.stats.items, judge.stats.verdicts, judge.stats.errors) == (3, 3, 0)
    assert (summary.items, summary.prompt_tokens) == (3, judge.stats.prompt_tokens)


def test_an_observer_subscribed_twice_hears_each_batch_once():
    judge = Judge(ScriptedEngine(good), config=JudgeConfig())
    seen = Seen()
    judge.stream.subscribe(seen)
    judge.stream.subscribe(seen)
    judge.judge_batch([sufficiency_record(0)])
    assert seen.ids == ["r0"]


def test_the_stream_tells_its_observers_in_the_order_subscribed():
    heard: list[str] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_judged(self, judged: Judged) -> None:
            heard.append(self.name)

    stream = ResultsStream([Named("a")])
    stream.subscribe(Named("b"))
    stream.publish(Judged((), ()))
    assert heard == ["a", "b"]


def test_the_judges_stats_the_summary_and_the_metrics_agree_on_one_judge():
    """Errors, a retried record, every route and an override: each of the three counts the same results."""
    judge = Judge(ScriptedEngine(retrying_once("review")), config=JudgeConfig(gate="adequacy"))
    summary, metrics = summary_of("adequacy"), Metrics(gates=["adequacy"])
    judge.stream.subscribe(summary)
    judge.stream.subscribe(metrics)
    judge.judge_batch([record(case, i) for i, case in enumerate(CASES)] + [{"id": "bad"}])
    judge.judge_batch([record("more", 9), {"question": "no id"}])
    stats = judge.stats

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"gate": "adequacy", **labels})

    assert stats.retries == 1  # the retried record counts once, with both attempts' tokens
    assert (stats.items, stats.verdicts, stats.errors) == (8, 6, 2)
    assert (summary.items, summary.verdicts, summary.errors) == (8, 6, 2)
    assert sample("suffice_verdicts_total") == 6
    errors = {t: sample("suffice_item_errors_total", type=t) for t in stats.error_types}
    assert errors == {t: float(n) for t, n in stats.error_types.items()} and sum(errors.values()) == 2
    assert summary.prompt_tokens == stats.prompt_tokens == sample("suffice_prompt_tokens_total") > 0
    assert summary.completion_tokens == stats.completion_tokens == sample("suffice_completion_tokens_total") > 0
    routes = {route: sample("suffice_routed_verdicts_total", route=route) for route in summary.routes}
    assert routes == {route: float(n) for route, n in summary.routes.items()}
    assert summary.routes == {"deliver": 2, "abstain": 1, "human_review": 1, "retrieve_more": 2}
    assert summary.overrides == sample("suffice_decision_overrides_total") == 1
    assert sample("suffice_request_duration_seconds_count") == 2  # one observation a batch


def write_records(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_an_observer_of_a_batch_run_hears_each_row_written_once_and_agrees_with_the_summary(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    records = [record(case, i) for i, case in enumerate(CASES)] + [{"id": "bad"}, record("deliver", 0)]
    write_records(source, records)
    judges: list[Judge] = []

    def opener(config: JudgeConfig) -> Judge:
        judges.append(Judge(ScriptedEngine(scripted), config=config))
        return judges[-1]

    seen, mirror = Seen(), summary_of("adequacy")
    report = judge_file(
        JudgeConfig(gate="adequacy"),
        source,
        out,
        BatchOptions(batch_size=2),
        open_judge=opener,
        observers=[seen, mirror],
    )
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(seen.ids, key=str) == sorted((row["id"] for row in rows), key=str)
    assert len(seen.ids) == len(records)  # the repeated id's error row too
    skip = ("seconds", "verdicts_per_second")  # the run's time, set by the run on its own summary
    assert {k: v for k, v in mirror.to_dict().items() if k not in skip} == {
        k: v for k, v in report.summary.to_dict().items() if k not in skip
    }
    (judge,) = judges
    # The run's summary also counts the repeated id's row, which no judge saw.
    assert (judge.stats.items, judge.stats.verdicts) == (report.summary.items - 1, report.summary.verdicts)
    assert judge.stats.prompt_tokens == report.summary.prompt_tokens


def test_a_resumed_run_publishes_only_what_it_writes(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_records(source, [sufficiency_record(i) for i in range(3)])
    config, options = JudgeConfig(), BatchOptions(batch_size=2)
    judge_file(config, source, out, options, open_judge=lambda c: Judge(ScriptedEngine(good), config=c))
    write_records(source, [sufficiency_record(i) for i in range(5)])
    seen = Seen()
    judge_file(
        config, source, out, options, open_judge=lambda c: Judge(ScriptedEngine(good), config=c), observers=[seen]
    )
    assert seen.ids == ["r3", "r4"]
