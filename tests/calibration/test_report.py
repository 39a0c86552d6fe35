import json

import pytest

from suffice.calibration.report import build_report, write_report
from suffice.exceptions import ConfigError
from suffice.gates.adequacy.decision import decide
from suffice.gates.adequacy.store import RubricStore, save_rubric_version
from suffice.gates.sufficiency.calibration import GateConfig
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from tests.decisions.test_adequacy import SCORES, output, rubric


def rows_and_records():
    records, rows = [], []
    for i, (p, label) in enumerate([(0.9, True), (0.8, True), (0.7, False), (0.6, True), (0.2, False), (0.1, False)]):
        records.append({"id": f"r{i}", "sufficient": label, "useful_chunk_ids": [0, 1]})
        rows.append(
            {
                "id": f"r{i}",
                "line": i + 1,
                "verdict": {
                    "is_sufficient": p >= 0.5,
                    "confidence": 0.8,
                    "p_sufficient": p,
                    "useful_chunk_ids": [0],
                    "model_called": True,
                },
            }
        )
    rows.append({"id": "bad", "line": 7, "verdict": None, "error": {"type": "InputError"}})
    return records, rows


def test_report_metrics_and_files(tmp_path):
    records, rows = rows_and_records()
    report = build_report(SufficiencyGate(), records, rows, precision_target=1.0)
    s = report["scores"]["p_sufficient"]
    assert s["n"] == 6 and s["auc"] == pytest.approx(8 / 9)  # the 0.7 negative beats one positive (0.6)
    assert s["best_f1"]["threshold"] == 0.6 and s["precision_target"]["threshold"] == 0.8
    assert report["skipped"]["error"] == 1
    assert report["useful_chunk_ids"]["precision"] == 1.0 and report["useful_chunk_ids"]["recall"] == 0.5
    files = write_report(report, tmp_path)
    names = {f.name for f in files}
    assert {"report.json", "report.md", "p_sufficient.png", "self_confidence.png"} <= names
    assert (tmp_path / "p_sufficient.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["scores"]["p_sufficient"]["best_f1"]["f1"] == pytest.approx(s["best_f1"]["f1"])


def with_tokens(rows, completions):
    return [{**row, "tokens": {"prompt": 50, "completion": n}} for row, n in zip(rows, completions, strict=True)]


def test_the_report_gives_the_output_tokens_per_verdict_the_model_wrote():
    """Six verdicts (one made without the model: 0 tokens) and an error row whose tokens are not a verdict's."""
    records, rows = rows_and_records()
    rows = with_tokens(rows, [100, 120, 140, 160, 180, 0, 999])
    report = build_report(SufficiencyGate(), records, rows, precision_target=1.0)
    assert report["output_tokens"] == {"verdicts": 5, "mean": 140, "max": 180}


def test_the_written_report_states_the_output_tokens_per_verdict(tmp_path):
    records, rows = rows_and_records()
    report = build_report(SufficiencyGate(), records, with_tokens(rows, [100, 120, 140, 160, 180, 0, 999]), 1.0)
    write_report(report, tmp_path)
    assert "Output tokens per verdict: mean 140, max 180" in (tmp_path / "report.md").read_text()


def test_gate_config_decides_instead_of_the_model(tmp_path):
    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.7).save(path)
    gate = SufficiencyGate(calibration=GateConfig.load(path))
    verdict = SufficiencyVerdict(
        is_sufficient=True,
        required_entities=[],
        coverage={},
        missing_information=[],
        contradictions=[],
        confidence=0.9,
        reasoning="r",
        useful_chunk_ids=[],
        prompt_version="sufficiency/v2",
        p_sufficient=0.65,
    )
    decided = gate.decide(verdict)
    assert decided.decision.sufficient is False and decided.decision.threshold == 0.7
    assert gate.route(decided).route == "retrieve_more"
    (tmp_path / "bad.json").write_text('{"gate": "sufficiency", "score": "vibes", "threshold": 2}')
    with pytest.raises(ConfigError) as info:
        GateConfig.load(tmp_path / "bad.json")
    assert info.value.parameter == "gate_config" and "score" in str(info.value)


def test_calibrated_rubric_version_is_used_by_the_decision(tmp_path):
    base = rubric("MEDIUM", threshold=0.9)
    path = save_rubric_version(base, {"threshold": 0.62, "f1": 0.8}, tmp_path)
    assert path.name == "t@2.json"
    calibrated = RubricStore(tmp_path).get("t")
    assert calibrated.version == "2" and calibrated.calibrated_threshold == 0.62
    assert decide(output(SCORES), base).decision == "FAIL"  # 0.65 < 0.9 + 0.05
    d = decide(output(SCORES), calibrated)
    assert d.decision == "PASS" and d.threshold == 0.62  # the calibrated threshold, no margin
    # HIGH risk: never under the uncalibrated threshold (issue 30; tests/calibration/test_choice.py)
    high = save_rubric_version(rubric("HIGH", threshold=0.9), {"threshold": 0.62}, tmp_path / "high")
    assert decide(output(SCORES), RubricStore(high.parent).get("t")).threshold == 1.0


def test_decision_only_rows_offer_their_probability():
    from suffice.gates import DecisionGate

    row = {"detail": "decision", "decision": "false", "positive": False, "probability": 0.25}
    assert DecisionGate(SufficiencyGate()).calibration_scores(row) == {"probability": 0.25, "decision": 0.0}


def test_a_gate_config_that_is_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "gate.json"
    path.write_bytes(b'{"gate": "sufficiency", "score": "p_sufficient", "threshold": 0.5, "calibrated_on": "\xff"}')
    with pytest.raises(ConfigError) as caught:
        GateConfig.load(path)
    assert caught.value.parameter == "gate_config"


@pytest.mark.parametrize("threshold", [True, "0.5"])
def test_a_gate_config_threshold_must_be_a_number(tmp_path, threshold):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"gate": "sufficiency", "score": "p_sufficient", "threshold": threshold}))
    with pytest.raises(ConfigError, match="threshold"):
        GateConfig.load(path)


def test_saving_a_rubric_version_that_exists_is_refused_and_keeps_it(tmp_path):
    base = RubricStore().get("customer-support")
    first = save_rubric_version(base, {"threshold": 0.7}, tmp_path)
    before = first.read_bytes()
    with pytest.raises(ConfigError) as caught:
        save_rubric_version(base, {"threshold": 0.4}, tmp_path)
    assert caught.value.parameter == "save_rubric"
    assert first.read_bytes() == before
