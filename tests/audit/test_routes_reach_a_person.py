"""Every route to a person reaches a person (issue 37): from ``suffice judge``, ``suffice serve``, the
``Pipeline`` and an integration over a ``Judge``, each ``human_review`` route is queued for review with
the rule that sent it, the record as judged, the verdict and the run's settings; a run with no queue
says how many records it routed to nobody.  All on the scripted engine; the real engine's test is in
``tests/server/test_real_routes.py``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from suffice.audit import AuditLog
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.harness.pipeline import Pipeline, PipelineConfig
from suffice.harness.retrieval import FunctionRetriever
from suffice.integrations.gating import DocumentGate, Evidence
from suffice.judge import Judge
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving.base import GenerationRequest
from tests.adequacy import criteria
from tests.fakes import ScriptedEngine, recovery_reply

QUESTION = "Who wrote the notes, and when?"
RESPONSE = "Ada Lovelace wrote the notes in 1843."
CHUNK = {"id": "ada", "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"}


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


Script = Callable[[GenerationRequest], str]


def PARTIAL(request: GenerationRequest) -> str:
    """The response's one sentence partly supported (the author, not the year): PARTIALLY_SUFFICIENT."""
    return recovery_reply(request, "partial", notice="No passage gives the year.", queries=("Ada Lovelace notes year",))


def INSUFFICIENT(request: GenerationRequest) -> str:
    return recovery_reply(
        request, "unsupported", notice="No passage answers the question.", queries=("Analytical Engine notes author",)
    )


def constant(text: str) -> Script:
    return lambda request: text


def adequacy(recommendation: str, score: float = 0.9, decision: str = "PASS", rubric: str = "customer-support") -> str:
    names = ("factual_coverage", "temporal_relevance", "source_authority", "entity_completeness", "rubric_alignment")
    return compact(
        {
            "adequacy_decision": decision,
            "adequacy_score": score,
            "criteria": criteria(rubric, score),
            "dimensions": {n: {"score": score, "assessment": "a"} for n in names},
            "missing_information": [] if decision == "PASS" else ["the refund window"],
            "recommendation": recommendation,
            "rationale": "r",
        }
    )


def record(rid: str = "q1", **more: Any) -> dict[str, Any]:
    return {"id": rid, "question": QUESTION, "chunks": [CHUNK], "response": RESPONSE, **more}


def reviews(db: Path) -> list[dict[str, Any]]:
    log = AuditLog(db)
    try:
        return [{**r, "payload": json.loads(r["payload"])} for r in log.reviews()]
    finally:
        log.close()


def check_review(review: dict[str, Any], rule: str, item_id: str = "q1") -> dict[str, Any]:
    assert review["item_id"] == item_id and review["reason"].startswith(f"{rule}: ")
    payload = review["payload"]
    assert payload["rule"] == rule
    assert payload["question"] == QUESTION
    assert [c["id"] for c in payload["chunks"]] == ["ada"] and payload["chunks"][0]["text"] == CHUNK["text"]
    assert payload["verdict"] is not None and payload["settings"]["gate"] == review["gate"]
    return payload


# -- suffice judge ------------------------------------------------------------------------------------------
def judge_cli(tmp_path: Path, monkeypatch, script, records, *args: str) -> int:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    engine = ScriptedEngine(lambda request: script(request))
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(engine, config=config)))
    return main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress", *args])


@pytest.mark.parametrize(
    ("script", "extra", "args", "rule"),
    [
        (PARTIAL, {}, ["--gate", "recovery"], "partial_under_high_stakes"),
        (INSUFFICIENT, {"retrieval_exhausted": True}, ["--gate", "recovery"], "abstained_high_stakes"),
        (INSUFFICIENT, {}, ["--gate", "recovery", "--retrieval-exhausted", "true"], "abstained_high_stakes"),
        (
            constant(adequacy("ESCALATE_TO_HUMAN")),
            {},
            ["--gate", "adequacy", "--rubric", "customer-support"],
            "model_escalated",
        ),
        (
            constant(adequacy("FLAG_AS_UNANSWERABLE")),
            {},
            ["--gate", "adequacy", "--rubric", "customer-support"],
            "model_flagged_unanswerable",
        ),
        (
            constant(adequacy("RETRIEVE_MORE", 0.1, "FAIL")),
            {"retrieval_exhausted": True},
            ["--gate", "adequacy", "--rubric", "customer-support"],
            "adequacy_rounds_exhausted",
        ),
    ],
)
def test_suffice_judge_queues_each_route_to_a_person_with_its_rule(
    tmp_path, monkeypatch, capsys, script, extra, args, rule
):
    db = tmp_path / "audit.db"
    judge_cli(tmp_path, monkeypatch, script, [record(**extra)], *args, "--audit-db", str(db))
    [review] = reviews(db)
    payload = check_review(review, rule)
    assert {"model", "engine", "prompt_version"} <= set(payload["settings"])  # the gate's settings and the engine's
    [row] = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert row["verdict"]["decision"]["rule"] == rule
    assert "1 record(s) sent to a person: queued for review" in capsys.readouterr().err


def test_the_same_record_with_retrieval_left_is_not_queued(tmp_path, monkeypatch, capsys):
    db = tmp_path / "audit.db"
    judge_cli(tmp_path, monkeypatch, INSUFFICIENT, [record()], "--gate", "recovery", "--audit-db", str(db))
    assert reviews(db) == []
    assert "sent to a person" not in capsys.readouterr().err


def test_suffice_judge_without_a_queue_says_how_many_went_to_nobody(tmp_path, monkeypatch, capsys):
    records = [record("a"), record("b"), record("c", response="Something else entirely.")]
    judge_cli(tmp_path, monkeypatch, PARTIAL, records, "--gate", "recovery")
    err = capsys.readouterr().err
    assert "warning: 3 record(s) routed to a person (human_review), but no review queue is configured" in err
    assert "--audit-db" in err


# -- suffice serve ------------------------------------------------------------------------------------------
def serve(tmp_path: Path, script: Script, db: Path | None) -> tuple[GateService, TestClient]:
    config = ServeConfig(judge=JudgeConfig(gate="recovery"), gates=("recovery",), audit_db=db)
    service = GateService(config, ScriptedEngine(script))
    return service, TestClient(create_app(service, config), base_url="http://127.0.0.1")


def test_suffice_serve_queues_a_route_to_a_person_with_its_rule(tmp_path):
    db = tmp_path / "audit.db"
    service, client = serve(tmp_path, INSUFFICIENT, db)
    body = client.post(
        "/v1/judge/recovery", json={"items": [record()], "options": {"retrieval_exhausted": True}}
    ).json()
    service.close()
    assert body["results"][0]["verdict"]["decision"]["rule"] == "abstained_high_stakes"
    [review] = reviews(db)
    payload = check_review(review, "abstained_high_stakes")
    assert payload["response"] == RESPONSE and payload["settings"]["retrieval_exhausted"] == "true"
    assert payload["queries"] == ["Analytical Engine notes author"]


def test_suffice_serve_without_a_queue_logs_how_many_went_to_nobody(tmp_path, caplog):
    service, client = serve(tmp_path, PARTIAL, None)
    with caplog.at_level(logging.WARNING, logger="suffice.server"):
        client.post("/v1/judge/recovery", json=[record("a"), record("b")])
        service.close()
    assert "2 record(s) were routed to a person (human_review) with no review queue configured" in caplog.text


# -- the Pipeline -------------------------------------------------------------------------------------------
def test_the_pipeline_queues_a_model_escalation_with_its_rule(tmp_path):
    judge = Judge(
        ScriptedEngine(lambda request: adequacy("ESCALATE_TO_HUMAN")),
        config=JudgeConfig(gate="adequacy", options={"rubric": "customer-support"}),
    )
    run = Pipeline(judge, FunctionRetriever(lambda q, k: []), PipelineConfig(), audit=tmp_path / "audit.db")
    [outcome] = run.run([{"id": "q1", "question": QUESTION, "chunks": [CHUNK]}])
    assert (outcome.kind, outcome.rule) == ("review", "model_escalated")
    [review] = reviews(tmp_path / "audit.db")
    assert review["id"] == outcome.review_id
    payload = check_review(review, "model_escalated")
    assert payload["settings"]["pipeline"]["max_rounds"] == 3


# -- an integration over a Judge ----------------------------------------------------------------------------
def test_an_integration_over_a_judge_with_an_audit_log_queues_the_route(tmp_path):
    judge = Judge(ScriptedEngine(PARTIAL), config=JudgeConfig(gate="recovery"))
    log = AuditLog(tmp_path / "audit.db")
    gate = DocumentGate(judge, on_insufficient="keep", audit=log)
    evidence = [Evidence(CHUNK["text"], id="ada", source="ada.txt")]
    _, outcome = gate.select(QUESTION, evidence, RESPONSE)
    assert outcome is not None and (outcome.routing.route, outcome.routing.rule) == (
        "human_review",
        "partial_under_high_stakes",
    )
    [review] = [{**r, "payload": json.loads(r["payload"])} for r in log.reviews()]
    assert review["payload"]["rule"] == "partial_under_high_stakes"
    assert review["payload"]["question"] == QUESTION and review["payload"]["response"] == RESPONSE
    assert [row["item_id"] for row in log.rows()] == [review["item_id"]]
    log.close()


def test_an_audit_log_needs_an_in_process_judge(tmp_path):
    from suffice import Client, ConfigError

    log = AuditLog(tmp_path / "audit.db")
    with pytest.raises(ConfigError, match="audit"):
        DocumentGate(Client("http://127.0.0.1:9"), gate="recovery", audit=log)
    log.close()


def test_a_bad_retrieval_exhausted_names_the_field():
    from suffice.exceptions import InputError
    from suffice.records.item import parse_record

    with pytest.raises(InputError) as caught:
        parse_record(record(retrieval_exhausted="yes"))
    assert caught.value.field == "retrieval_exhausted"


def test_the_docs_name_every_rule_and_the_default_minimum():
    from suffice.gates.adequacy.store import DEFAULT_DIMENSION_MINIMUM
    from suffice.grammars.routes import REVIEW_RULES

    docs = Path(__file__).parents[2] / "docs"
    gates = (docs / "gates.md").read_text()
    assert [rule for rule in REVIEW_RULES if f"`{rule}`" not in gates] == []
    assert f"else {DEFAULT_DIMENSION_MINIMUM:g} (`DEFAULT_DIMENSION_MINIMUM`)" in (docs / "seeds.md").read_text()


def test_a_high_stakes_review_needs_two_reviewers_and_a_low_stakes_one_one(tmp_path, monkeypatch):
    db = tmp_path / "audit.db"
    judge_cli(tmp_path, monkeypatch, PARTIAL, [record()], "--gate", "recovery", "--audit-db", str(db))
    [review] = reviews(db)
    assert review["payload"]["high_stakes"] is True and review["reviewers"] == 2
    low = tmp_path / "low"
    low.mkdir()
    escalated = adequacy("ESCALATE_TO_HUMAN")
    args = ["--gate", "adequacy", "--rubric", "customer-support", "--audit-db", str(low / "audit.db")]
    judge_cli(low, monkeypatch, constant(escalated), [record()], *args)
    [review] = reviews(low / "audit.db")
    assert review["payload"]["high_stakes"] is False and review["reviewers"] == 1
