"""The composite and the decision against values computed by hand."""

import json
import re

import pytest

from suffice.exceptions import ConfigError
from suffice.gates.adequacy.decision import composite_score, decide, judge_criteria
from suffice.gates.adequacy.gate import AdequacyGate
from suffice.gates.adequacy.grammar import DIMENSIONS, AdequacyOutput
from suffice.gates.adequacy.store import Rubric, RubricStore, builtin_dir


def rubric(risk="LOW", critical=None, threshold=0.6, minimums=None, criteria=("c",), **more):
    # No per-dimension minimum unless given: these tests are about the composite.
    return Rubric(
        name="t",
        version="1",
        use_case="test",
        risk_level=risk,
        criteria=list(criteria),
        weights={"factual_coverage": 2.0, "temporal_relevance": 1.0, "source_authority": 1.0},
        critical=critical or {},
        pass_threshold=threshold,
        minimums={"factual_coverage": 0.0, "temporal_relevance": 0.0, "source_authority": 0.0}
        if minimums is None
        else minimums,
        **more,
    )


def output(scores, decision="PASS", missing=(), recommendation="RETRIEVE_MORE", criteria=(0.9,)):
    """``criteria``: each criterion's score, in order (the test rubric has one criterion)."""
    return AdequacyOutput(
        adequacy_decision=decision,
        adequacy_score=0.5,
        criteria=[{"criterion": n, "score": c, "assessment": "a"} for n, c in enumerate(criteria, 1)],
        dimensions={d: {"score": scores.get(d, 0.0), "assessment": "a"} for d in DIMENSIONS},
        missing_information=list(missing),
        recommendation=recommendation,
        rationale="r",
    )


SCORES = {"factual_coverage": 0.9, "temporal_relevance": 0.5, "source_authority": 0.3, "entity_completeness": 1.0}


def test_composite_uses_weights_not_a_plain_mean():
    # (2*0.9 + 1*0.5 + 1*0.3 + 0*1.0 + 0*0.0) / 4 = 0.65
    assert composite_score(output(SCORES).scores(), rubric()) == pytest.approx(0.65)


def test_pass_when_composite_reaches_threshold():
    d = decide(output(SCORES), rubric(threshold=0.65))
    assert d.decision == "PASS" and d.route == "deliver" and d.threshold == pytest.approx(0.65)
    assert d.agrees_with_model


def test_fail_below_threshold_routes_by_the_model_recommendation():
    d = decide(output(SCORES, recommendation="FLAG_AS_UNANSWERABLE"), rubric(threshold=0.66))
    assert d.decision == "FAIL" and d.route == "abstain"
    d = decide(output(SCORES, recommendation="PROCEED_WITH_ANSWER"), rubric(threshold=0.66))
    assert d.route == "retrieve_more" and not d.agrees_with_model
    d = decide(output(SCORES, recommendation="RETRIEVE_MORE"), rubric(threshold=0.66), can_retrieve=False)
    assert d.route == "human_review"


def test_critical_floor_fails_even_above_threshold():
    d = decide(output(SCORES), rubric(critical={"source_authority": 0.4}, threshold=0.5))
    assert d.decision == "FAIL" and d.failed_critical == {"source_authority": 0.3}


def test_risk_level_is_more_conservative():
    # 0.65 passes LOW at 0.6, fails MEDIUM (0.6 + 0.05 = 0.65 passes exactly) and HIGH (0.7).
    assert decide(output(SCORES), rubric("LOW")).decision == "PASS"
    assert decide(output(SCORES), rubric("MEDIUM")).decision == "PASS"
    high = decide(output(SCORES), rubric("HIGH"))
    assert high.decision == "FAIL" and high.threshold == pytest.approx(0.7)
    rich = {**SCORES, "source_authority": 0.9}  # composite (1.8 + 0.5 + 0.9) / 4 = 0.8
    assert decide(output(rich), rubric("HIGH")).decision == "PASS"
    assert decide(output(rich, missing=["a date"]), rubric("HIGH")).decision == "FAIL"
    assert decide(output(rich, decision="FAIL"), rubric("HIGH")).decision == "FAIL"
    assert decide(output(rich, decision="FAIL"), rubric("LOW")).decision == "PASS"


def test_calibrated_threshold_overrides_the_rubric():
    assert decide(output(SCORES), rubric(threshold=0.9), threshold=0.6).decision == "PASS"


@pytest.mark.parametrize("threshold", [-1.0, 5.0, float("nan"), True])
def test_a_threshold_override_outside_zero_to_one_is_refused_naming_it(threshold):
    with pytest.raises(ConfigError) as caught:
        decide(output(SCORES), rubric(), threshold=threshold)
    assert caught.value.parameter == "threshold"


def test_an_adequacy_gate_with_a_threshold_outside_zero_to_one_is_refused_at_construction():
    from suffice.gates.adequacy.gate import AdequacyGate

    with pytest.raises(ConfigError):
        AdequacyGate(threshold=-1.0)


@pytest.mark.parametrize("ref", ["clinical-guidance", "legal-review", "customer-support", "calibrated"])
def test_the_prompt_states_the_threshold_the_decision_applies(ref, tmp_path):
    source = json.loads((builtin_dir() / "legal-review@1.0.0.json").read_text())
    calibrated = {**source, "name": "calibrated", "version": "2", "calibrated_threshold": 0.62}
    (tmp_path / "calibrated@2.json").write_text(json.dumps(calibrated))
    for path in builtin_dir().glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    gate = AdequacyGate(RubricStore(tmp_path), ref)
    item = gate.parse_item({"id": "q", "question": "q?", "chunks": [{"id": 0, "text": "t"}]})
    prompt = gate.template.system.render(**gate.system_context(item))
    stated = float(re.search(r"Pass threshold for the weighted score: ([0-9]+(?:\.[0-9]+)?)", prompt)[1])
    rubric_ = gate.rubric_for(item)
    applied = decide(output(SCORES, criteria=[0.9] * len(rubric_.criteria)), rubric_).threshold
    assert stated == pytest.approx(applied)


@pytest.mark.parametrize("threshold", [0.654, 0.6504, 0.646])
def test_the_reason_states_numbers_that_bear_out_the_decision(threshold):
    # A calibrated threshold has more than two decimals: "composite 0.650 < threshold
    # 0.65" read as a contradiction in every audit log.
    d = decide(output(SCORES), rubric(), threshold=threshold)
    composite, relation, stated = re.match(r"composite (\S+) (<|>=) threshold (\S+?)[,;]?(?: |$)", d.reason).groups()
    assert float(composite) == d.composite_score
    assert float(stated) == d.threshold
    assert (float(composite) >= float(stated)) == (d.decision == "PASS")
    assert (relation == ">=") == (d.decision == "PASS")


def test_pass_needs_every_weighted_dimension_at_its_minimum():
    # The seed: "A PASS decision requires all rubric criteria to be met"; source_authority 0.3 is not met at the
    # default minimum (0.5) though the composite 0.65 passes 0.6.
    d = decide(output(SCORES), rubric(minimums={}))
    assert d.decision == "FAIL" and d.below_minimum == {"source_authority": 0.3}
    assert "source_authority 0.30 < minimum 0.50" in d.reason
    assert decide(output(SCORES), rubric(minimums={"source_authority": 0.25})).decision == "PASS"
    assert Rubric.model_validate({**rubric().model_dump(), "minimums": {}}).minimum("entity_completeness") == 0.0


@pytest.mark.parametrize(
    ("recommendation", "rule"),
    [("ESCALATE_TO_HUMAN", "model_escalated"), ("FLAG_AS_UNANSWERABLE", "model_flagged_unanswerable")],
)
def test_a_model_asking_for_a_person_is_never_delivered_on_a_computed_pass(recommendation, rule):
    d = decide(output(SCORES, recommendation=recommendation), rubric())
    assert d.decision == "PASS" and (d.route, d.rule) == ("human_review", rule)
    assert recommendation in d.reason
    trusted = decide(output(SCORES, recommendation=recommendation), rubric(trust_computed_pass=True))
    assert (trusted.route, trusted.rule, trusted.overrode_recommendation) == ("deliver", None, recommendation)
    assert "trusts the computed PASS" in trusted.reason


def test_each_route_to_a_person_names_its_rule():
    low = rubric(threshold=0.9)
    assert decide(output(SCORES, recommendation="ESCALATE_TO_HUMAN"), low).rule == "model_escalated"
    flagged = decide(output(SCORES, recommendation="FLAG_AS_UNANSWERABLE"), low)
    assert (flagged.route, flagged.rule) == ("abstain", None)
    high = decide(output(SCORES, decision="FAIL", recommendation="FLAG_AS_UNANSWERABLE"), rubric("HIGH"))
    assert (high.route, high.rule) == ("human_review", "model_flagged_unanswerable")
    spent = decide(output(SCORES), low, can_retrieve=False)
    assert (spent.route, spent.rule) == ("human_review", "adequacy_rounds_exhausted")
    assert decide(output(SCORES), low).rule is None


# -- each rubric criterion judged: the seed's "A PASS decision requires all rubric criteria to be met at an
# acceptable threshold. Partial coverage that fails any critical criterion must result in FAIL."


def criteria_rubric(**more):
    """Three criteria, the second critical, the third met only at 0.8; dimensions that pass on their own."""
    return rubric(
        criteria=[
            "the context names the product",
            {"text": "the steps are for the customer's version", "critical": True},
            {"text": "the steps are complete", "minimum": 0.8},
        ],
        **more,
    )


RICH = {"factual_coverage": 0.9, "temporal_relevance": 0.9, "source_authority": 0.9}


def test_a_critical_criterion_not_met_fails_even_when_every_dimension_passes():
    d = decide(output(RICH, recommendation="PROCEED_WITH_ANSWER", criteria=(0.9, 0.3, 0.9)), criteria_rubric())
    assert d.composite_score >= d.threshold and not d.failed_critical and not d.below_minimum
    assert d.decision == "FAIL" and d.route == "retrieve_more"
    assert d.failed_critical_criteria == [2] and d.unmet_criteria == []
    assert d.reason == "critical criterion 2 not met (0.30 < 0.50: the steps are for the customer's version)"


def test_every_criterion_met_lets_the_dimensions_decide():
    d = decide(output(RICH, criteria=(0.5, 0.5, 0.8)), criteria_rubric())
    assert d.decision == "PASS" and d.route == "deliver" and "all 3 criteria met" in d.reason
    assert (d.failed_critical_criteria, d.unmet_criteria) == ([], [])
    assert d.criteria_score == pytest.approx(0.6)
    # Criteria met do not lift dimensions that fail.
    assert decide(output(SCORES, criteria=(1, 1, 1)), criteria_rubric(threshold=0.9)).decision == "FAIL"


@pytest.mark.parametrize(("scores", "unmet"), [((0.49, 0.9, 0.9), [1]), ((0.9, 0.9, 0.79), [3])])
def test_a_criterion_that_is_not_critical_and_not_met_is_no_pass_either(scores, unmet):
    d = decide(output(RICH, criteria=scores), criteria_rubric())
    assert d.decision == "FAIL" and d.unmet_criteria == unmet and d.failed_critical_criteria == []
    assert d.reason.startswith(f"criterion {unmet[0]} not met (")


def test_a_critical_criterion_not_met_routes_as_any_fail_does():
    unmet = (0.9, 0.0, 0.9)
    escalated = decide(output(RICH, recommendation="ESCALATE_TO_HUMAN", criteria=unmet), criteria_rubric())
    assert (escalated.route, escalated.rule) == ("human_review", "model_escalated")
    spent = decide(output(RICH, criteria=unmet), criteria_rubric(), can_retrieve=False)
    assert (spent.route, spent.rule) == ("human_review", "adequacy_rounds_exhausted")
    # A rubric trusting the computed PASS over the model's recommendation does not trust past a criterion.
    trusted = decide(output(RICH, criteria=unmet), criteria_rubric(trust_computed_pass=True))
    assert trusted.decision == "FAIL"


def test_met_is_the_score_against_the_criterions_minimum_computed_not_asked():
    judged = judge_criteria(output(RICH, criteria=(0.5, 0.49, 0.8)), criteria_rubric())
    assert [(c.criterion, c.met, c.critical, c.minimum) for c in judged] == [
        (1, True, False, 0.5),
        (2, False, True, 0.5),
        (3, True, False, 0.8),
    ]
    assert [c.text for c in judged] == [c.text for c in criteria_rubric().criteria]


def test_an_output_scoring_other_criteria_than_the_rubrics_is_refused():
    with pytest.raises(ValueError, match="3 criteria"):
        decide(output(RICH, criteria=(0.9, 0.9)), criteria_rubric())


def test_a_long_criterion_is_named_by_its_beginning():
    text = "the context states " + "every dosage with its unit and frequency " * 3
    d = decide(output(RICH, criteria=(0.1,)), rubric(criteria=[{"text": text, "critical": True}]))
    named = re.fullmatch(r"critical criterion 1 not met \(0\.10 < 0\.50: (.+)…\)", d.reason)
    assert named is not None and text.startswith(named[1]) and len(named[1]) < 60
