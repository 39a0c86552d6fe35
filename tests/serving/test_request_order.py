"""The order vLLM serves suffice's requests in: a sequence's segments keep the place of its first.

A finished segment's continuation is a new request.  Queued by its own arrival it waits behind every
prompt queued since, and its prompt's KV blocks are evicted from the prefix cache meanwhile
(``benchmarks/README.md``, "Where the time goes").  These tests drive the engine's submission with a
recording stand-in for vLLM's engine (the real engine's effect is in the benchmark).
"""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from suffice.grammars.constraint import Constraint
from suffice.grammars.regex import lit
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import MachineSettings
from suffice.serving.models import ModelRef
from suffice.serving.vllm_engine import VLLMEngine, _Sequence, llm_kwargs


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
    built._ranks = itertools.count()
    return built, recorder


def _sequence(index: int) -> _Sequence:
    constraint = Constraint.from_rx(lit("x"), key="x")
    return _Sequence(index, [1, 2, 3], constraint, constraint.first_segment())


def _submit(engine: VLLMEngine, sequences: list[_Sequence]) -> None:
    for _ in engine._submit(sequences):
        pass


def test_first_segments_are_served_in_the_order_they_were_queued(engine):
    built, recorder = engine
    _submit(built, [_sequence(0), _sequence(1), _sequence(2)])
    assert [priority for _, priority in recorder.added] == [0, 1, 2]


def test_a_continuation_keeps_its_sequences_place_ahead_of_later_sequences(engine):
    built, recorder = engine
    first, later = _sequence(0), _sequence(1)
    _submit(built, [first, later])
    _submit(built, [_sequence(2)])  # another caller's batch, queued after
    first.text = "x"  # its first segment ended: the continuation is queued now
    _submit(built, [first])
    assert recorder.added[-1][1] < min(priority for _, priority in recorder.added[1:3])


def test_the_engine_is_built_to_serve_requests_by_priority(tmp_path: Path):
    settings = MachineSettings(cores=(0,), kv_cache_gib=1, available_gib=None, cores_from="", kv_from="")
    kwargs = llm_kwargs(EngineConfig(), settings, ModelRef(tmp_path, "model"))
    assert kwargs["scheduling_policy"] == "priority"
