"""Every gate fits each item or errors for that item alone (long fields, tiny windows)."""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
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
def test_a_window_too_small_for_the_output_is_one_error_per_item(gate):
    results = judge_for(gate, 300).judge_batch([item(0), item(1)])
    assert [r.error.type for r in results] == ["PromptTooLongError", "PromptTooLongError"]
