"""The recovery gate on the scripted engine: what a decision delivers, and in what form.

The engine is scripted (it proves the gate's handling of a verdict, not the model's
judgement); the real engine's verdicts are checked in test_recovery_engine.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from pydantic import ValidationError

from suffice.formats.verdicts import export
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.recovery.grammar import Classification, RecoveryDecision, RecoveryVerdict, parse_citations
from suffice.judge import Judge
from tests.fakes import ScriptedEngine

RESPONSE = "Ada Lovelace wrote the notes in 1843."
PARTIAL = {
    "classification": "PARTIALLY_SUFFICIENT",
    "supported_claims": ["Ada Lovelace wrote the notes"],
    "unsupported_claims": ["the notes are from 1843"],
    "abstention_notice": "No passage gives the year.",
    "suggested_retrieval_queries": ["Ada Lovelace notes year"],
}
SUFFICIENT = {
    "classification": "SUFFICIENT",
    "supported_claims": ["Ada Lovelace wrote the notes"],
    "unsupported_claims": [],
    "answer": "Ada Lovelace wrote the notes [CITATION:0]",
}


def record(source: str = "ada.txt") -> dict[str, object]:
    return {
        "id": "ada",
        "question": "Who wrote the notes, and when?",
        "response": RESPONSE,
        "chunks": [{"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": source}],
    }


def judged(output: Mapping[str, object], threshold: SufficiencyThreshold, source: str = "ada.txt") -> RecoveryVerdict:
    text = json.dumps(output, separators=(",", ":"), ensure_ascii=False)
    judge = Judge(ScriptedEngine(lambda request: text), RecoveryGate(threshold))
    verdict = judge.judge_batch([record(source)])[0].verdict
    assert isinstance(verdict, RecoveryVerdict)
    return verdict


def decided(output: Mapping[str, object], threshold: SufficiencyThreshold, source: str = "ada.txt") -> RecoveryDecision:
    decision = judged(output, threshold, source).decision
    assert decision is not None
    return decision


def test_loose_partial_verdict_is_delivered():
    assert decided(PARTIAL, SufficiencyThreshold.loose()).route == "deliver"


def test_loose_partial_verdict_keeps_the_checked_answer():
    assert judged(PARTIAL, SufficiencyThreshold.loose()).partial_answer == RESPONSE


def test_loose_partial_verdict_delivers_the_checked_answer():
    assert judged(PARTIAL, SufficiencyThreshold.loose()).delivered_answer == RESPONSE


def test_loose_partial_verdict_delivers_caveats():
    caveats = decided(PARTIAL, SufficiencyThreshold.loose()).caveats
    assert caveats == ["the notes are from 1843", "No passage gives the year."]


def test_loose_partial_verdict_still_exports_the_seed_schema_without_an_answer():
    assert "answer" not in judged(PARTIAL, SufficiencyThreshold.loose()).to_seed()


def test_strict_partial_verdict_goes_to_review():
    assert decided(PARTIAL, SufficiencyThreshold.strict()).route == "human_review"


def test_strict_partial_verdict_keeps_no_partial_answer():
    assert judged(PARTIAL, SufficiencyThreshold.strict()).partial_answer is None


def test_strict_partial_verdict_delivers_nothing():
    assert judged(PARTIAL, SufficiencyThreshold.strict()).delivered_answer is None


def test_a_sufficient_verdict_delivers_the_checked_answer_as_given():
    verdict = judged(SUFFICIENT, SufficiencyThreshold.loose())
    assert verdict.delivered_answer == RESPONSE
    # The judge's own cited wording is kept as the verdict's ``answer``, not delivered.
    assert verdict.answer == "Ada Lovelace wrote the notes [CITATION:ada.txt]"


def test_the_gate_exports_an_odd_source_id_escaped():
    verdict = judged(SUFFICIENT, SufficiencyThreshold.loose(), source="Wiki [en]")
    assert verdict.to_seed()["answer"] == "Ada Lovelace wrote the notes [CITATION:Wiki %5Ben%5D]"


def test_the_gate_s_exported_citation_reads_back_as_the_source():
    verdict = judged(SUFFICIENT, SufficiencyThreshold.loose(), source="Wiki [en]")
    assert parse_citations(verdict.to_seed()["answer"]) == ["Wiki [en]"]


def test_the_cited_source_of_an_odd_source_id_still_backs_the_answer():
    decision = decided(SUFFICIENT, SufficiencyThreshold.loose(), source="Wiki [en]")
    assert decision.supporting_passages == 1


def test_a_partial_answer_belongs_only_to_a_partial_verdict():
    with pytest.raises(ValidationError, match="partial_answer"):
        RecoveryVerdict(
            classification=Classification.INSUFFICIENT,
            supported_claims=[],
            unsupported_claims=["x"],
            abstention_notice="n",
            suggested_retrieval_queries=["q"],
            prompt_version="recovery/v1",
            partial_answer=RESPONSE,
        )


def test_a_delivered_partial_answer_counts_as_positive():
    gate = RecoveryGate(SufficiencyThreshold.loose())
    assert gate.is_positive(judged(PARTIAL, SufficiencyThreshold.loose())) is True


def test_a_sufficient_class_below_the_strict_threshold_does_not_count_as_positive():
    # One passage only: the strict preset asks for two, so the class does not route to deliver.
    verdict = judged(SUFFICIENT, SufficiencyThreshold.strict())
    assert RecoveryGate(SufficiencyThreshold.strict()).is_positive(verdict) is False


def test_the_calibration_decision_is_the_decision_that_routes():
    # calibration_scores' "decision" is "the binary decision that routes" (Gate): the
    # report's decision metrics must count what is_positive and the summary count.
    strict, loose = SufficiencyThreshold.strict(), SufficiencyThreshold.loose()
    below = judged(SUFFICIENT, strict)  # SUFFICIENT class, one passage of two: retrieve_more
    partial = judged(PARTIAL, loose)  # PARTIALLY_SUFFICIENT delivered with caveats
    for verdict, threshold in ((below, strict), (partial, loose)):
        gate = RecoveryGate(threshold)
        scores = gate.calibration_scores(verdict.model_dump(mode="json"))
        assert scores["decision"] == float(gate.is_positive(verdict))


# -- issue 30: what a decision delivers, abstention, thresholds, the seed export ----------------------------------
INSUFFICIENT = {
    "classification": "INSUFFICIENT",
    "supported_claims": [],
    "unsupported_claims": ["who wrote the notes"],
    "abstention_notice": "No passage names the author.",
    "suggested_retrieval_queries": ["Analytical Engine notes author"],
}


def judged_record(output: Mapping[str, object], rec: Mapping[str, object], threshold: object) -> RecoveryVerdict:
    text = json.dumps(output, separators=(",", ":"), ensure_ascii=False)
    gate = RecoveryGate.from_options(RecoveryGate.options_model.parse("recovery", {"threshold": threshold}))
    verdict = Judge(ScriptedEngine(lambda request: text), gate).judge_batch([rec])[0].verdict
    assert isinstance(verdict, RecoveryVerdict)
    return verdict


def test_a_delivered_response_goes_out_byte_for_byte_with_the_citations_beside_it():
    response = "Ada  Lovelace wrote them.\n\n  See *the notes* — 1843 [ref 1]. "
    verdict = judged_record(SUFFICIENT, {**record(), "response": response}, "loose")
    routing = RecoveryGate(SufficiencyThreshold.loose()).route(verdict)
    assert routing.route == "deliver"
    assert routing.answer == response
    assert routing.citations == ["ada.txt"]
    assert routing.judge_answer is None


def test_the_judge_answer_is_offered_under_its_own_name_only_without_a_response():
    # A verdict judged for a record without a response (the gate's parse sets no checked answer then).
    verdict = judged(SUFFICIENT, SufficiencyThreshold.loose()).model_copy(update={"checked_answer": None})
    routing = RecoveryGate(SufficiencyThreshold.loose()).route(verdict)
    assert routing.answer is None
    assert routing.judge_answer == "Ada Lovelace wrote the notes [CITATION:ada.txt]"


def test_a_checked_answer_belongs_only_to_a_sufficient_verdict():
    with pytest.raises(ValidationError, match="checked_answer"):
        RecoveryVerdict(**{**INSUFFICIENT, "prompt_version": "recovery/v3", "checked_answer": RESPONSE})


def test_insufficient_with_no_retrieval_left_abstains_with_the_gap_and_queries():
    from suffice.gates.recovery.decision import decide

    verdict = RecoveryVerdict(**{**INSUFFICIENT, "prompt_version": "recovery/v3"})
    decision = decide(verdict, [], SufficiencyThreshold.loose(), can_retrieve=False)
    assert (decision.route, decision.rule) == ("abstain", None)
    assert decision.gap == ["who wrote the notes"]
    assert decision.queries == ["Analytical Engine notes author"]


def test_a_high_stakes_abstention_goes_to_a_person_with_the_gap_and_queries():
    # The seed: "Add a human review gate when the system abstains on high-stakes queries".
    from suffice.gates.recovery.decision import decide

    verdict = RecoveryVerdict(**{**INSUFFICIENT, "prompt_version": "recovery/v3"})
    decision = decide(verdict, [], SufficiencyThreshold.strict(), can_retrieve=False)
    assert (decision.route, decision.rule) == ("human_review", "abstained_high_stakes")
    assert decision.gap == ["who wrote the notes"]
    assert decision.queries == ["Analytical Engine notes author"]
    assert decide(verdict, [], SufficiencyThreshold.strict()).route == "retrieve_more"


def test_a_strict_partial_verdict_goes_to_human_review_by_its_rule():
    from suffice.gates.recovery.decision import decide

    verdict = RecoveryVerdict(**{**PARTIAL, "prompt_version": "recovery/v3"})
    for can_retrieve in (True, False):
        decision = decide(verdict, [], SufficiencyThreshold.strict(), can_retrieve=can_retrieve)
        assert (decision.route, decision.rule) == ("human_review", "partial_under_high_stakes")


def test_explicit_threshold_values_fill_the_rest_from_strict():
    threshold = SufficiencyThreshold.from_spec("min_passages=1,min_cumulative_score=1.5,required_support_ratio=0.8")
    strict = SufficiencyThreshold.strict()
    assert (threshold.min_passages, threshold.min_cumulative_score, threshold.required_support_ratio) == (1, 1.5, 0.8)
    assert threshold.high_stakes is strict.high_stakes and threshold.accept_partial is strict.accept_partial
    assert SufficiencyThreshold.from_spec({"min_passages": 1, "min_passage_score": 0.3}) == SufficiencyThreshold(
        min_passages=1, required_support_ratio=1.0, high_stakes=True, min_passage_score=0.3
    )


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ("min_passages=two", "min_passages"),
        ("min_passages=-1", "min_passages"),
        ("required_support_ratio=1.5", "required_support_ratio"),
        ("min_passage_score=high", "min_passage_score"),
        ("min_pasages=2", "min_pasages"),
        ("high_stakes=maybe", "high_stakes"),
        ({"min_cumulative_score": "x"}, "min_cumulative_score"),
    ],
)
def test_a_bad_threshold_value_is_refused_naming_the_key(spec, key):
    from suffice.exceptions import ConfigError

    with pytest.raises(ConfigError, match=key):
        RecoveryGate.options_model.parse("recovery", {"threshold": spec})


def test_the_threshold_option_takes_explicit_values_as_the_command_line_gives_them():
    options = RecoveryGate.options_model.parse("recovery", {"threshold": "min_passages=1,required_support_ratio=0.5"})
    gate = RecoveryGate.from_options(options)
    assert gate.threshold.min_passages == 1 and gate.threshold.required_support_ratio == 0.5


def scored_record(score: float) -> dict[str, object]:
    chunk = {"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"}
    return {**record(), "chunks": [{**chunk, "score": score}]}


def test_a_cited_passage_under_the_per_passage_floor_does_not_count():
    spec = {"min_passages": 1, "min_passage_score": 0.5}
    weak = judged_record(SUFFICIENT, scored_record(0.2), spec).decision
    strong = judged_record(SUFFICIENT, scored_record(0.9), spec).decision
    assert weak is not None and strong is not None
    assert weak.route == "retrieve_more" and weak.supporting_passages == 0
    assert "0.5" in weak.reason
    assert strong.route == "deliver" and strong.supporting_passages == 1


def test_the_seed_export_writes_the_seed_harness_names():
    from suffice.gates.recovery.decision import decide

    delivered = judged(SUFFICIENT, SufficiencyThreshold.loose()).to_seed()
    assert delivered["sufficiency_verdict"] == "SUFFICIENT" and delivered["retrieval_queries"] == []
    more = judged(INSUFFICIENT, SufficiencyThreshold.loose()).to_seed()
    assert more["sufficiency_verdict"] == "INSUFFICIENT"
    assert more["retrieval_queries"] == ["Analytical Engine notes author"]
    assert "who wrote the notes" in more["gap_description"]
    verdict = RecoveryVerdict(**{**INSUFFICIENT, "prompt_version": "recovery/v3"})
    verdict = verdict.model_copy(
        update={"decision": decide(verdict, [], SufficiencyThreshold.strict(), can_retrieve=False)}
    )
    seed = verdict.to_seed()
    assert seed["sufficiency_verdict"] == "ABSTAIN"
    assert seed["gap_description"] == "who wrote the notes; No passage names the author."
    assert seed["retrieval_queries"] == ["Analytical Engine notes author"]


def test_the_seed_format_row_carries_the_seed_names():
    gate = RecoveryGate(SufficiencyThreshold.loose())
    row = export(gate, judged(INSUFFICIENT, SufficiencyThreshold.loose()), "seed")
    assert {"sufficiency_verdict", "gap_description", "retrieval_queries"} <= set(row["verdict"])
