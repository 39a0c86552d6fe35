"""``detail="auto"`` (issue 41's cascade): every record decided decision-only, a full verdict only for those that do
not deliver or lie within the margin of the threshold, the row saying which (scripted engine: no model)."""

from __future__ import annotations

import json
import math
import re

import pytest

from suffice.cli.judge_cmd import config_from_args
from suffice.cli.main import build_parser
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates.decision_mode import AutoGate
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.judge import Judge
from suffice.rows.row_types import result_row_model
from suffice.rows.shaping import result_row
from suffice.serving.base import Generation, GenerationRequest
from tests.fakes import ScriptedEngine
from tests.test_judge import GOOD, rec

FULL = json.dumps(GOOD, separators=(",", ":"))


class CascadeEngine(ScriptedEngine):
    """Answers a full verdict to a full prompt and, to a decision-only one, the decision with the probability
    ``p[i]`` for the record whose question is ``Question i?`` (``None``: no log-probabilities reported)."""

    cacheable = True

    def __init__(self, p: dict[int, float | None]) -> None:
        super().__init__(self.answer)
        self.p = p
        self.kinds: list[list[str]] = []

    def generate(self, requests, progress=None, cancel=None):  # type: ignore[no-untyped-def]
        self.kinds.append(["full" if r.constraint.matches(FULL) else "decision" for r in requests])
        return super().generate(requests, progress, cancel)

    def answer(self, request: GenerationRequest) -> str | Generation:
        if request.constraint.matches(FULL):
            return FULL
        p = self.p[int(re.findall(r"Question (\d+)\?", request.messages[-1]["content"])[-1])]
        value = "true" if p is None or p >= 0.5 else "false"
        text = '{"is_sufficient":' + value + "}"
        if p is None:
            return Generation(text, "stop", 10, 3)
        top = ({}, {"true": math.log(p), "false": math.log(1 - p)}, {})
        return Generation(text, "stop", 10, 3, tokens=('{"is_sufficient":', value, "}"), top_logprobs=top)


def cascade(p: dict[int, float | None], **config: object) -> tuple[Judge, CascadeEngine, list]:
    engine = CascadeEngine(p)
    judge = Judge(engine, config=JudgeConfig(detail="auto", cache=config.pop("cache", False), **config))  # type: ignore[arg-type]
    return judge, engine, judge.judge_batch([rec(i) for i in p])


def test_only_records_that_do_not_deliver_or_lie_near_the_threshold_get_full_verdicts():
    judge, engine, results = cascade({0: 0.95, 1: 0.55, 2: 0.2, 3: 0.61, 4: 0.49})
    # One decision-only batch for every record, then one full batch for the three picked.
    assert engine.kinds == [["decision"] * 5, ["full"] * 3]
    details = [r.cascade.detail for r in results]
    assert details == ["decision", "full", "full", "decision", "full"]
    assert [r.cascade.reason for r in results] == [None, "within margin", "not deliver", None, "not deliver"]
    for r, detail in zip(results, details, strict=True):
        assert isinstance(r.verdict, SufficiencyVerdict if detail == "full" else DecisionVerdict)
        assert r.cascade.margin == 0.1
    assert results[1].cascade.probability == pytest.approx(0.55)
    # A full row's tokens are both passes'.
    assert results[1].tokens.completion == 3 + len(FULL.split())
    assert [r.id for r in results] == [f"r{i}" for i in range(5)]
    assert (judge.stats.items, judge.stats.verdicts, judge.stats.errors) == (5, 5, 0)


def test_routes_follow_the_verdict_each_row_holds():
    judge, _, results = cascade({0: 0.95, 1: 0.2})
    routes = [judge.gate.route(r.verdict).route for r in results]
    assert routes == ["deliver", judge.gate.inner.route(results[1].verdict).route]
    assert isinstance(judge.gate, AutoGate)


@pytest.mark.parametrize(
    ("margin", "full"),
    [(0.0, [2]), (0.05, [1, 2]), (0.5, [0, 1, 2])],
    ids=["zero-only-negatives", "between", "half-every-record"],
)
def test_the_margin_picks_which_delivered_records_get_full_verdicts(margin, full):
    _, _, results = cascade({0: 0.99, 1: 0.53, 2: 0.3}, auto_margin=margin)
    assert [i for i, r in enumerate(results) if r.cascade.detail == "full"] == full


def test_a_probability_exactly_at_the_margins_edge_is_within_it():
    gate = AutoGate(JudgeConfig().make_gate())

    def verdict(p: float | None) -> DecisionVerdict:
        return DecisionVerdict(decision="true", positive=True, probability=p, prompt_version="v")

    assert gate.escalate(verdict(0.75), 0.25) == "within margin"
    assert gate.escalate(verdict(0.7500001), 0.25) is None
    assert gate.escalate(verdict(1.0), 0.5) == "within margin"
    assert gate.escalate(verdict(None), 0.0) == "no probability"
    negative = DecisionVerdict(decision="false", positive=False, probability=0.0, prompt_version="v")
    assert gate.escalate(negative, 0.0) == "not deliver"


def test_a_decision_without_a_probability_gets_a_full_verdict():
    _, engine, results = cascade({0: None, 1: 0.9})
    assert engine.kinds == [["decision", "decision"], ["full"]]
    assert [r.cascade.detail for r in results] == ["full", "decision"]
    assert results[0].cascade.reason == "no probability" and results[0].cascade.probability is None


def test_no_full_pass_when_every_decision_stands():
    _, engine, results = cascade({0: 0.9, 1: 0.99})
    assert engine.kinds == [["decision", "decision"]]
    assert all(r.cascade.detail == "decision" for r in results)


def test_a_record_that_cannot_be_read_is_one_error_row_judged_once():
    engine = CascadeEngine({0: 0.2})
    judge = Judge(engine, config=JudgeConfig(detail="auto", cache=False))
    bad, good = judge.judge_batch([{"id": "bad"}, rec(0)])
    assert bad.error is not None and bad.cascade.detail == "decision"
    assert good.cascade.detail == "full" and isinstance(good.verdict, SufficiencyVerdict)
    assert (judge.stats.items, judge.stats.verdicts, judge.stats.errors) == (2, 1, 1)


def test_each_pass_uses_its_own_details_cache_keys(tmp_path):
    path = tmp_path / "c.sqlite3"
    p = {0: 0.95, 1: 0.2, 2: 0.55}
    _, engine, first = cascade(p, cache=path)
    assert engine.kinds == [["decision"] * 3, ["full"] * 2]
    # A decision-only run finds every decision; a full run finds the two full verdicts and judges the third.
    decision = Judge(CascadeEngine(p), config=JudgeConfig(detail="decision", cache=path))
    assert all(r.cached is not None for r in decision.judge_batch([rec(i) for i in p]))
    full_engine = CascadeEngine(p)
    full = Judge(full_engine, config=JudgeConfig(cache=path)).judge_batch([rec(i) for i in p])
    assert [r.cached is not None for r in full] == [False, True, True]
    assert full_engine.kinds == [["full"]]
    # The cascade again: no engine work, the same choices.
    _, again_engine, again = cascade(p, cache=path)
    assert again_engine.kinds == []
    assert [r.cascade for r in again] == [r.cascade for r in first]


def test_the_row_says_which_and_fits_the_auto_row_schema():
    judge, _, results = cascade({0: 0.95, 1: 0.2})
    rows = [result_row(r, judge.gate, "suffice", i) for i, r in enumerate(results, 1)]
    assert [row["cascade"]["detail"] for row in rows] == ["decision", "full"]
    assert rows[0]["verdict"]["detail"] == "decision" and "is_sufficient" in rows[1]["verdict"]
    model = result_row_model("sufficiency", "auto")
    for row in rows:
        model.model_validate(row)
    # Other details' rows carry no cascade column.
    plain = Judge(CascadeEngine({0: 0.9}), config=JudgeConfig(detail="decision", cache=False)).judge_batch([rec(0)])
    assert "cascade" not in result_row(plain[0], judge.gate, "suffice", 1)


def test_seed_rows_of_both_kinds_export():
    judge, _, results = cascade({0: 0.95, 1: 0.2})
    decided, full = (result_row(r, judge.gate, "seed", i) for i, r in enumerate(results, 1))
    assert decided["verdict"] == {"decision": True, "probability": pytest.approx(0.95)}
    assert full["verdict"]["is_sufficient"] is True


@pytest.mark.parametrize("margin", [-0.01, 0.51, float("nan"), True, "0.1", None])
def test_a_bad_margin_is_refused_naming_it(margin):
    with pytest.raises(ConfigError) as caught:
        JudgeConfig(detail="auto", auto_margin=margin)  # type: ignore[arg-type]
    assert caught.value.parameter == "auto_margin"


def test_an_unknown_detail_is_refused_naming_it():
    with pytest.raises(ConfigError) as caught:
        JudgeConfig(detail="cascade")
    assert caught.value.parameter == "detail"


def test_the_judge_command_takes_the_detail_and_the_margin():
    args = build_parser().parse_args(
        ["judge", "in.jsonl", "-o", "out.jsonl", "--detail", "auto", "--auto-margin", "0.2"]
    )
    config = config_from_args(args)
    assert (config.detail, config.auto_margin) == ("auto", 0.2)
    assert isinstance(config.make_gate(), AutoGate)


def test_a_parquet_output_of_a_cascade_is_refused_naming_the_detail(tmp_path):
    from suffice.batch.runner import judge_file

    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(rec(0)) + "\n")
    with pytest.raises(ConfigError) as caught:
        judge_file(JudgeConfig(detail="auto", cache=False), source, tmp_path / "out.parquet")
    assert caught.value.parameter == "detail"


def test_the_docs_give_the_default_margin_and_the_threshold():
    from pathlib import Path

    from suffice.gates.decision_mode import DECISION_THRESHOLD

    text = (Path(__file__).resolve().parents[1] / "docs" / "judge.md").read_text(encoding="utf-8")
    section = text[text.index("### The cascade") :]
    assert f"default {JudgeConfig().auto_margin}, from 0 to 0.5" in section
    assert f"the decision threshold {DECISION_THRESHOLD}" in section
    assert f"at or below {DECISION_THRESHOLD + JudgeConfig().auto_margin:.1f}" in section


def test_the_service_cascades_and_its_rows_say_which():
    from fastapi.testclient import TestClient

    from suffice.server.app import create_app
    from suffice.server.config import ServeConfig
    from suffice.server.service import GateService

    engine = CascadeEngine({0: 0.95, 1: 0.2})
    config = ServeConfig(judge=JudgeConfig(detail="auto", auto_margin=0.2, cache=False), gates=("sufficiency",))
    client = TestClient(create_app(GateService(config, engine), config, None), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/sufficiency", json=[rec(0), rec(1)])
    assert response.status_code == 200, response.text
    rows = response.json()["results"]
    assert [row["cascade"]["detail"] for row in rows] == ["decision", "full"]
    assert [row["cascade"]["margin"] for row in rows] == [0.2, 0.2]
    assert engine.kinds == [["decision", "decision"], ["full"]]
    model = result_row_model("sufficiency", "auto", position="index")
    for row in rows:
        model.model_validate(row)


def test_a_batch_run_writes_both_kinds_of_row_and_a_resume_must_keep_the_margin(tmp_path):
    from suffice.batch.runner import judge_file
    from suffice.exceptions import OutputMismatchError

    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(rec(i)) + "\n" for i in range(3)))
    p = {0: 0.95, 1: 0.2, 2: 0.55}
    config = JudgeConfig(detail="auto", cache=False)
    report = judge_file(config, source, out, open_judge=lambda c: Judge(CascadeEngine(p), config=c))
    assert (report.total, report.errors) == (3, 0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["cascade"]["detail"] for row in rows] == ["decision", "full", "full"]
    other = JudgeConfig(detail="auto", auto_margin=0.3, cache=False)
    with pytest.raises(OutputMismatchError):
        judge_file(other, source, out, open_judge=lambda c: Judge(CascadeEngine(p), config=c))
