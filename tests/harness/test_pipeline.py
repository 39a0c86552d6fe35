"""Loop logic on a scripted engine; one run of the loop on the real engine."""

from __future__ import annotations

import json
import sqlite3

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.harness.audit import AuditLog
from suffice.harness.pipeline import Pipeline, PipelineConfig
from suffice.harness.retrieval import merge_chunks
from suffice.judge import Judge
from suffice.records import Chunk
from tests.fakes import ScriptedEngine
from tests.harness.hotpot import hotpot_retriever, load_pairs, questions


def sufficiency_json(sufficient: bool, n: int) -> str:
    return json.dumps(
        {
            "required_entities": [{"entity": "x", "covered": sufficient}],
            "is_sufficient": sufficient,
            "missing_information": [] if sufficient else ["the second paragraph"],
            "contradictions": [],
            "confidence": 0.9,
            "reasoning": "r",
            "chunk_useful": "".join("Y" if i == 0 else "N" for i in range(n)),
        },
        separators=(",", ":"),
    )


def labels(request) -> int:
    return request.messages[-1]["content"].count("\nID: ") + request.messages[-1]["content"].startswith("ID: ")


def complete_when_all_ten(request) -> str:
    n = labels(request)
    return sufficiency_json(n >= 10, n)


def run(tmp_path, script, config=None, records=None):
    pairs = load_pairs()
    calls = []
    engine = ScriptedEngine(script, max_model_len=32768)
    pipeline = Pipeline(
        Judge(engine, "sufficiency"), hotpot_retriever(pairs, calls), config, audit=tmp_path / "audit.db"
    )
    outcomes = pipeline.run(records if records is not None else questions(pairs))
    return pairs, calls, engine, pipeline, outcomes


def test_drop_then_widened_retrieval_delivers_in_round_two(tmp_path):
    pairs, calls, engine, pipeline, outcomes = run(tmp_path, complete_when_all_ten)
    assert len(outcomes) == len(pairs)
    assert all(o.kind == "delivered" and o.rounds == 2 for o in outcomes)
    assert engine.calls == [len(pairs), len(pairs)]  # one engine call per round, all questions together
    assert [c.width for c in calls[: len(pairs)]] == [5] * len(pairs)
    for outcome in outcomes:
        # merged and de-duplicated: the 9 paragraphs plus the missing one
        assert len(outcome.chunk_ids) == len(set(outcome.chunk_ids)) == 10
        routes = [t.route for t in outcome.trace]
        assert routes == ["retrieval", "retrieve_more", "retrieval", "deliver"]
        assert outcome.trace[2].new_chunks == 1
    log = pipeline.audit
    assert log.verify().ok and log.verify().rows == 2 * len(pairs)
    rows = list(log.rows())
    assert {r["round"] for r in rows} == {1, 2}
    assert all(r["query_hash"] and json.loads(r["chunks"])[0]["sha256"] for r in rows)


def test_budget_spent_is_escalated_never_silent(tmp_path):
    _, _, engine, pipeline, outcomes = run(
        tmp_path, lambda r: sufficiency_json(False, labels(r)), PipelineConfig(max_rounds=3, base_width=1)
    )
    # width 1 → drop set, judged; width 2 → the drop set again: nothing new, escalated at once.
    assert all(o.kind == "review" and "nothing new" in o.reason and o.rounds == 1 for o in outcomes)
    assert engine.calls == [6]
    _, _, engine, pipeline, outcomes = run(
        tmp_path / "second", lambda r: sufficiency_json(False, labels(r)), PipelineConfig(max_rounds=2)
    )
    assert all(o.kind == "review" and "budget of 2 rounds" in o.reason and o.rounds == 2 for o in outcomes)
    reviews = pipeline.audit.reviews()
    assert {r["item_id"] for r in reviews} == {o.id for o in outcomes}
    payload = json.loads(reviews[0]["payload"])
    assert payload["question"] and payload["chunks"] and payload["verdict"]["is_sufficient"] is False


def test_bad_records_and_engine_failures_end_in_review(tmp_path):
    records = [*questions(load_pairs())[:2], {"question": "no id"}]
    *_, outcomes = run(tmp_path, complete_when_all_ten, records=records)
    assert [o.kind for o in outcomes] == ["delivered", "delivered", "review"]
    assert "input error" in outcomes[2].reason


def test_altering_an_audit_row_is_detected(tmp_path):
    _, _, _, pipeline, _ = run(tmp_path, complete_when_all_ten)
    pipeline.audit.close()
    with sqlite3.connect(tmp_path / "audit.db") as db:
        db.execute("UPDATE evaluations SET decision = 'deliver' WHERE seq = 3")
    assert AuditLog(tmp_path / "audit.db").verify().first_broken == 3


def test_merge_dedupes_by_source_and_content():
    existing = [Chunk(0, "Alpha  text", "A"), Chunk(1, "Beta", "B")]
    merged, added = merge_chunks(
        existing, [{"id": 0, "text": "Alpha text", "source": "A"}, {"id": 1, "text": "Gamma", "source": "C"}], 2
    )
    assert added == 1 and [c.id for c in merged] == [0, 1, "r2-1"]


def test_config_errors_name_the_parameter():
    with pytest.raises(ConfigError) as info:
        PipelineConfig(max_rounds=0)
    assert info.value.parameter == "max_rounds"


@pytest.mark.engine
def test_loop_on_the_real_engine(tmp_path):
    pairs = load_pairs()
    calls: list = []
    with Judge.open(JudgeConfig(backend="xgrammar")) as judge:
        pipeline = Pipeline(
            judge, hotpot_retriever(pairs, calls), PipelineConfig(rewrite_queries=True), audit=tmp_path / "a.db"
        )
        outcomes = pipeline.run(questions(pairs)[:4])
    assert len(outcomes) == 4 and all(o.kind in {"delivered", "abstained", "review"} for o in outcomes)
    evaluations = sum(o.rounds for o in outcomes)
    report = pipeline.audit.verify()
    assert report.ok and report.rows == evaluations
    assert all(r["model_id"].startswith("SmolLM2") and r["weights_hash"] for r in pipeline.audit.rows())
