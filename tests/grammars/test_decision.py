"""Decision-only mode: the constraint, the wrapper gate, and its probability (scripted engine)."""

import json
import re

import pytest

from suffice.config import JudgeConfig
from suffice.gates import DecisionGate
from suffice.gates.adequacy import AdequacyGate
from suffice.gates.recovery import RecoveryGate
from suffice.gates.sufficiency import SufficiencyGate
from suffice.grammars.decision_verdict import DecisionVerdict, decision_constraint
from suffice.judge import Judge
from suffice.serving.base import Generation, GenerationRequest
from tests.fakes import ScriptedEngine

ALL_GATES = [SufficiencyGate(), RecoveryGate(), AdequacyGate(rubric="customer-support")]


@pytest.mark.parametrize("gate", ALL_GATES, ids=lambda g: g.name)
def test_every_gate_declares_its_decision(gate):
    assert gate.decision_key
    assert gate.positive_value in gate.decision_json_values
    for value in gate.decision_json_values:
        json.loads(value)  # each value is a JSON text


@pytest.mark.parametrize("gate", ALL_GATES, ids=lambda g: g.name)
def test_the_decision_constraint_allows_exactly_the_gate_values(gate):
    c = decision_constraint(gate.decision_key, gate.decision_json_values)
    for value in gate.decision_json_values:
        assert c.matches("{" + json.dumps(gate.decision_key) + ":" + value + "}")
    assert not c.matches("{" + json.dumps(gate.decision_key) + ":" + '"MAYBE"' + "}")
    longest = max(len("{" + json.dumps(gate.decision_key) + ":" + v + "}") for v in gate.decision_json_values)
    assert c.max_tokens == longest + 1


def test_make_gate_wraps_in_decision_mode():
    gate = JudgeConfig(detail="decision").make_gate()
    assert isinstance(gate, DecisionGate)
    assert gate.prompt_version == "sufficiency/v6/decision"


def test_decision_prompt_asks_for_exactly_the_decision():
    gate = DecisionGate(SufficiencyGate())
    item = gate.parse_item({"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]})
    system = gate.template.render(gate.system_context(item), {"question": "q", "chunks": []})[0]["content"]
    assert '{"is_sufficient": true} or {"is_sufficient": false}' in system
    assert "useful_chunk_ids" not in system
    assert "required_entities" not in system


def _answer(text: str, p_true: float):
    def script(request: GenerationRequest) -> Generation:
        assert request.constraint.matches(text)
        tokens = ('{"is_sufficient":', text[len('{"is_sufficient":') : -1], "}")
        import math

        top = ({}, {"true": math.log(p_true), "false": math.log(1 - p_true)}, {})
        return Generation(text, "stop", 10, 3, tokens=tokens, top_logprobs=top)

    return script


def test_a_decision_verdict_carries_the_probability_of_the_positive_value():
    judge = Judge(ScriptedEngine(_answer('{"is_sufficient":false}', 0.3)), DecisionGate(SufficiencyGate()))
    (result,) = judge.judge_batch([{"id": "a", "question": "q?", "chunks": [{"id": 0, "text": "t"}]}])
    verdict = result.verdict
    assert isinstance(verdict, DecisionVerdict)
    assert verdict.decision == "false"
    assert verdict.positive is False
    assert verdict.probability == pytest.approx(0.3)
    assert result.prompt_version == "sufficiency/v6/decision"


def test_an_empty_chunk_list_is_decided_without_the_model():
    engine = ScriptedEngine(_answer('{"is_sufficient":true}', 0.9))
    judge = Judge(engine, DecisionGate(SufficiencyGate()))
    (result,) = judge.judge_batch([{"id": "a", "question": "q?", "chunks": []}])
    assert engine.calls == []
    assert result.verdict.model_called is False
    assert result.verdict.positive is False


def test_decision_output_form_matches_the_constraint_regex():
    c = decision_constraint("classification", RecoveryGate.decision_json_values)
    assert re.fullmatch(c.pattern, '{"classification":"PARTIALLY_SUFFICIENT"}')
