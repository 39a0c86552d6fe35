"""The verdict cache on the real engine: the second judging of the same records does no engine work and gives
the rows the engine gave, and a changed record is judged again."""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.rows.shaping import result_row
from tests.conftest import load_records

pytestmark = [pytest.mark.engine, pytest.mark.any_backend]


def test_the_real_engines_verdicts_come_back_from_the_cache_unchanged(engine, tmp_path, monkeypatch):
    records = load_records("squad2.jsonl", 3)
    config = JudgeConfig(cache=tmp_path / "verdicts.sqlite3")
    first = Judge(engine, config=config)
    judged = first.judge_batch(records)
    assert all(r.verdict is not None and r.cached is None for r in judged)

    calls: list[int] = []
    generate = engine.generate

    def counted(requests, *args, **kwargs):
        calls.append(len(requests))
        return generate(requests, *args, **kwargs)

    monkeypatch.setattr(engine, "generate", counted)
    second = Judge(engine, config=config)
    again = second.judge_batch(records)
    assert calls == []  # no engine work at all
    assert all(r.cached is not None for r in again)
    gate = second.gate
    fresh = [result_row(r, gate, "suffice", i) for i, r in enumerate(judged, 1)]
    hits = [
        {k: v for k, v in result_row(r, gate, "suffice", i).items() if k != "cached"} for i, r in enumerate(again, 1)
    ]
    assert hits == fresh

    changed = [{**records[0], "question": str(records[0]["question"]) + " In which year?"}]
    (result,) = second.judge_batch(changed)
    assert calls == [1] and result.cached is None
