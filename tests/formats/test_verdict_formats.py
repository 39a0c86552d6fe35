"""Verdict formats are plug-ins: one registry, built-in ones a module each, others one entry point each; gates
offer the seed shape as a role."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

import suffice
from suffice.batch import BatchOptions, judge_file
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK, EXIT_USAGE, ConfigError
from suffice.formats.verdicts import export, verdict_format, verdict_format_names
from suffice.gates import DecisionGate, make_gate, roles
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.judge import Judge
from suffice.rows.row_types import result_row_model
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.batch.test_runner import good, record
from tests.fakes import ScriptedEngine

BUILT_IN = ("suffice", "ragflow", "seed")


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: cls(ScriptedEngine(good), config=config)))


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_the_built_in_formats_are_found_in_their_modules_default_first():
    assert verdict_format_names() == BUILT_IN


def test_an_unknown_format_is_refused_naming_the_option_and_the_formats():
    with pytest.raises(ConfigError, match="must be one of suffice, ragflow, seed") as caught:
        BatchOptions(fmt="yaml")
    assert caught.value.parameter == "format"


def test_no_format_name_is_written_outside_its_own_module():
    """The CLI's choices, the HTTP parameter and every check read the registry: a format's name is a string in
    suffice's code only where the format is declared (``suffice`` is also the package's name, and ``seed`` a
    sampling setting of the engines)."""
    root = Path(suffice.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = "/".join(path.relative_to(root).parts)
        if relative.startswith(("formats/verdicts/", "serving/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in ("seed", "ragflow"):
                found.append((relative, node.lineno, node.value))
    assert found == []


class _NoSeed(SufficiencyGate):
    """A gate that does not offer the seed role."""

    seed_verdict = None  # type: ignore[assignment]


def test_a_gate_without_the_seed_role_is_refused_by_name_and_its_decision_only_mode_is_not():
    seed = verdict_format("seed")
    assert "sufficiency gate's verdicts have no seed shape" in str(seed.refuses(_NoSeed()))
    assert seed.refuses(DecisionGate(_NoSeed())) is None
    gate = DecisionGate(_NoSeed())
    verdict = roles.shortcut(gate, roles.parse_item(gate, {"id": "a", "question": "Who?", "chunks": []}))
    assert export(gate, verdict, "seed")["verdict"] == verdict.to_seed()


def test_the_seed_rows_of_a_gate_are_its_role_plus_its_keys_beside_it():
    gate = make_gate("sufficiency")
    verdict = roles.shortcut(gate, roles.parse_item(gate, {"id": "a", "question": "Who?", "chunks": []}))
    row = export(gate, verdict, "seed")
    assert row["verdict"] == gate.seed_verdict(verdict)
    assert set(row["fitting"]) == {"prompt_version", "truncated_chunk_ids", "omitted_chunk_ids", "question_truncated"}


# A format from outside: one module (tests/formats/outside.py) and one entry point (conftest.py).


def test_a_format_from_an_entry_point_is_registered(outside_formats: Path):
    assert verdict_format_names() == (*BUILT_IN, "routed")


def test_suffice_judge_writes_it_and_suffice_schema_describes_it(
    outside_formats: Path, scripted: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "out.jsonl"
    source = write(tmp_path / "in.jsonl", [record(0), {"id": "bad"}])
    assert main(["judge", str(source), "-o", str(out), "--format", "routed", "--no-progress"]) != EXIT_USAGE
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["verdict"] == {"positive": True, "route": "deliver"}
    assert rows[1]["error"]["field"] == "question"
    capsys.readouterr()
    assert main(["schema", "--format", "routed"]) == EXIT_OK
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    assert [validator.is_valid(row) for row in rows] == [True, True]
    assert not validator.is_valid({**rows[0], "verdict": {"positive": True}})


def test_suffice_judge_refuses_it_in_a_parquet_output_naming_the_format(
    outside_formats: Path, scripted: None, tmp_path: Path
):
    with pytest.raises(ConfigError) as caught:
        judge_file(
            JudgeConfig(), write(tmp_path / "in.jsonl", [record(0)]), tmp_path / "o.parquet", BatchOptions(fmt="routed")
        )
    assert caught.value.parameter == "format"


def test_suffice_serve_takes_it_as_the_format_parameter_and_describes_it(outside_formats: Path):
    config = ServeConfig(gates=("sufficiency",))
    client = TestClient(create_app(GateService(config, ScriptedEngine(good)), config), base_url="http://127.0.0.1")
    body = client.post("/v1/judge/sufficiency?format=routed", json=[record(0)]).json()
    assert body["results"][0]["verdict"] == {"positive": True, "route": "deliver"}
    spec = client.get("/openapi.json").json()
    [parameter] = [p for p in spec["paths"]["/v1/judge/sufficiency"]["post"]["parameters"] if p["name"] == "format"]
    assert parameter["schema"]["enum"] == [*BUILT_IN, "routed"]
    assert "SufficiencyFullRoutedVerdictResult" in spec["components"]["schemas"]
    refused = client.post("/v1/judge/sufficiency?format=yaml", json=[record(0)])
    assert refused.status_code == 422


def test_without_its_entry_point_it_is_unknown(tmp_path: Path):
    assert "routed" not in verdict_format_names()
    with pytest.raises(ConfigError):
        result_row_model("sufficiency", None, "routed")


def test_an_entry_point_that_is_not_a_format_is_refused_naming_it(outside_formats: Path, monkeypatch):
    from tests.formats import outside

    monkeypatch.setattr(outside, "ROUTED", object())
    with pytest.raises(ConfigError, match="is not a verdict format whose name is 'routed'"):
        verdict_format("routed")
