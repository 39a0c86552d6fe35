"""The cascade (``detail="auto"``) on the real engine: one decision-only batch for every record, one full batch for
those it picks, and each record it gives a full verdict asked of the model exactly as a full run asks it.

Not "the same verdict as a full run": in bfloat16 (this machine's default) a verdict depends on the batch it was
decoded in and on what the prefix cache held, and the cascade's full batch follows its own decision batch.  What
the cascade can get wrong is the question, so the question is compared: messages and constraint, request by request."""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.judge import Judge
from tests.conftest import load_records

pytestmark = [pytest.mark.engine, pytest.mark.any_backend]


def test_the_cascades_routes_against_full_verdicts(engine, monkeypatch):
    records = load_records("squad2.jsonl", 4)
    calls: list[int] = []
    asked: list[list] = []
    generate = engine.generate

    def counted(requests, *args, **kwargs):
        calls.append(len(requests))
        asked.append([(r.messages, r.constraint) for r in requests])
        return generate(requests, *args, **kwargs)

    monkeypatch.setattr(engine, "generate", counted)
    full = Judge(engine, config=JudgeConfig(cache=False))
    full_results = full.judge_batch(records)
    assert all(r.error is None for r in full_results), [r.error for r in full_results]
    [full_asked] = asked
    calls.clear()
    asked.clear()

    # The widest margin: every record gets a full verdict after its decision.
    auto = Judge(engine, config=JudgeConfig(detail="auto", auto_margin=0.5, cache=False))
    results = auto.judge_batch(records)
    assert all(r.error is None for r in results), [r.error for r in results]
    assert calls == [4, 4]  # one decision-only batch, one full batch
    assert all(r.cascade is not None and r.cascade.detail == "full" for r in results)
    assert all(r.cascade.probability is not None for r in results)
    decisions, full_pass = asked
    assert full_pass == full_asked
    assert decisions != full_asked  # the decision batch asks for less
    assert all(type(r.verdict) is type(f.verdict) for r, f in zip(results, full_results, strict=True))

    # The narrowest: only decisions that do not deliver get a full verdict; the rest keep their decision.
    calls.clear()
    narrow = Judge(engine, config=JudgeConfig(detail="auto", auto_margin=0.0, cache=False)).judge_batch(records)
    picked = [i for i, r in enumerate(narrow) if r.cascade.detail == "full"]
    assert calls == ([4, len(picked)] if picked else [4])
    for i, r in enumerate(narrow):
        if i in picked:
            assert r.cascade.reason == "not deliver" and not isinstance(r.verdict, DecisionVerdict)
        else:
            assert isinstance(r.verdict, DecisionVerdict) and r.verdict.positive
