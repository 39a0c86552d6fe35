"""Every gate fits each item or errors for that item alone (long fields, tiny windows)."""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.judge import Judge
from tests.fakes import ScriptedEngine

GATES = ("sufficiency", "recovery", "adequacy")


def item(
    i: int,
    *,
    question: str = "Who wrote it?",
    source: str = "doc",
    response: str = "Ada wrote it.",
    text: str = "Ada wrote it.",
):
    return {
        "id": f"r{i}",
        "question": question,
        "response": response,
        "rubric": "customer-support",
        "chunks": [{"id": 0, "text": text, "source": source}],
    }


def judge_for(gate: str, max_model_len: int) -> Judge:
    engine = ScriptedEngine(lambda request: "{}", max_model_len=max_model_len)
    return Judge(engine, config=JudgeConfig(gate=gate))


@pytest.mark.parametrize("gate", GATES)
def test_a_source_name_longer_than_the_window_fails_only_its_item(gate):
    results = judge_for(gate, 4096).judge_batch([item(0, source="s " * 22_500), item(1)])
    assert results[0].error.type == "PromptTooLongError"


@pytest.mark.parametrize("gate", GATES)
def test_the_item_beside_an_unfittable_one_is_still_sent(gate):
    judge = judge_for(gate, 4096)
    judge.judge_batch([item(0, source="s " * 22_500), item(1)])
    assert judge.engine.calls[0] == 1


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("field", ["question", "response", "text"])
def test_long_fields_are_cut_to_fit(gate, field):
    [result] = judge_for(gate, 8192).judge_batch([item(0, **{field: "word " * 50_000})])
    assert result.error.type != "PromptTooLongError"  # the scripted "{}" fails validation instead


@pytest.mark.parametrize("gate", GATES)
def test_a_window_too_small_for_the_output_is_refused_before_any_record(gate):
    with pytest.raises(ConfigError) as caught:
        checked_judge(gate, 300)
    assert caught.value.parameter == "max_model_len"


def test_the_refused_window_says_where_it_went():
    with pytest.raises(ConfigError, match="the output's worst case takes"):
        checked_judge("sufficiency", 300)


@pytest.mark.parametrize("gate", GATES)
def test_a_window_that_holds_a_small_record_is_not_refused(gate):
    """At the smallest window the check accepts, a one-word record reaches the engine
    (the check refuses no window that a record could use)."""
    window = next(n for n in range(300, 8192, 10) if _accepted(gate, n))
    judge = checked_judge(gate, window)
    judge.judge_batch([{"id": "r", "question": "Who?", "response": "Nobody.", "chunks": [{"id": 0, "text": "No."}]}])
    assert judge.engine.calls[0] == 1


def test_adequacy_with_per_record_rubrics_only_is_not_checked():
    """Without a rubric in the config the gate has nothing to fit a probe with: each
    record is fitted with its own rubric and is its own error row."""
    [result] = judge_for("adequacy", 300).judge_batch([item(0)])
    assert result.error.type == "PromptTooLongError"


def checked_judge(gate: str, max_model_len: int) -> Judge:
    """A judge whose config names everything its gate needs (adequacy: a rubric)."""
    engine = ScriptedEngine(lambda request: "{}", max_model_len=max_model_len)
    rubric = "customer-support" if gate == "adequacy" else None
    return Judge(engine, config=JudgeConfig(gate=gate, options={"rubric": rubric} if rubric else {}))


def _accepted(gate: str, window: int) -> bool:
    try:
        checked_judge(gate, window)
    except ConfigError:
        return False
    return True
