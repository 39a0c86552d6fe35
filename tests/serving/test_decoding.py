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
