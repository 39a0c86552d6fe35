"""The order vLLM serves suffice's requests in: a sequence's segments keep the place of its first.

A finished segment's continuation is a new request.  Queued by its own arrival it waits behind every
prompt queued since, and its prompt's KV blocks are evicted from the prefix cache meanwhile
(``benchmarks/README.md``, "Where the time goes").  These tests drive the engine's loop and its submission with a
recording stand-in for vLLM's engine core (the real engine's effect is in the benchmark); the rules alone are checked
in tests/serving/test_scheduling.py.
"""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.regex import lit, repeat
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import MachineConfig
from suffice.serving.vllm.driver import Driver as _Driver
from suffice.serving.vllm.driver import Job as _Job
from suffice.serving.vllm.driver import TokenSequence as _Sequence
from suffice.serving.vllm.engine import VLLMEngine
from suffice.serving.vllm.lifecycle import llm_kwargs
from suffice.serving.weights import ModelRef


class _Recorder:
    """What ``LLMEngine.add_request`` was given."""

    def __init__(self) -> None:
        self.added: list[tuple[str, int]] = []

    def add_request(self, request_id: str, prompt: Any, params: Any, priority: int = 0) -> None:
        self.added.append((request_id, priority))


@pytest.fixture
def fake_vllm(monkeypatch):
    """The few names ``_submit`` imports from vLLM, as plain records."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: kw  # type: ignore[attr-defined]
    vllm.TokensPrompt = lambda **kw: kw  # type: ignore[attr-defined]
    params = types.ModuleType("vllm.sampling_params")
    params.RequestOutputKind = types.SimpleNamespace(FINAL_ONLY="final")  # type: ignore[attr-defined]
    params.StructuredOutputsParams = lambda **kw: kw  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", params)


@pytest.fixture
def engine(fake_vllm) -> tuple[VLLMEngine, _Recorder]:
    recorder = _Recorder()
    built = VLLMEngine.__new__(VLLMEngine)
    built._llm = types.SimpleNamespace(llm_engine=recorder)
    built.logprobs = 0
    built._prefixes = {}
    built._request_ids = itertools.count()
    return built, recorder


def _sequence(index: int, rank: int) -> _Sequence:
    constraint = Constraint.from_rx(lit("x"), key="x")
    return _Sequence(index, [1, 2, 3], constraint, constraint.first_segment(), rank=rank)


def test_every_request_carries_its_sequences_rank_as_its_priority(engine):
    built, recorder = engine
    for _ in built._submit([_sequence(0, rank=5), _sequence(1, rank=2)]):
        pass
    assert [priority for _, priority in recorder.added] == [5, 2]


def test_the_engine_is_built_to_serve_requests_by_priority(tmp_path: Path):
    settings = MachineConfig(cores=(0,), kv_cache_gib=1, available_gib=None, cores_from="", kv_from="")
    kwargs = llm_kwargs(EngineConfig(), settings, ModelRef(tmp_path, "model"))
    assert kwargs["scheduling_policy"] == "priority"


class _Engine:
    """A stand-in for vLLM's ``LLMEngine``: each step finishes every request queued before it."""

    def __init__(self) -> None:
        self.queued: list[str] = []
        #: The sequences (by index) in the engine at each step.
        self.steps: list[list[int]] = []
        self.sequence_of: dict[str, int] = {}
        #: Each request as it was added: its sequence's index, its text so far and its priority.
        self.added: list[tuple[int, str, int]] = []

    def step(self) -> list[Any]:
        finished, self.queued = self.queued, []
        self.steps.append(sorted(self.sequence_of[r] for r in finished))
        completion = types.SimpleNamespace(text="x", token_ids=[7], logprobs=None, finish_reason="stop")
        return [types.SimpleNamespace(request_id=r, finished=True, outputs=[completion]) for r in finished]

    def abort_request(self, request_ids: list[str]) -> None:
        self.queued = [r for r in self.queued if r not in request_ids]


def _driver(capacity: int | None) -> tuple[_Driver, _Engine]:
    """A :class:`_Driver` over :class:`_Engine`."""
    fake = _Engine()
    ids = itertools.count()

    def submit(sequences: list[_Sequence]) -> Any:
        for seq in sequences:
            request_id = f"r{next(ids)}"
            fake.queued.append(request_id)
            fake.sequence_of[request_id] = seq.index
            fake.added.append((seq.index, seq.text, seq.rank))
            yield request_id, seq

    def absorb(seq: _Sequence, completion: Any) -> None:
        seq.text += completion.text
        seq.completion_tokens += len(completion.token_ids)
        seq.finish_reason = completion.finish_reason

    return _Driver(fake, submit, absorb, lambda: None, capacity), fake


def _sequences(prompts: list[list[int]], constraint: Constraint) -> list[_Sequence]:
    return [_Sequence(i, prompt, constraint, constraint.first_segment()) for i, prompt in enumerate(prompts)]


def _driven(capacity: int | None, prompts: list[list[int]], constraint: Constraint | None = None) -> _Engine:
    """Every prompt judged through one :class:`_Driver` over :class:`_Engine`."""
    driver, fake = _driver(capacity)
    driver.run(_Job(_sequences(prompts, constraint or Constraint.from_rx(lit("x"), key="x")), None))
    return fake


def _cost_alone(prompt_tokens: int) -> int:
    constraint = Constraint.from_rx(lit("x"), key="x")
    output = constraint.max_completion_tokens
    assert output is not None
    return prompt_tokens + output


def test_sequences_start_only_while_their_tokens_fit_in_the_kv_cache():
    prompts = [[i] * 10 for i in range(1, 6)]  # nothing shared
    fake = _driven(2 * _cost_alone(10), prompts)
    assert max(len(step) for step in fake.steps) == 2


def test_every_sequence_is_judged_when_the_cache_holds_one_at_a_time():
    prompts = [[i] * 10 for i in range(1, 6)]
    fake = _driven(1, prompts)
    assert sorted(i for step in fake.steps for i in step) == [0, 1, 2, 3, 4]


def test_without_a_known_capacity_every_sequence_starts_at_once():
    prompts = [[i] * 10 for i in range(1, 6)]
    fake = _driven(None, prompts)
    assert fake.steps[0] == [0, 1, 2, 3, 4]


def test_a_prefix_shared_with_the_prompt_started_before_is_counted_once():
    shared = list(range(100, 190))
    prompts = [shared + [i] * 10 for i in range(1, 6)]
    # Room for two whole prompts: with the 90 shared tokens counted once, more than two fit.
    fake = _driven(2 * _cost_alone(100), prompts)
    assert max(len(step) for step in fake.steps) > 2


def test_once_a_sequence_has_finished_its_output_is_counted_at_the_longest_seen_not_the_bound():
    long = Constraint.from_rx(repeat(lit("x"), 1, 200), key="x")  # bound: about 200 tokens; every output: one
    bound = long.max_completion_tokens
    assert bound is not None
    prompts = [[i] * 10 for i in range(1, 9)]
    fake = _driven(2 * (10 + bound), prompts, long)
    assert len(fake.steps[0]) == 2
    assert len(fake.steps[1]) > 2


def test_a_short_output_of_another_constraint_does_not_shrink_what_a_long_one_holds():
    short = Constraint.from_rx(lit("x"), key="short")
    long = Constraint.from_rx(repeat(lit("x"), 1, 200), key="long")
    bound = long.max_completion_tokens
    assert bound is not None
    driver, fake = _driver(2 * (10 + bound))
    driver.run(_Job(_sequences([[99] * 10], short), None))
    fake.steps.clear()
    driver.run(_Job(_sequences([[i] * 10 for i in range(1, 9)], long), None))
    assert len(fake.steps[0]) == 2


def _two_segments() -> Constraint:
    """``x`` then ``x``: each of the stand-in's completions ends one segment."""
    tail = Segment("x", max_bytes=1, key="tail")
    return Constraint(
        pattern="xx",
        max_bytes=2,
        key="xx",
        head=Segment("x", max_bytes=1, key="head"),
        continuation=lambda text: tail if text == "x" else None,
    )


def test_first_segments_are_ranked_in_the_order_they_were_queued():
    two = _two_segments()
    fake = _driven(None, [[i] * 10 for i in range(1, 4)], two)
    assert [(index, priority) for index, text, priority in fake.added if not text] == [(0, 0), (1, 1), (2, 2)]


def test_a_continuation_keeps_its_sequences_rank_ahead_of_later_sequences():
    two = _two_segments()
    # Room for one sequence at a time: the second starts after the first's continuation was queued.
    fake = _driven(1, [[i] * 10 for i in range(1, 4)], two)
    continuations = [(index, priority) for index, text, priority in fake.added if text]
    assert continuations == [(0, 0), (1, 1), (2, 2)]
    # The first's continuation went in before the second's first segment, at a lower priority.
    assert [(index, bool(text)) for index, text, _ in fake.added][:3] == [(0, False), (0, True), (1, False)]
