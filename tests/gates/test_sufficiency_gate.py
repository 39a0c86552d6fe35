"""Issue 30 at the gate: bounds as options, limits reported in the row, the model's own
probability kept beside a forced decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice.exceptions import ConfigError, VerdictError
from suffice.formats.verdicts import export
from suffice.gates.sufficiency.calibration import GateConfig
from suffice.gates.sufficiency.gate import SufficiencyGate, SufficiencyOptions
from suffice.gates.sufficiency.grammar import SufficiencyBounds, SufficiencyVerdict
from suffice.prompts.fitting import FittedPrompt, ShownChunk
from suffice.records.item import Chunk, Item
from suffice.settings import declared
from tests.grammars.test_sufficiency import output


def gate(**options: object) -> SufficiencyGate:
    return SufficiencyGate.from_options(SufficiencyOptions.parse("sufficiency", options))


def fitted(g: SufficiencyGate, n: int) -> FittedPrompt:
    shown = tuple(ShownChunk(label=i, id=f"c{i}", text=f"text {i}", source=None, truncated=False) for i in range(n))
    return FittedPrompt(
        messages=(),
        shown=shown,
        constraint=g.constraint_for([Chunk(id=f"c{i}", text=f"text {i}") for i in range(n)]),
        truncated_chunk_ids=[],
        omitted_chunk_ids=[],
        question_truncated=False,
    )


ITEM = Item(id="q", question="q?", chunks=(Chunk(id="c0", text="t"),))


def entities(n: int, covered: bool = True) -> list[dict[str, object]]:
    return [{"entity": f"Entity {i}", "covered": covered} for i in range(n)]


def test_the_options_default_to_bounds_that_cover_the_labeled_data():
    options = SufficiencyOptions()
    assert options.bounds == SufficiencyBounds()
    assert (options.max_entities, options.max_useful_chunks) == (5, 8)
    helps = {d.name: d.spec.help for d in declared(SufficiencyOptions)}
    assert "99.25%" in helps["max_entities"]
    assert "100%" in helps["max_useful_chunks"]


@pytest.mark.parametrize(("key", "value"), [("max_entities", 0), ("max_entities", 17), ("max_useful_chunks", 65)])
def test_an_option_out_of_range_is_named_in_the_error(key, value):
    with pytest.raises(ConfigError) as info:
        SufficiencyOptions.parse("sufficiency", {key: value})
    assert key in str(info.value)
    assert "no such option" not in str(info.value)  # an option of the gate, out of its range


def test_the_options_reach_the_constraint_and_the_prompt():
    g = gate(max_entities=9, max_useful_chunks=12)
    assert g.bounds == SufficiencyBounds(entities_max=9, useful_max=12)
    assert g.constraint_for([Chunk(id=f"c{i}", text="t") for i in range(20)]).key == "sufficiency/20/e9/u12"
    assert g.system_context(ITEM)["bounds"]["ENTITIES_MAX"] == 9
    assert g.system_context(ITEM)["bounds"]["USEFUL_MAX"] == 12
    assert g.settings()["max_entities"] == "9"
    assert "max_entities" not in gate().settings()  # the defaults leave a run's settings as they were


def test_twelve_useful_chunks_parse_under_the_option_and_are_refused_at_the_default():
    text = output(useful_chunk_ids=list(range(12)))
    g = gate(max_useful_chunks=12)
    verdict = g.parse(text, fitted(g, 20), ITEM)
    assert verdict.useful_chunk_ids == [f"c{i}" for i in range(12)]
    assert verdict.at_limit == ["useful_chunk_ids"]
    with pytest.raises(VerdictError):
        gate().parse(text, fitted(gate(), 20), ITEM)


def test_a_verdict_at_a_limit_says_so_in_the_row():
    g = gate(max_entities=5)
    verdict = g.parse(output(required_entities=entities(5)), fitted(g, 3), ITEM)
    assert verdict.at_limit == ["required_entities"]
    assert export(g, verdict, "suffice")["verdict"]["at_limit"] == ["required_entities"]
    assert export(g, verdict, "ragflow")["at_limit"] == ["required_entities"]
    below = g.parse(output(required_entities=entities(4)), fitted(g, 3), ITEM)
    assert below.at_limit == []
    assert "at_limit" not in export(g, below, "ragflow")


def test_parse_refuses_an_insufficient_verdict_naming_only_commas():
    text = output(is_sufficient=False, missing_information=[",", ",", ","], useful_chunk_ids=[])
    with pytest.raises(VerdictError, match="names nothing"):
        gate().parse(text, fitted(gate(), 3), ITEM)


FORCED_TEXT = output(
    required_entities=[{"entity": "the treaty", "covered": False}],
    is_sufficient=False,
    missing_information=["the treaty's year"],
    useful_chunk_ids=[0],
)


def forced(g: SufficiencyGate, p_true: float) -> SufficiencyVerdict:
    verdict = g.with_probabilities(g.parse(FORCED_TEXT, fitted(g, 3), ITEM), {"true": p_true, "false": 1 - p_true})
    assert isinstance(verdict, SufficiencyVerdict)
    return verdict


def test_a_forced_decision_keeps_the_models_own_probability():
    g = gate()
    verdict = forced(g, 0.8)
    assert verdict.p_sufficient == 0.8  # the model's, not a forced 0.0
    assert verdict.forced_by == "uncovered_entity"
    assert verdict.is_sufficient is False
    scores = g.calibration_scores(verdict.model_dump(mode="json"))
    assert scores["p_sufficient"] == 0.8
    assert scores["decision"] == 0.0


def test_routing_still_uses_the_forced_decision():
    g = gate()
    verdict = forced(g, 0.95)
    assert g.is_positive(verdict) is False
    route = g.route(verdict)
    assert route.route == "retrieve_more"
    assert route.scores["p_sufficient"] == 0.95
    row = export(g, verdict, "ragflow")
    assert row["verdict"]["is_sufficient"] is False
    assert (row["forced_by"], row["p_sufficient"]) == ("uncovered_entity", 0.95)


def test_a_calibrated_threshold_cannot_overturn_a_forced_decision(tmp_path: Path):
    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.5).save(path)
    g = gate(gate_config=str(path))
    verdict = forced(g, 0.9)
    assert verdict.decision is not None and verdict.decision.sufficient is False
    assert "forced" in verdict.decision.reason
    assert g.is_positive(verdict) is False
    assert g.route(verdict).route == "retrieve_more"
    assert g.seed_verdict(verdict)["Sufficient Context"] is False
    free = g.with_probabilities(g.parse(output(), fitted(g, 3), ITEM), {"true": 0.9, "false": 0.1})
    assert g.is_positive(free) is True  # an unforced verdict still follows the threshold


def test_an_unforced_verdict_is_not_marked_forced():
    g = gate()
    verdict = g.with_probabilities(g.parse(output(), fitted(g, 3), ITEM), {"true": 0.7, "false": 0.3})
    assert isinstance(verdict, SufficiencyVerdict)
    assert verdict.forced_by is None and verdict.p_sufficient == 0.7
    assert json.loads(verdict.model_dump_json())["forced_by"] is None
