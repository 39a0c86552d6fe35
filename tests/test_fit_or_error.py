"""Every gate fits each item or errors for that item alone (long fields, tiny windows)."""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine, prompt_segments

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
    results = judge_for(gate, 8192).judge_batch([item(0, source="s " * 22_500), item(1)])
    assert results[0].error.type == "PromptTooLongError"


@pytest.mark.parametrize("gate", GATES)
def test_the_item_beside_an_unfittable_one_is_still_sent(gate):
    judge = judge_for(gate, 8192)
    judge.judge_batch([item(0, source="s " * 22_500), item(1)])
    assert judge.engine.calls[0] == 1


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("field", ["question", "response", "text"])
def test_long_fields_are_cut_to_fit(gate, field):
    [result] = judge_for(gate, 8192).judge_batch([item(0, **{field: "word " * 50_000})])
    assert result.error.type != "PromptTooLongError"  # the scripted "{}" fails validation instead


def test_a_long_response_is_judged_in_windows_that_each_fit():
    """The recovery gate cuts no response: a long one is judged in windows, every one of them fitting the model with
    its output's worst case, and every word of the response shown in one of them."""
    seen: list[GenerationRequest] = []
    engine = ScriptedEngine(lambda request: seen.append(request) or "{}", max_model_len=8192)
    judge = Judge(engine, config=JudgeConfig(gate="recovery"))
    response = "word " * 50_000
    [result] = judge.judge_batch([item(0, response=response)])
    assert result.error.type == "VerdictError"  # the scripted "{}" fails validation, after the first try and a retry
    windows = seen[: len(seen) // 2]
    assert len(windows) > 1
    for request in windows:
        assert engine.prompt_tokens(request.messages) + request.constraint.max_tokens <= engine.max_model_len
    shown = [text for request in windows for _, text in prompt_segments(request)]
    assert " ".join(shown).split() == response.split()


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
