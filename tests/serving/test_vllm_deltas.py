"""A sequence's first request streams deltas (so the driver sees its prompt read, for
progress); the deltas are joined into what a final output would have been."""

from __future__ import annotations

from types import SimpleNamespace

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import lit
from suffice.serving.vllm_engine import _Sequence


def _sequence() -> _Sequence:
    head = Segment.from_rx(lit("ab"), key="test/deltas")
    constraint = Constraint(pattern="ab", max_bytes=2, key="test/deltas", head=head)
    return _Sequence(0, [1], constraint, head)


def _delta(ids: list[int], text: str, finish: str | None, logprobs: list[dict[int, float]] | None = None) -> object:
    return SimpleNamespace(token_ids=ids, text=text, finish_reason=finish, logprobs=logprobs)


def test_deltas_before_the_last_give_nothing_yet():
    seq = _sequence()
    seq.read = True
    assert seq.collect(_delta([5], "a", None)) is None


def test_deltas_are_joined_in_order():
    seq = _sequence()
    seq.read = True
    seq.collect(_delta([5], "a", None))
    joined = seq.collect(_delta([6, 7], "b", "stop"))
    assert joined.token_ids == [5, 6, 7]
    assert joined.text == "ab"
    assert joined.finish_reason == "stop"


def test_joined_log_probabilities_keep_one_entry_per_token():
    seq = _sequence()
    seq.read = True
    seq.collect(_delta([5], "a", None, [{5: -0.1}]))
    joined = seq.collect(_delta([6], "b", "stop", [{6: -0.2}]))
    assert joined.logprobs == [{5: -0.1}, {6: -0.2}]


def test_a_delta_without_log_probabilities_drops_them_for_the_segment():
    seq = _sequence()
    seq.read = True
    seq.collect(_delta([5], "a", None, [{5: -0.1}]))
    joined = seq.collect(_delta([6], "b", "stop", None))
    assert joined.logprobs is None


def test_a_final_output_after_the_deltas_is_taken_as_it_is():
    seq = _sequence()
    seq.read = True
    seq.collect(_delta([5], "a", "stop"))
    final = _delta([8, 9], "cd", "stop")
    assert seq.collect(final) is final


def test_the_deltas_are_forgotten_once_joined():
    seq = _sequence()
    seq.read = True
    seq.collect(_delta([5], "a", None))
    seq.collect(_delta([6], "b", "stop"))
    assert seq.parts == []
