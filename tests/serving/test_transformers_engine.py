"""The transformers + Outlines engine on the embedded model: real generation, valid verdicts.

Its own small module (the vLLM matrix runs every gate on three backends): this engine
re-encodes the whole prompt for every segment, and in the full matrix it took 17.6 of
the suite's 55 minutes on two cores.  Here: real records on two gates, plus the
hostile-text item, each verdict checked like the vLLM ones (one real record for sufficiency: each costs about 19 s
of CI, and the vLLM matrix judges many).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.recovery.grammar import RecoveryVerdict
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from suffice.serving.engine_config import EngineConfig
from suffice.serving.transformers_engine import TransformersEngine
from tests.conftest import load_records
from tests.grammars.segments import cut_back_constraint
from tests.serving.test_engines import CUT_BACK_MESSAGES, HOSTILE, check_verdict

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def transformers_engine() -> Iterator[TransformersEngine]:
    engine = TransformersEngine(EngineConfig(kind="transformers", max_model_len=4096))
    yield engine
    engine.close()


def test_sufficiency_verdicts_are_valid(transformers_engine: TransformersEngine) -> None:
    records = [
        *load_records("squad2.jsonl", 1),
        {"id": "hostile", "question": 'Is "東京" \\ {x} the capital?', "chunks": [{"id": "a", "text": HOSTILE}]},
    ]
    results = Judge(transformers_engine, "sufficiency").judge_batch(records)
    assert [r.error for r in results] == [None] * len(records)
    for record, result in zip(records, results, strict=True):
        check_verdict(result.verdict, record)  # type: ignore[arg-type]


def test_a_recovery_verdict_cites_only_sources_in_the_request(transformers_engine: TransformersEngine) -> None:
    [record] = load_records("squad2.jsonl", 1)
    record = {**record, "response": "It is not known."}
    [result] = Judge(transformers_engine, RecoveryGate()).judge_batch([record])
    assert isinstance(result.verdict, RecoveryVerdict)
    sources = {str(chunk.get("source") or chunk["id"]) for chunk in record["chunks"]}  # type: ignore[union-attr]
    assert set(result.verdict.cited_sources) <= sources
    # The response's one segment got its label, and the cited answer is the response with markers only.
    assert [s.text for s in result.verdict.segments] == ["It is not known."]
    assert strip_markers(result.verdict.cited_answer) == "It is not known."


def test_a_speculative_segment_is_cut_back_and_continued(transformers_engine: TransformersEngine) -> None:
    (generation,) = transformers_engine.generate([GenerationRequest(CUT_BACK_MESSAGES, cut_back_constraint())])
    assert generation.text == "[2,3]"
