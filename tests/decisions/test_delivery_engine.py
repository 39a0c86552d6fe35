"""``deliver`` is earned on the real engine, one case per detail (issue 48): the input forces what the route may be
whatever the embedded model decides, and the route is checked against the verdict the engine gave.  The table of
every gate, detail and entry point is on the scripted engine (``tests/decisions/test_delivery_earned.py``)."""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.judge import Judge

pytestmark = [pytest.mark.engine, pytest.mark.any_backend]

CHUNKS = [
    {"id": "a", "text": "Ada Lovelace wrote the notes on the Analytical Engine in 1843.", "source": "ada.txt"},
    {"id": "b", "text": "The Analytical Engine was designed by Charles Babbage.", "source": "babbage.txt"},
]
QUESTION = "Who wrote the notes on the Analytical Engine?"
RESPONSE = "Ada Lovelace wrote the notes on the Analytical Engine."


def test_a_decision_only_recovery_verdict_never_delivers(engine):
    # Under the strict threshold a positive decision goes to a person (its rule reads the full verdict), and so
    # does a negative one (high stakes): the route follows from the decision the model gave, and is never deliver.
    judge = Judge(engine, config=JudgeConfig(gate="recovery", detail="decision", cache=False))
    [result] = judge.judge_batch([{"id": "q", "question": QUESTION, "chunks": CHUNKS, "response": RESPONSE}])
    verdict = result.verdict
    assert isinstance(verdict, DecisionVerdict), result.error
    routing = judge.gate.route(verdict)
    expected = "decision_only" if verdict.positive else "decision_only_high_stakes"
    assert (routing.route, routing.rule) == ("human_review", expected)


def test_a_cut_question_is_never_delivered_as_checked(engine):
    question = QUESTION + " " + " ".join(["Please answer with the full name of the author."] * 12)
    judge = Judge(engine, config=JudgeConfig(gate="sufficiency", max_question_tokens=16, cache=False))
    [result] = judge.judge_batch([{"id": "q", "question": question, "chunks": CHUNKS}])
    verdict = result.verdict
    assert verdict is not None and verdict.question_truncated, result.error
    routing = judge.gate.route(verdict)
    if judge.gate.is_positive(verdict):
        assert (routing.route, routing.rule) == ("human_review", "question_not_fully_checked")
    else:
        assert routing.route == "retrieve_more"


def test_auto_judges_a_long_response_whole_in_windows_and_routes_as_its_verdict_says(engine):
    # A response longer than max_response_tokens: a positive decision escalates (decision_only), a negative one too
    # (high stakes); the full verdict judges every segment of it, one window each here, and routes (recovery v4: no
    # response is cut, so its length never sends it to a person).
    from suffice.gates.recovery.citing import strip_markers

    response = " ".join([RESPONSE] * 20)
    config = JudgeConfig(gate="recovery", detail="auto", max_response_tokens=24, cache=False)
    judge = Judge(engine, config=config)
    [result] = judge.judge_batch([{"id": "q", "question": QUESTION, "chunks": CHUNKS, "response": response}])
    assert result.cascade is not None and result.cascade.detail == "full", result.error
    assert result.cascade.reason in ("decision_only", "decision_only_high_stakes")
    verdict = result.verdict
    assert verdict is not None and not isinstance(verdict, DecisionVerdict) and not verdict.response_truncated
    assert [s.index for s in verdict.segments] == list(range(20)) and verdict.windows > 1
    routing = judge.gate.route(verdict)
    assert (routing.route, routing.rule) == (verdict.decision.route, verdict.decision.rule)
    assert routing.rule != "response_not_fully_checked"
    if routing.route == "deliver":
        assert strip_markers(routing.answer, judge.gate.unsupported_marker) == response
