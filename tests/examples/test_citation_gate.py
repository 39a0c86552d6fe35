"""A gate written outside suffice (examples/citation-gate, pip-installed in the test
environment) runs through the CLI, the service, calibration, Parquet output and the
audit log with no change to suffice.

The engine tests judge through the session's vLLM server (``--engine openai``), as the
other command-line engine tests do."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
from citation_gate import CitationVerdict
from fastapi.testclient import TestClient

import suffice
from suffice.cli.main import main
from suffice.exceptions import EXIT_OK, EXIT_USAGE
from suffice.judge import Judge
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving.base import GenerationRequest
from suffice.serving.engine_config import EngineConfig
from suffice.serving.openai import OpenAIEngine
from tests.conftest import load_records
from tests.fakes import ScriptedEngine
from tests.vllm_server import through

RESPONSE = "Ada Lovelace wrote the first program. She was born on the Moon."
RECORD = {
    "id": "c1",
    "question": "Who wrote the first program?",
    "response": RESPONSE,
    "chunks": [{"id": "k0", "text": "Ada Lovelace wrote the first program."}, {"id": "k1", "text": "Tea."}],
}


def one_cited(request: GenerationRequest) -> str:
    """The first sentence cites chunk 0, the second nothing; the model says PASS."""
    return '{"citations":[0,null],"decision":"PASS"}'


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    def open_scripted(cls: type[Judge], config: suffice.JudgeConfig) -> Judge:
        return cls(ScriptedEngine(one_cited), config=config)

    monkeypatch.setattr(Judge, "open", classmethod(open_scripted))


def write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_the_installed_example_is_a_registered_gate():
    assert "citation" in suffice.gate_names()


def test_its_option_is_checked_by_its_own_model_naming_the_option():
    with pytest.raises(suffice.ConfigError) as caught:
        suffice.JudgeConfig(gate="citation", options={"min_cited_share": 2})
    assert caught.value.parameter == "min_cited_share"


def test_an_option_it_does_not_declare_is_refused_naming_it():
    with pytest.raises(suffice.ConfigError) as caught:
        suffice.JudgeConfig(gate="citation", options={"rubric": "customer-support"})
    assert caught.value.parameter == "rubric"


def test_the_code_decides_from_the_option_not_from_the_models_pass(tmp_path: Path, scripted: None):
    out = tmp_path / "out.jsonl"
    code = main(["judge", str(write(tmp_path / "in.jsonl", [RECORD])), "-o", str(out), "--gate", "citation"])
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == EXIT_OK
    assert row["verdict"]["cited_share"] == 0.5
    assert row["verdict"]["passes"] is False


def test_gate_option_on_the_command_line_reaches_the_gate(tmp_path: Path, scripted: None):
    out = tmp_path / "out.jsonl"
    source = write(tmp_path / "in.jsonl", [RECORD])
    main(["judge", str(source), "-o", str(out), "--gate", "citation", "--gate-option", "min_cited_share=0.5"])
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["verdict"]["passes"] is True


def test_its_option_has_a_flag_of_its_own(tmp_path: Path, scripted: None):
    out = tmp_path / "out.jsonl"
    source = write(tmp_path / "in.jsonl", [RECORD])
    main(["judge", str(source), "-o", str(out), "--gate", "citation", "--min-cited-share", "0.5"])
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["verdict"]["passes"] is True


def test_a_gate_option_without_a_value_is_a_usage_error(tmp_path: Path, scripted: None):
    source = write(tmp_path / "in.jsonl", [RECORD])
    code = main(["judge", str(source), "-o", str(tmp_path / "o.jsonl"), "--gate", "citation", "--gate-option", "x"])
    assert code == EXIT_USAGE


def test_a_gate_option_of_another_gate_is_a_usage_error(tmp_path: Path, scripted: None):
    source = write(tmp_path / "in.jsonl", [RECORD])
    code = main(
        ["judge", str(source), "-o", str(tmp_path / "o.jsonl"), "--gate", "citation", "--rubric", "legal-review"]
    )
    assert code == EXIT_USAGE


def test_parquet_output_and_the_audit_log_hold_its_verdicts(tmp_path: Path, scripted: None):
    out, audit = tmp_path / "out.parquet", tmp_path / "audit.db"
    source = write(tmp_path / "in.jsonl", [RECORD])
    main(["judge", str(source), "-o", str(out), "--gate", "citation", "--audit-db", str(audit)])
    [row] = pq.read_table(out).to_pylist()
    with sqlite3.connect(audit) as db:
        [(gate, decision)] = db.execute("SELECT gate, decision FROM evaluations").fetchall()
    assert row["verdict"]["citations"][0]["chunk_id"] == "k0"
    assert (gate, decision) == ("citation", "abstain")


def test_the_service_takes_its_options_per_request_from_the_body():
    config = ServeConfig(gates=("citation",))
    client = TestClient(create_app(GateService(config, ScriptedEngine(one_cited)), config), base_url="http://127.0.0.1")
    body = {"items": [RECORD], "options": {"min_cited_share": 0.5}}
    [row] = client.post("/v1/judge/citation", json=body).json()["results"]
    assert row["verdict"]["passes"] is True


def test_the_service_refuses_an_option_it_does_not_declare_naming_it():
    config = ServeConfig(gates=("citation",))
    client = TestClient(create_app(GateService(config, ScriptedEngine(one_cited)), config), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/citation", json={"items": [RECORD], "options": {"rubric": "x"}})
    assert response.json()["detail"][0]["loc"] == ["body", "options", "rubric"]


def test_the_services_description_types_its_answer_by_its_verdict_model():
    config = ServeConfig(gates=("citation",))
    client = TestClient(create_app(GateService(config, ScriptedEngine(one_cited)), config), base_url="http://127.0.0.1")
    spec = client.get("/openapi.json").json()
    assert set(spec["components"]["schemas"]["CitationVerdict"]["properties"]) == set(CitationVerdict.model_fields)


def test_the_services_answer_is_valid_by_its_description():
    config = ServeConfig(gates=("citation",))
    client = TestClient(create_app(GateService(config, ScriptedEngine(one_cited)), config), base_url="http://127.0.0.1")
    spec = client.get("/openapi.json").json()
    body = client.post("/v1/judge/citation", json=[RECORD, {"id": "bad"}]).json()
    answer = spec["paths"]["/v1/judge/citation"]["post"]["responses"]["200"]["content"]["application/json"]
    jsonschema.Draft202012Validator({**answer["schema"], "components": spec["components"]}).validate(body)


def test_suffice_schema_validates_the_rows_judge_writes_for_it(
    tmp_path: Path, scripted: None, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "out.jsonl"
    main(["judge", str(write(tmp_path / "in.jsonl", [RECORD, {"id": "bad"}])), "-o", str(out), "--gate", "citation"])
    capsys.readouterr()
    assert main(["schema", "--gate", "citation"]) == EXIT_OK
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    assert [validator.is_valid(json.loads(line)) for line in out.read_text().splitlines()] == [True, True]


CITED = [
    {**r, "response": str(r["answer"]), "sufficient": bool(r["sufficient"])}
    for r in load_records("squad2.jsonl", 40)
    if r.get("answer")
][:6]


@pytest.mark.engine
def test_judge_through_the_cli_on_the_real_engine(tmp_path: Path, vllm_server: str):
    out = tmp_path / "out.jsonl"
    source = write(tmp_path / "in.jsonl", CITED)
    code = main(["judge", str(source), "-o", str(out), "--gate", "citation", *through(vllm_server), "--no-progress"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == EXIT_OK
    assert all(0.0 <= row["verdict"]["cited_share"] <= 1.0 for row in rows)


@pytest.mark.engine
def test_calibrate_saves_its_threshold_on_the_real_engine(tmp_path: Path, vllm_server: str):
    saved = tmp_path / "citation.json"
    golden = write(tmp_path / "golden.jsonl", CITED)
    args = ["calibrate", str(golden), "-o", str(tmp_path / "calib"), "--gate", "citation", "--no-progress"]
    code = main([*args, *through(vllm_server), "--save", str(saved)])
    report = json.loads((tmp_path / "calib" / "report.json").read_text())
    assert "cited_share" in report["scores"]
    assert saved.exists() == (code == EXIT_OK)  # no threshold (exit 2) when the labels do not separate


@pytest.mark.engine
def test_the_service_judges_it_on_the_real_engine(vllm_server: str):
    config = ServeConfig(gates=("citation",))
    engine = OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server))
    try:
        client = TestClient(create_app(GateService(config, engine), config), base_url="http://127.0.0.1")
        response = client.post("/v1/judge/citation?min_cited_share=0.5", json=CITED[:2])
    finally:
        engine.close()
    rows = response.json()["results"]
    assert [row["gate"] for row in rows] == ["citation", "citation"]


ONE_SENTENCE = {**RECORD, "response": "Ada Lovelace wrote the first program."}


def test_calibrate_saves_the_option_its_threshold_sets_and_judge_takes_it(tmp_path: Path, scripted: None):
    # One sentence of one cites (share 1.0, labeled sufficient), two of two cite one (0.5, labeled not): the
    # threshold separates them, and the gate's threshold_option alone makes saving work.
    golden = [{**ONE_SENTENCE, "id": f"a{i}", "sufficient": True} for i in range(3)]
    golden += [{**RECORD, "id": f"b{i}", "sufficient": False} for i in range(3)]
    saved, out = tmp_path / "citation.json", tmp_path / "out.jsonl"
    source = write(tmp_path / "golden.jsonl", golden)
    code = main(["calibrate", str(source), "-o", str(tmp_path / "calib"), "--gate", "citation", "--save", str(saved)])
    threshold = json.loads(saved.read_text())["min_cited_share"]
    assert code == EXIT_OK
    assert 0.5 < threshold <= 1.0
    main(["judge", str(source), "-o", str(out), "--gate", "citation", "--min-cited-share", str(threshold)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["verdict"]["passes"] for row in rows] == [True] * 3 + [False] * 3


def test_calibrate_without_a_save_path_is_a_usage_error_naming_the_option(tmp_path: Path, scripted: None, capsys):
    source = write(tmp_path / "golden.jsonl", [{**RECORD, "sufficient": True}])
    code = main(
        ["calibrate", str(source), "-o", str(tmp_path / "calib"), "--gate", "citation", "--save", str(tmp_path)]
    )
    assert code == EXIT_USAGE
    assert "min_cited_share" in capsys.readouterr().err


def decided(request: GenerationRequest) -> str:
    return '{"decision":"PASS"}'


def test_its_decision_token_gives_it_decision_only_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: cls(ScriptedEngine(decided), config=config)))
    out = tmp_path / "out.jsonl"
    source = write(tmp_path / "in.jsonl", [RECORD])
    code = main(["judge", str(source), "-o", str(out), "--gate", "citation", "--detail", "decision"])
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == EXIT_OK
    assert (row["verdict"]["decision"], row["verdict"]["positive"]) == ('"PASS"', True)


def test_the_options_it_was_made_from_are_recorded_in_its_settings():
    gate = suffice.make_gate("citation", {"min_cited_share": 0.25})
    assert gate.settings()["min_cited_share"] == "0.25"
