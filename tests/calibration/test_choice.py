"""Which threshold calibration saves for a high-stakes rubric, and how it is applied
(issue 30): never less conservative than the uncalibrated rule, F-beta by default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from suffice.calibration.report import score_metrics
from suffice.cli.calibrate_cmd import _choose
from suffice.gates import roles
from suffice.gates.adequacy.decision import decide, effective_threshold
from suffice.gates.adequacy.gate import AdequacyGate
from suffice.gates.base import CalibrationChoice
from suffice.gates.sufficiency.gate import SufficiencyGate
from tests.decisions.test_adequacy import SCORES, output, rubric

# Composite 0.9 .. 0.4 against labels T T F T T F: best F1 at 0.5 (one false positive),
# best F0.5 at 0.8 (no false positive, two false negatives).
VALUES = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
LABELS = [True, True, False, True, True, False]


def _report(name: str) -> dict[str, object]:
    return {"scores": {name: {**score_metrics(VALUES, LABELS, 0.9), "_values": VALUES, "_labels": LABELS}}}


def _args(**given: object) -> argparse.Namespace:
    defaults = {"score": None, "choose": None, "beta": 0.5, "fp_cost": None, "fn_cost": None, "gate": "adequacy"}
    return argparse.Namespace(**{**defaults, "precision_target": 0.9, **given})


@pytest.mark.parametrize(("risk", "threshold"), [("LOW", 0.62), ("MEDIUM", 0.62), ("HIGH", 0.7)])
def test_a_calibrated_threshold_is_applied_as_it_is_except_under_a_high_risk_floor(risk, threshold):
    base = rubric(risk, threshold=0.6)
    calibrated = base.model_copy(update={"calibrated_threshold": 0.62})
    assert effective_threshold(calibrated) == threshold  # HIGH: 0.6 + 0.10, not 0.62
    assert effective_threshold(calibrated) >= effective_threshold(base) or risk != "HIGH"


def test_a_high_risk_calibrated_threshold_above_the_floor_is_applied_as_it_is():
    calibrated = rubric("HIGH", threshold=0.6).model_copy(update={"calibrated_threshold": 0.85})
    assert effective_threshold(calibrated) == 0.85
    assert decide(output(SCORES), calibrated).threshold == 0.85


def test_a_high_risk_decision_never_passes_under_the_uncalibrated_threshold():
    base = rubric("HIGH", threshold=0.6)  # composite of SCORES is 0.65 < 0.6 + 0.1
    calibrated = base.model_copy(update={"calibrated_threshold": 0.3})
    assert decide(output(SCORES), base).decision == "FAIL"
    assert decide(output(SCORES), calibrated).decision == "FAIL"


def test_a_high_risk_rubric_chooses_f_beta_by_default(capsys):
    gate = AdequacyGate(rubric="clinical-guidance")  # HIGH
    assert gate.default_choice()[0] == "f-beta"
    name, metrics = _choose(_args(), gate, _report("composite"))
    assert (name, metrics["threshold"], metrics["rule"], metrics["beta"]) == ("composite", 0.8, "f-beta", 0.5)
    assert "HIGH-risk rubric" in capsys.readouterr().err
    assert _choose(_args(choose="best-f1"), gate, _report("composite"))[1]["threshold"] == 0.5


@pytest.mark.parametrize("gate", [AdequacyGate(rubric="customer-support"), AdequacyGate(), SufficiencyGate()])
def test_other_gates_and_rubrics_choose_best_f1_by_default(gate):
    assert roles.default_choice(gate) == ("best-f1", None)
    name = roles.saveable_scores(gate)[0]
    assert _choose(_args(gate=gate.name), gate, _report(name))[1]["threshold"] == 0.5


def test_saving_under_the_high_risk_floor_says_what_is_applied(tmp_path: Path):
    gate = AdequacyGate(rubric="clinical-guidance")
    choice = CalibrationChoice("composite", 0.5, {"rule": "f-beta"}, tmp_path / "golden.jsonl")
    message = gate.save_calibration(choice, tmp_path, tmp_path)
    assert "calibrated threshold 0.500" in message and "applied as 0.900" in message
