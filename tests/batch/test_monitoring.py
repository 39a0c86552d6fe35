"""The batch summary counts what the seeds say to watch: routes per gate, abstention and
review rates, and how often the code's decision overrides the model's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.batch.summary import RunSummary
from suffice.config import JudgeConfig
from suffice.serving.base import Generation
from tests.batch.test_runner import good, opener
from tests.batch.test_runner import record as sufficiency_record
from tests.fakes import ScriptedEngine
from tests.monitoring import record, scripted

#: Two delivered, one overridden to abstain, one to human review, one to retrieve more.
CASES = ["deliver", "deliver", "overridden", "review", "more"]


def run(tmp_path: Path, records: list[dict[str, object]], config: JudgeConfig, engine: ScriptedEngine) -> RunSummary:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return judge_file(config, source, out, BatchOptions(batch_size=2), open_judge=opener(engine)).summary


@pytest.fixture
def summary(tmp_path: Path) -> RunSummary:
    records = [record(case, i) for i, case in enumerate(CASES)] + [{"id": "bad"}]
    return run(tmp_path, records, JudgeConfig(gate="adequacy"), ScriptedEngine(scripted))


def test_the_summary_counts_every_route_of_the_gate(summary):
    assert summary.gate == "adequacy"
    assert summary.routes == {"deliver": 2, "abstain": 1, "human_review": 1, "retrieve_more": 1}


def test_the_summary_gives_each_routes_share_of_the_verdicts(summary):
    assert summary.route_share("deliver") == pytest.approx(2 / 5)
    assert summary.route_share("retrieve_more") == pytest.approx(1 / 5)


def test_the_summary_gives_the_abstention_and_review_rates(summary):
    assert summary.abstention_rate == pytest.approx(1 / 5)
    assert summary.review_rate == pytest.approx(1 / 5)


def test_the_summary_counts_the_code_overriding_the_model(summary):
    assert (summary.model_decided, summary.overrides) == (5, 1)
    assert summary.override_rate == pytest.approx(1 / 5)


def test_the_summary_table_shows_routes_and_rates(summary):
    table = summary.table()
    lines = {line.split("  ")[0].strip(): line.split("  ", 1)[1].strip() for line in table.splitlines()}
    assert lines["route deliver"] == "2 (40.0%)"
    assert lines["route abstain"] == "1 (20.0%)"
    assert lines["abstention rate"] == "20.0%"
    assert lines["review rate"] == "20.0%"
    assert lines["override rate (code over model)"] == "20.0% (of 5 with a model decision)"


def test_the_summary_as_json_holds_routes_and_rates(summary):
    values = json.loads(json.dumps(summary.to_dict()))
    assert values["gate"] == "adequacy"
    assert values["routes"] == {"deliver": 2, "retrieve_more": 1, "abstain": 1, "human_review": 1}
    assert values["route_shares"]["abstain"] == pytest.approx(0.2)
    assert (values["abstention_rate"], values["review_rate"], values["override_rate"]) == pytest.approx((0.2, 0.2, 0.2))
    assert values["errors"] == 1


def test_a_gate_without_abstention_routes_has_zero_rates_not_none(tmp_path):
    summary = run(tmp_path, [sufficiency_record(0), sufficiency_record(1)], JudgeConfig(), ScriptedEngine(good))
    assert summary.routes == {"deliver": 2}
    assert (summary.abstention_rate, summary.review_rate, summary.override_rate) == (0.0, 0.0, 0.0)


def test_decision_only_mode_has_no_model_decision_to_override(tmp_path):
    def decision(request):
        return '{"is_sufficient":true}'

    summary = run(tmp_path, [sufficiency_record(0)], JudgeConfig(detail="decision"), ScriptedEngine(decision))
    assert summary.routes == {"deliver": 1}
    assert (summary.model_decided, summary.override_rate) == (0, None)


def test_a_calibrated_sufficiency_decision_over_the_models_boolean_is_an_override():
    from tests.gates.test_one_definition import GATE, RESULT

    summary = RunSummary(
        positive=GATE.is_positive, route=lambda v: GATE.route(v).route, model_positive=GATE.model_positive
    )
    summary.add([{"id": "a"}], [RESULT])
    assert summary.routes == {"retrieve_more": 1}
    assert (summary.overrides, summary.override_rate) == (1, 1.0)


@pytest.fixture
def token_summary(tmp_path: Path) -> RunSummary:
    """Two verdicts the model wrote in 10 and 30 tokens, one made without it (no chunk), one error row."""
    lengths = iter([10, 30])

    def counted(request):  # type: ignore[no-untyped-def]
        return Generation(good(request), "stop", 5, next(lengths))

    records = [sufficiency_record(0), sufficiency_record(1), {**sufficiency_record(2), "chunks": []}, {"id": "bad"}]
    return run(tmp_path, records, JudgeConfig(), ScriptedEngine(counted))


def test_the_summary_gives_the_mean_output_tokens_of_the_verdicts_the_model_wrote(token_summary):
    assert token_summary.tokens_per_verdict == 20


def test_the_summary_gives_the_most_output_tokens_of_a_verdict(token_summary):
    assert token_summary.output_tokens.max == 30


def test_the_summary_table_shows_the_output_tokens_per_verdict(token_summary):
    lines = {line.split("  ")[0].strip(): line.split("  ", 1)[1].strip() for line in token_summary.table().splitlines()}
    assert lines["output tokens per verdict"] == "mean 20, max 30 (of 2 the model generated)"


def test_the_summary_as_json_holds_the_output_tokens_per_verdict(token_summary):
    values = json.loads(json.dumps(token_summary.to_dict()))
    assert (values["tokens_per_verdict"], values["max_tokens_per_verdict"]) == (20, 30)


def test_a_run_without_verdicts_has_no_output_tokens_per_verdict(tmp_path):
    summary = run(tmp_path, [{"id": "bad"}], JudgeConfig(), ScriptedEngine(good))
    assert (summary.tokens_per_verdict, summary.output_tokens.max) == (None, None)
