"""A gate is a small core (options, template, constraint, parse, route) plus the roles it takes by defining
their names (suffice.gates.roles): a gate with the core alone judges, routes and calibrates."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from suffice import ConfigError, Gate, GateOptions, Routing, load_prompt
from suffice.gates import roles
from suffice.gates.decision_mode import AutoGate, DecisionGate
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.grammars import Constraint, alt, lit
from suffice.judge import Judge
from suffice.prompts.fitting import FittedPrompt
from suffice.records.item import Chunk, Item
from suffice.settings import setting
from tests.fakes import ScriptedEngine


class Said(BaseModel):
    supported: bool
    prompt_version: str


class CoreGate(Gate):
    """Only what every gate must say."""

    name = "core"
    verdict_model = Said

    def __init__(self, template_dir: Path) -> None:
        self.template = load_prompt(template_dir, "core", "v1")

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return Constraint.from_rx(alt(lit('{"supported":true}'), lit('{"supported":false}')), key="core")

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> Said:
        return Said(supported=json.loads(text)["supported"], prompt_version=self.prompt_version)

    def route(self, verdict: BaseModel) -> Routing:
        assert isinstance(verdict, Said)
        score = 1.0 if verdict.supported else 0.0
        if verdict.supported:
            return Routing.deliver(self, verdict, "said so", scores={"said": score})
        return Routing("abstain", "said so", scores={"said": score})


@pytest.fixture
def core(tmp_path: Path) -> CoreGate:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "system.j2").write_text("Say whether the chunks answer the question.", encoding="utf-8")
    (tmp_path / "v1" / "user.j2").write_text("{{ question }}", encoding="utf-8")
    return CoreGate(tmp_path)


RECORD = {"id": "r1", "question": "Who?", "chunks": [{"id": "k", "text": "Ada."}]}


def test_a_gate_with_the_core_alone_judges_and_routes(core: CoreGate):
    [result] = Judge(ScriptedEngine(lambda r: '{"supported":true}'), core).judge_batch([RECORD])
    assert result.verdict == Said(supported=True, prompt_version="core/v1")
    assert core.is_positive(result.verdict)  # the default: whether route delivers


def test_its_calibration_scores_are_its_routes_scores_and_the_decision(core: CoreGate):
    verdict = {"supported": False, "prompt_version": "core/v1"}
    assert roles.calibration_scores(core, verdict) == {"said": 0.0, "decision": 0.0}


def test_it_takes_no_role_and_gets_each_default(core: CoreGate):
    item = roles.parse_item(core, RECORD)
    assert [roles.takes(core, role) for role in roles.ROLES] == [False] * len(roles.ROLES)
    assert (roles.shortcut(core, item), roles.high_stakes(core, item), roles.decision_of(core)) == (None, False, None)
    assert roles.default_choice(core) == ("best-f1", None)
    assert roles.saveable_scores(core) == ()


def test_without_a_decision_token_it_refuses_decision_only_mode_naming_detail(core: CoreGate):
    roles.check_detail(core, "full")
    with pytest.raises(ConfigError) as caught:
        roles.check_detail(core, "decision")
    assert caught.value.parameter == "detail"


def test_without_a_threshold_option_it_has_nothing_to_save_naming_save(core: CoreGate, tmp_path: Path):
    assert roles.save_problem(core, tmp_path / "t.json", tmp_path) is None
    with pytest.raises(ConfigError) as caught:
        roles.save_calibration(core, None, tmp_path / "t.json", tmp_path)  # type: ignore[arg-type]
    assert caught.value.parameter == "save"


def test_the_built_in_gates_take_the_roles_they_define():
    assert roles.takes(SufficiencyGate, "calibration") and roles.takes(RecoveryGate, "input")
    assert roles.decision_of(RecoveryGate) == roles.Decision(
        "classification", ('"SUFFICIENT"', '"PARTIALLY_SUFFICIENT"', '"INSUFFICIENT"'), '"SUFFICIENT"'
    )
    assert roles.takes(SufficiencyGate, "commands") is False


def test_the_decision_wrappers_read_the_inner_gates_declarations_rather_than_copy_them():
    inner = RecoveryGate()
    decision, auto = DecisionGate(inner), AutoGate(inner)
    for wrapper in (decision, auto):
        assert not {"name", "template", "needs_response", "decision_key"} & set(vars(wrapper))
    assert (decision.name, auto.name, decision.needs_response) == ("recovery", "recovery", True)
    inner.needs_response = False
    assert (decision.needs_response, auto.needs_response) == (False, False)
    assert roles.decision_of(decision) == roles.decision_of(inner)
    assert auto.verdict_model is inner.verdict_model


@dataclass(frozen=True)
class Share(GateOptions):
    share: float = setting(0.5, "a share")


class OptionGate(CoreGate):
    options_model = Share

    def __init__(self) -> None:
        pass


def test_the_default_from_options_keeps_the_options_and_settings_record_them(core: CoreGate):
    gate = OptionGate.from_options(Share(share=0.25))
    gate.template = core.template
    assert gate.options == Share(share=0.25)
    assert gate.settings()["share"] == "0.25"
    assert OptionGate().options == Share()
