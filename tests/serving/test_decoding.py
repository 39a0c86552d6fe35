"""The one path both segment-by-segment engines (vLLM in process, the openai engine) take for end-of-sequence ids
and top log-probabilities."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from suffice.serving.decoding import TokenTrail, eos_ids, merge_by_text


def test_eos_ids_join_the_tokenizers_and_the_generation_configs():
    tokenizer = SimpleNamespace(eos_token_id=2)
    assert eos_ids(tokenizer, [7, 8, "x"]) == {2, 7, 8}
    assert eos_ids(tokenizer, 9) == {2, 9}
    assert eos_ids(SimpleNamespace(eos_token_id=None), None) == frozenset()


def test_tokens_that_decode_alike_are_one_choice_whose_probabilities_add():
    top = merge_by_text([("yes", math.log(0.25)), (" no", math.log(0.5)), ("yes", math.log(0.25)), (None, 0.0)])
    assert top.keys() == {"yes", " no"}
    assert top["yes"] == pytest.approx(math.log(0.5))


def test_a_trail_keeps_positions_aligned_with_the_text():
    trail = TokenTrail(wanted=True)
    trail.stand_in('{"a":')
    trail.add("yes}", True, (["yes", "}", "<eos>"], [{"yes": -0.1}, {"}": 0.0}, {}]), kept=2)
    trail.add("tail", False, None, kept=1)
    assert trail.result() == (('{"a":', "yes", "}", "tail"), ({}, {"yes": -0.1}, {"}": 0.0}, {}))


def test_a_scored_segment_without_log_probabilities_leaves_the_generation_without_any():
    trail = TokenTrail(wanted=True)
    trail.add("yes", True, None, kept=1)
    trail.add("no", True, (["no"], [{"no": 0.0}]), kept=1)
    assert trail.result() == (None, None)
    assert TokenTrail(wanted=False).result() == (None, None)


def test_the_in_process_engine_absorbs_a_segment_through_the_trail():
    """vLLM's per-position logprobs (ids to entries) merged by text, the end-of-sequence token left out: checked
    without an engine (the engine tests run it on a real one)."""
    from suffice.serving.vllm.driver import TokenSequence as _Sequence
    from suffice.serving.vllm.engine import VLLMEngine

    engine = object.__new__(VLLMEngine)
    engine._eos_ids = frozenset({0})

    def entry(text: str, logprob: float) -> SimpleNamespace:
        return SimpleNamespace(decoded_token=text, logprob=logprob)

    segment = SimpleNamespace(logprobs=True, speculative=False)
    seq = _Sequence(0, [1], None, segment, trail=TokenTrail(wanted=True))  # type: ignore[arg-type]
    completion = SimpleNamespace(
        token_ids=[5, 6, 0],
        text="yes",
        finish_reason="stop",
        logprobs=[{5: entry("ye", -0.5), 7: entry("ye", -1.5)}, {6: entry("s", 0.0)}, {0: entry("</s>", 0.0)}],
    )
    engine._absorb(seq, completion)
    tokens, tops = seq.trail.result()
    assert tokens == ("ye", "s") and seq.generated_ids == [5, 6] and seq.text == "yes"
    assert tops is not None and tops[0]["ye"] == pytest.approx(math.log(math.exp(-0.5) + math.exp(-1.5)))
    seq.segment = SimpleNamespace(logprobs=True, speculative=False)
    engine._absorb(seq, SimpleNamespace(token_ids=[8], text="!", finish_reason="stop", logprobs=None))
    assert seq.trail.result() == (None, None)
