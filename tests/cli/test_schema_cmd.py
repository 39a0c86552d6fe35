"""``suffice schema``: the JSON Schema it prints holds the rows ``suffice judge`` writes and
``suffice serve`` answers, and refuses a row that lacks what a row always has.

The rows are real ones, written by the batch runner and the app on a scripted engine."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK, EXIT_USAGE
from suffice.gates import gate_names
from suffice.rows.row_types import result_row_model
from suffice.serving.base import GenerationRequest
from tests.batch.test_runner import good, opener, record, rows, write_lines
from tests.fakes import ScriptedEngine
from tests.server.test_app import client_for


def decision(request: GenerationRequest) -> str:
    return '{"is_sufficient":true}'


def written(tmp_path: Path, config: JudgeConfig | None = None, fmt: str = "suffice") -> list[dict[str, Any]]:
    """The rows ``suffice judge`` writes for a good record, an unreadable line and a record without a question."""
    config = config or JudgeConfig()
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode(), b"{not json", json.dumps({"id": "x"}).encode()])
    engine = ScriptedEngine(decision if config.detail == "decision" else good)
    judge_file(config, source, out, BatchOptions(overwrite=True, fmt=fmt), open_judge=opener(engine))
    return rows(out)  # type: ignore[return-value]


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> jsonschema.protocols.Validator:
    assert main(["schema", *argv]) == EXIT_OK
    return jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))


def test_the_schema_holds_every_row_judge_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "sufficiency")
    assert [validator.is_valid(row) for row in written(tmp_path)] == [True, True, True]


@pytest.mark.parametrize(
    ("where", "key"),
    [((), "model"), ((), "line"), ((), "verdict"), ((), "tokens"), (("verdict",), "is_sufficient")],
)
def test_a_row_missing_a_field_a_row_always_has_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: tuple[str, ...], key: str
) -> None:
    validator = printed(capsys, "--gate", "sufficiency")
    row = copy.deepcopy(written(tmp_path)[0])
    holder = row
    for step in where:
        holder = holder[step]
    del holder[key]
    assert not validator.is_valid(row)


def test_an_error_row_without_its_error_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "sufficiency")
    row = written(tmp_path)[2]
    assert not validator.is_valid({**row, "error": None})


def test_a_row_of_another_gate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "recovery")
    assert not validator.is_valid({**written(tmp_path)[2], "gate": "sufficiency"})


def test_decision_only_rows_are_held_by_the_decision_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "sufficiency", "--detail", "decision")
    assert validator.is_valid(written(tmp_path, JudgeConfig(detail="decision"))[0])


def test_decision_only_rows_are_held_by_the_default_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "sufficiency")
    assert validator.is_valid(written(tmp_path, JudgeConfig(detail="decision"))[0])


def test_decision_only_rows_are_refused_by_the_full_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "sufficiency", "--detail", "full")
    assert not validator.is_valid(written(tmp_path, JudgeConfig(detail="decision"))[0])


@pytest.mark.parametrize("fmt", ["seed", "ragflow"])
def test_rows_in_the_seeds_shape_are_held_by_that_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    validator = printed(capsys, "--gate", "sufficiency", "--format", fmt)
    assert [validator.is_valid(row) for row in written(tmp_path, fmt=fmt)] == [True, True, True]


def test_the_rows_the_service_answers_are_held_by_the_served_schema(capsys: pytest.CaptureFixture[str]) -> None:
    validator = printed(capsys, "--gate", "sufficiency", "--served")
    results = client_for().post("/v1/judge/sufficiency", json=[record(0), {"id": "x"}]).json()["results"]
    assert [validator.is_valid(row) for row in results] == [True, True]


def test_the_rows_the_service_answers_are_not_those_judge_writes(capsys: pytest.CaptureFixture[str]) -> None:
    """``index`` in the place of ``line``: one schema for both would hold neither exactly."""
    validator = printed(capsys, "--gate", "sufficiency")
    [row] = client_for().post("/v1/judge/sufficiency", json=[record(0)]).json()["results"]
    assert not validator.is_valid(row)


@pytest.mark.parametrize("gate", gate_names())
def test_every_registered_gate_has_a_schema(capsys: pytest.CaptureFixture[str], gate: str) -> None:
    assert main(["schema", "--gate", gate]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["title"] == result_row_model(gate).__name__


def test_an_unknown_gate_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--gate", "no-such-gate"]) == EXIT_USAGE


def test_an_unknown_gate_is_named_in_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    main(["schema", "--gate", "no-such-gate"])
    assert "gate='no-such-gate'" in capsys.readouterr().err


def test_the_library_gives_the_same_model_for_the_same_arguments() -> None:
    """FastAPI names its components by the class: one class per row kind, or two of a name."""
    assert result_row_model("sufficiency", "full", "seed") is result_row_model("sufficiency", "full", "ragflow")
