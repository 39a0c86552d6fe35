"""The window check on the real engine: its tokenizer decides what fits.

Measured with SmolLM2's tokenizer (2026-12-02): a full sufficiency verdict's worst
case is 2,320 tokens and its instructions about 850, so 2,048 (a common setting on
small machines) cannot hold one chunk; the decision alone can.  The engine's window
is narrowed on the wrapper only: fitting reads it there, and nothing is generated.
"""

from __future__ import annotations

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.judge import Judge

pytestmark = pytest.mark.engine


@pytest.mark.any_backend
@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_a_2048_window_is_refused_for_full_verdicts(engine, monkeypatch, gate):
    monkeypatch.setattr(engine, "max_model_len", 2048)
    rubric = "customer-support" if gate == "adequacy" else None
    with pytest.raises(ConfigError) as caught:
        Judge(engine, config=JudgeConfig(gate=gate, options={"rubric": rubric} if rubric else {}))
    assert caught.value.value == 2048


@pytest.mark.any_backend
@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_a_2048_window_holds_the_decision_alone(engine, monkeypatch, gate):
    monkeypatch.setattr(engine, "max_model_len", 2048)
    rubric = "customer-support" if gate == "adequacy" else None
    judge = Judge(
        engine, config=JudgeConfig(gate=gate, options={"rubric": rubric} if rubric else {}, detail="decision")
    )
    record = {"id": "r", "question": "Who?", "response": "Ada.", "chunks": [{"id": 0, "text": "Ada wrote it."}]}
    [result] = judge.judge_batch([record])
    assert result.error is None
