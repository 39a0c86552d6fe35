"""Two failed generations for one record put it in the review queue with the raw
output, in ``suffice judge`` (the batch runner) and ``suffice serve`` (the service),
when an audit log is given."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from suffice.audit import AuditLog
from suffice.batch import BatchOptions, judge_file
from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving.base import GenerationRequest
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine

BROKEN = '{"not": "a verdict"'


def script(request: GenerationRequest) -> str:
    """Valid output, except for the record whose question says ``broken``."""
    return BROKEN if "broken" in request.messages[-1]["content"] else good(request)


def records() -> list[dict[str, object]]:
    return [
        {"id": "fine", "question": "Who wrote it?", "chunks": [{"id": 0, "text": "Ada wrote it."}]},
        {"id": "bad", "question": "Who wrote the broken one?", "chunks": [{"id": 0, "text": "Ada wrote it."}]},
    ]


def reviews_of(db: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    log = AuditLog(db)
    try:
        return log.reviews(), list(log.rows())
    finally:
        log.close()


def check(db: Path) -> None:
    reviews, rows = reviews_of(db)
    assert [r["item_id"] for r in reviews] == ["bad"]
    review = reviews[0]
    assert "two generations failed validation" in str(review["reason"])
    payload = json.loads(str(review["payload"]))
    assert payload["raw_output"] == BROKEN
    assert payload["question"] == "Who wrote the broken one?"
    row = next(r for r in rows if r["item_id"] == "bad")
    assert review["evaluation_seq"] == row["seq"]
    assert review["run_id"] == row["run_id"]


def test_suffice_judge_queues_a_record_whose_two_generations_failed(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records()))
    db = tmp_path / "audit.db"
    engine = ScriptedEngine(script)
    judge_file(
        JudgeConfig(),
        source,
        tmp_path / "out.jsonl",
        BatchOptions(audit_db=db),
        open_judge=lambda config: Judge(engine, config=config),
    )
    check(db)


def test_suffice_serve_queues_a_record_whose_two_generations_failed(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",), audit_db=db)
    service = GateService(config, ScriptedEngine(script))
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    body = client.post("/v1/judge/sufficiency", json=records()).json()
    service.close()
    assert [r.get("error") is None for r in body["results"]] == [True, False]
    check(db)


def test_no_review_without_a_failed_retry(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",), audit_db=db)
    service = GateService(config, ScriptedEngine(good))
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    client.post("/v1/judge/sufficiency", json=records())
    service.close()
    assert reviews_of(db)[0] == []
