"""A saved threshold records the engine settings its scores came from (model, weights, engine, backend, dtype),
and a judge under other settings warns naming both values (issue 41: a bfloat16 and a float32 run move
decision-only probabilities by up to 0.024)."""

from __future__ import annotations

import json
import warnings

import pytest

from suffice import CalibrationMismatchWarning, Judge, JudgeConfig
from suffice.gates.base import fitted_mismatch, fitted_under
from suffice.gates.sufficiency.calibration import GateConfig
from tests.cli.test_calibrate_edges import SEPARABLE, calibrate, opened, scripted  # noqa: F401 - the fixture
from tests.fakes import ScriptedEngine

SCRIPTED = {"model": "scripted", "weights": "none", "engine": "scripted", "backend": "scripted", "dtype": "float32"}


def test_a_missing_dtype_reads_as_float32_and_other_settings_are_left_out():
    settings = {"model": "m", "weights": "w", "engine": "vllm", "backend": "xgrammar", "max_model_len": "2048"}
    picked = fitted_under(settings)
    assert picked == {"model": "m", "weights": "w", "engine": "vllm", "backend": "xgrammar", "dtype": "float32"}


def test_a_mismatch_names_each_setting_with_both_values():
    problem = fitted_mismatch({**SCRIPTED, "dtype": "bfloat16"}, SCRIPTED)
    assert problem is not None and "dtype 'bfloat16' (now 'float32')" in problem
    assert fitted_mismatch(SCRIPTED, {k: v for k, v in SCRIPTED.items() if k != "dtype"}) is None


def test_calibrate_saves_the_settings_the_verdicts_were_judged_under(tmp_path, opened):  # noqa: F811
    status, out = calibrate(tmp_path, SEPARABLE, "--save", str(tmp_path / "gate.json"))
    assert status == 0
    saved = json.loads((tmp_path / "gate.json").read_text())
    recorded = json.loads((out / "verdicts.jsonl.settings.json").read_text())
    assert saved["fitted_under"] == fitted_under(recorded)
    assert set(saved["fitted_under"]) >= {"model", "weights", "engine", "backend", "dtype"}


def _judge_with(tmp_path, fitted):
    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.5, fitted_under=fitted).save(path)
    config = JudgeConfig(gate="sufficiency", options={"gate_config": str(path)})
    return Judge(ScriptedEngine(scripted), config=config)


def test_a_judge_under_another_dtype_warns_naming_both(tmp_path):
    with pytest.warns(CalibrationMismatchWarning, match=r"dtype 'bfloat16' \(now 'float32'\)"):
        _judge_with(tmp_path, {**SCRIPTED, "dtype": "bfloat16"})


def test_a_judge_under_the_same_settings_does_not_warn(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationMismatchWarning)
        _judge_with(tmp_path, SCRIPTED)


def test_a_gate_config_saved_before_the_settings_were_recorded_still_loads_without_a_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationMismatchWarning)
        _judge_with(tmp_path, None)


def test_an_adequacy_rubric_calibrated_under_other_settings_warns(tmp_path):
    from suffice.gates.adequacy.store import builtin_dir

    store_dir = tmp_path / "rubrics"
    store_dir.mkdir()
    rubric = json.loads(next(builtin_dir().glob("*@*.json")).read_text())
    rubric["calibrated_threshold"] = 0.5
    rubric["calibration"] = {"threshold": 0.5, "fitted_under": {**SCRIPTED, "backend": "xgrammar"}}
    (store_dir / f"{rubric['name']}@{rubric['version']}.json").write_text(json.dumps(rubric))
    config = JudgeConfig(gate="adequacy", options={"rubric": rubric["name"], "rubric_dir": str(store_dir)})
    with pytest.warns(CalibrationMismatchWarning, match="backend 'xgrammar'"):
        Judge(ScriptedEngine(scripted), config=config)
