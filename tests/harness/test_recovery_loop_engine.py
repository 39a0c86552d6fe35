"""The recovery loop on the real engine: where the model's judgement decides the route (issue 30).

Marked ``engine``: run on a machine with the accelerator.  The scripted tests in test_recovery_loop.py prove the
rules; these prove that a real verdict, fed through them, ends where the seed's harness says.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from suffice.config import JudgeConfig
from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate
from suffice.harness.pipeline import Pipeline, PipelineConfig
from suffice.harness.retrieval import FunctionRetriever
from suffice.judge import Judge
from suffice.records.item import Chunk
from tests.gates import recovery_checks

pytestmark = [pytest.mark.engine, pytest.mark.any_backend]

QUESTION = "When did the Sydney Harbour Bridge open, and who designed it?"
OPENING = {"id": "open", "text": "The Sydney Harbour Bridge opened on 19 March 1932.", "source": "bridge.pdf"}
DESIGN = {"id": "design", "text": "The bridge was designed by John Bradfield.", "source": "design.pdf"}
WRONG = "The bridge was opened in 1802 by Napoleon and designed by his cat."


def test_a_real_verdict_on_a_wrong_answer_ends_delivered_as_given_or_with_its_gap_shown(tmp_path, engine):
    """Which route the embedded 135M model picks is not the subject (it proves the plumbing, not the
    judgement): whichever it is, a delivered answer is the response as given (with its citations inline) and an
    abstention shows its gap."""
    judge = Judge(engine, RecoveryGate(SufficiencyThreshold(min_passages=1)))
    pipeline = Pipeline(judge, FunctionRetriever(lambda q, k: []), PipelineConfig(max_rounds=1), audit=tmp_path / "a")
    [outcome] = pipeline.run([{"id": "b", "question": QUESTION, "response": WRONG, "chunks": [OPENING]}])
    if outcome.kind == "delivered":
        assert strip_markers(outcome.answer) == WRONG and "[CITATION:" in outcome.answer
    elif outcome.kind == "abstained":
        assert outcome.gap  # what is missing is shown, never a silent drop


def test_regeneration_after_re_retrieval_delivers_the_generated_answer_as_is(tmp_path, engine):
    answers: list[str] = []

    def generator(question: str, chunks: Sequence[Chunk]) -> str:
        texts = " ".join(c.text for c in chunks)
        answer = "The bridge opened on 19 March 1932."
        if "Bradfield" in texts:
            answer += " It was designed by John Bradfield."
        answers.append(answer)
        return answer

    judge = Judge(engine, RecoveryGate(SufficiencyThreshold(min_passages=1, required_support_ratio=0.5)))
    retriever = FunctionRetriever(lambda query, k: [DESIGN])
    pipeline = Pipeline(judge, retriever, PipelineConfig(max_rounds=2), audit=tmp_path / "a", generator=generator)
    [outcome] = pipeline.run([{"id": "b", "question": QUESTION, "chunks": [OPENING]}])
    assert answers, "the first answer comes from the generator"
    if outcome.kind == "delivered":
        # The checked answer, byte for byte with its citations inline, never the judge's wording.
        assert strip_markers(outcome.answer) == answers[-1]
        assert outcome.citations
    attempts = pipeline.audit.retrievals()
    assert all(a["width"] and a["queries"] for a in attempts)
    assert pipeline.audit.verify().ok


def test_a_short_and_a_windowed_response_are_judged_whole_through_the_pipeline(tmp_path, engine):
    """Issue 49 through the ``Pipeline``: every segment of each response judged once, citing only sources shown,
    the longer one in several windows; a delivered answer is the response with its citations inline."""
    config = JudgeConfig(gate="recovery", options={"threshold": "loose"}, max_response_tokens=100)
    judge = Judge(engine, config=config)
    pipeline = Pipeline(judge, FunctionRetriever(lambda q, k: []), PipelineConfig(max_rounds=1), audit=tmp_path / "a")
    records = recovery_checks.records()
    outcomes = pipeline.run(records)
    for record, outcome in zip(records, outcomes, strict=True):
        assert outcome.verdict is not None, outcome
        verdict = outcome.verdict  # the row's verdict, as JSON
        recovery_checks.assert_judged_whole(record, verdict)
        if outcome.kind == "delivered":
            assert outcome.answer == verdict["answer"]
    assert outcomes[0].verdict["windows"] == 1 and outcomes[1].verdict["windows"] > 1
    assert pipeline.audit.verify().ok
