"""The vLLM engine's start-up marks on the real engine: what ``benchmarks/bench_startup.py`` reads to split a
first verdict into constraint compiles and prompt reading (queued to first token) and decoding (to done)."""

from __future__ import annotations

import logging
import re

import pytest

from suffice.judge import Judge
from suffice.serving import startup
from tests.conftest import load_records

pytestmark = pytest.mark.engine

_SEGMENT = re.compile(r"start-up: segment (queued|first token|done) (\S+) at (\d+\.\d+)")


@pytest.mark.any_backend
def test_every_segment_of_a_verdict_is_marked_queued_then_first_token_then_done(engine, caplog):
    caplog.set_level(logging.DEBUG, logger=startup.LOGGER)
    [result] = Judge(engine).judge_batch(load_records("squad2.jsonl", 1))
    assert result.ok
    times: dict[str, dict[str, float]] = {}
    for record in caplog.records:
        found = _SEGMENT.fullmatch(record.getMessage())
        if found:
            times.setdefault(found.group(2), {})[found.group(1)] = float(found.group(3))
    assert len(times) >= 2  # a sufficiency verdict is decoded in several segments
    assert all(set(marks) >= {"queued", "done"} for marks in times.values())
    assert any("first token" in marks for marks in times.values())
    assert all(marks["queued"] <= marks.get("first token", marks["done"]) <= marks["done"] for marks in times.values())
