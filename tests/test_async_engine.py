"""``Judge.ajudge`` on the real engine (in process): concurrent awaits share the engine's running
batch, a cancelled await withdraws its requests from the engine, and the engine goes on."""

from __future__ import annotations

import asyncio

import pytest

from suffice import Judge
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from tests.conftest import load_records

pytestmark = [pytest.mark.engine, pytest.mark.any_backend]


CALLS = 8


def running(judge: Judge) -> int:
    """Requests the engine loop holds now (its batch)."""
    return len(judge.engine._driver._running)  # type: ignore[attr-defined]


def test_concurrent_ajudge_calls_and_a_cancelled_one(engine):
    """Eight awaits and a ninth withdrawn while it shares the engine's batch (eight share
    batches as sixteen would, for half the decoding)."""
    records = load_records("squad2.jsonl", CALLS + 1)
    judge = Judge(engine, "sufficiency")
    widest = 0

    async def main() -> list[object]:
        nonlocal widest
        victim = asyncio.ensure_future(judge.ajudge(records[CALLS]))
        calls = [asyncio.ensure_future(judge.ajudge(r)) for r in records[:CALLS]]
        while running(judge) < 2:  # the victim is in the engine, beside others, before it is withdrawn
            await asyncio.sleep(0.02)
        victim.cancel()
        while not any(c.done() for c in calls):
            widest = max(widest, running(judge))
            await asyncio.sleep(0.05)
        results = await asyncio.gather(*calls)
        with pytest.raises(asyncio.CancelledError):
            await victim
        return list(results)

    results = asyncio.run(main())
    assert [r.id for r in results] == [r["id"] for r in records[:CALLS]]  # type: ignore[attr-defined]
    assert all(isinstance(r.verdict, SufficiencyVerdict) for r in results)  # type: ignore[attr-defined]
    assert widest > 1, "the awaits' requests were never in one engine batch"
    assert running(judge) == 0, "the cancelled request is still in the engine"
    assert judge.judge_batch(records[CALLS : CALLS + 1])[0].ok, "the engine judges on after a cancel"
