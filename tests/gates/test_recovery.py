"""The recovery gate on the scripted engine: what a decision delivers, and in what form.

The engine is scripted (it proves the gate's handling of a verdict, not the model's
judgement); the real engine's verdicts are checked in test_recovery_engine.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from pydantic import ValidationError

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


def test_a_sufficient_verdict_delivers_its_cited_answer():
    verdict = judged(SUFFICIENT, SufficiencyThreshold.loose())
    assert verdict.delivered_answer == "Ada Lovelace wrote the notes [CITATION:ada.txt]"


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
