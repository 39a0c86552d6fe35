"""With a calibrated gate config, one run gives one answer: the summary, the route, the
audit row and the exported row all use the calibrated decision (the model's own
boolean kept beside it)."""

from __future__ import annotations

from suffice.audit.recording import audit_values
from suffice.batch.summary import RunSummary
from suffice.formats.verdicts import export
from suffice.gates.sufficiency.calibration import GateConfig
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from suffice.results import JudgeResult

GATE = SufficiencyGate(calibration=GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.7))
# The model says sufficient; its probability is under the calibrated threshold.
VERDICT = GATE.decide(
    SufficiencyVerdict(
        is_sufficient=True,
        required_entities=[],
        coverage={},
        missing_information=[],
        contradictions=[],
        confidence=0.9,
        reasoning="r",
        useful_chunk_ids=[],
        prompt_version="sufficiency/v2",
        p_sufficient=0.4,
    )
)
RESULT = JudgeResult(id="a", gate="sufficiency", verdict=VERDICT, model="m", backend="b", prompt_version="v")


def test_the_summary_counts_the_calibrated_decision():
    summary = RunSummary(positive=GATE.is_positive)
    summary.add([{"id": "a"}], [RESULT])
    assert summary.sufficient == 0


def test_the_route_follows_the_calibrated_decision():
    assert GATE.route(VERDICT).route == "retrieve_more"


def test_the_audit_row_records_the_calibrated_decision():
    values = audit_values(GATE, RESULT, None, run_id="r", round=1, latency_ms=1.0, weights_hash=None, settings={})
    assert values["decision"] == "retrieve_more"


def test_the_ragflow_export_carries_the_calibrated_decision():
    assert export(GATE, VERDICT, "ragflow")["verdict"]["Sufficient Context"] is False


def test_the_ragflow_export_keeps_both_seed_keys_in_agreement():
    assert export(GATE, VERDICT, "ragflow")["verdict"]["is_sufficient"] is False


def test_the_ragflow_export_keeps_the_models_own_boolean_beside_it():
    assert export(GATE, VERDICT, "ragflow")["model_is_sufficient"] is True


def test_the_suffice_export_keeps_the_verdict_with_its_decision():
    assert export(GATE, VERDICT, "suffice")["verdict"]["decision"]["sufficient"] is False


def test_decision_mode_refuses_a_gate_config(tmp_path):
    import pytest

    from suffice.config import JudgeConfig
    from suffice.exceptions import ConfigError

    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.7).save(path)
    with pytest.raises(ConfigError) as caught:
        JudgeConfig(detail="decision", options={"gate_config": path}).make_gate()
    assert caught.value.parameter == "gate_config"
