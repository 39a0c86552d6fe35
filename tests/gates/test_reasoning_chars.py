"""``reasoning_chars``: the bound on a verdict's free-text reasoning (sufficiency's ``reasoning``, adequacy's
``rationale``) as a gate option, reaching the constraint, the prompt, the verdict's check and the run's settings."""

from __future__ import annotations

import json

import pytest

from suffice.exceptions import ConfigError, VerdictError
from suffice.gates import gate_class
from suffice.gates.adequacy.gate import AdequacyGate
from suffice.gates.adequacy.grammar import DIMENSIONS
from suffice.gates.base import REASONING_CHARS, REASONING_CHARS_RANGE
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.records.item import Chunk, Item
from tests.adequacy import criteria
from tests.gates.test_sufficiency_gate import fitted
from tests.grammars.test_sufficiency import output

GATES = ("sufficiency", "adequacy")
ITEM = Item(id="q", question="Who wrote it?", chunks=(Chunk(id="c0", text="Ada wrote it."),), rubric=None)


def gate(name: str, **options: object):  # type: ignore[no-untyped-def]
    cls = gate_class(name)
    return cls.from_options(cls.options_model.parse(name, options))


def system_prompt(g, item: Item = ITEM) -> str:  # type: ignore[no-untyped-def]
    return g.template.render(g.system_context(item), {"question": item.question, "chunks": []})[0]["content"]


def adequacy_item() -> Item:
    return Item(id="q", question="Who wrote it?", chunks=(Chunk(id="c0", text="Ada wrote it."),), rubric="legal-review")


@pytest.mark.parametrize("name", GATES)
def test_the_option_defaults_to_todays_bound(name):
    assert gate_class(name).options_model().reasoning_chars == REASONING_CHARS  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", GATES)
@pytest.mark.parametrize("value", [REASONING_CHARS_RANGE[0] - 1, REASONING_CHARS_RANGE[1] + 1, "many"])
def test_a_value_out_of_range_is_an_error_naming_the_option(name, value):
    with pytest.raises(ConfigError) as info:
        gate(name, reasoning_chars=value)
    assert info.value.parameter == "reasoning_chars"


def test_a_gate_without_a_reasoning_field_takes_no_such_option():
    with pytest.raises(ConfigError, match="takes no such option"):
        gate("recovery", reasoning_chars=50)


def test_the_sufficiency_option_reaches_the_constraint():
    short = gate("sufficiency", reasoning_chars=50).constraint_for(list(ITEM.chunks))
    default = gate("sufficiency").constraint_for(list(ITEM.chunks))
    assert short.max_completion_tokens < default.max_completion_tokens


def test_the_adequacy_option_reaches_the_constraint_of_every_rubric():
    short = gate("adequacy", reasoning_chars=50).item_constraint(adequacy_item(), list(ITEM.chunks))
    default = gate("adequacy").item_constraint(adequacy_item(), list(ITEM.chunks))
    assert short.max_completion_tokens < default.max_completion_tokens


def test_the_sufficiency_prompt_states_the_bound():
    assert "at most 50 characters" in system_prompt(gate("sufficiency", reasoning_chars=50))


def test_the_adequacy_prompt_states_the_bound():
    assert "rationale at most 50" in system_prompt(gate("adequacy", reasoning_chars=50), adequacy_item())


@pytest.mark.parametrize("name", GATES)
def test_a_run_records_a_bound_other_than_the_default(name):
    assert gate(name, reasoning_chars=50).settings()["reasoning_chars"] == "50"


@pytest.mark.parametrize("name", GATES)
def test_a_run_at_the_default_records_no_bound(name):
    assert "reasoning_chars" not in gate(name).settings()  # the settings of earlier runs still match


def test_a_sufficiency_verdict_with_a_longer_reasoning_is_refused():
    g = gate("sufficiency", reasoning_chars=20)
    assert isinstance(g, SufficiencyGate)
    with pytest.raises(VerdictError, match="reasoning_chars=20"):
        g.parse(output(reasoning="r" * 21), fitted(g, 3), ITEM)


def test_an_adequacy_verdict_with_a_longer_rationale_is_refused():
    g = gate("adequacy", reasoning_chars=20, rubric="legal-review")
    assert isinstance(g, AdequacyGate)
    text = json.dumps(
        {
            "adequacy_decision": "PASS",
            "adequacy_score": 0.8,
            "criteria": criteria("legal-review"),
            "dimensions": {d: {"score": 0.8, "assessment": "ok"} for d in DIMENSIONS},
            "missing_information": [],
            "recommendation": "PROCEED_WITH_ANSWER",
            "rationale": "r" * 21,
        }
    )
    with pytest.raises(VerdictError, match="reasoning_chars=20"):
        g.parse(text, fitted(g, 1), adequacy_item())  # type: ignore[arg-type]
