"""One scenario through every kind of judge on the real engine: the in-process ``Judge`` and a ``Client`` and an
``AsyncClient`` of the session's real ``suffice serve`` (both judge through the session's float32 vLLM server, so
their verdicts are comparable), then an integration and the ``Pipeline`` over each.  The verdicts must be equal.
The scripted-engine version of each comparison: tests/test_judge_protocol.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from suffice import AsyncClient, Client, Judge, JudgeProtocol, JudgeResult
from suffice.harness.pipeline import Pipeline, PipelineConfig
from suffice.integrations.gating import DocumentGate, Evidence
from tests.conftest import load_records
from tests.harness.hotpot import hotpot_retriever, load_pairs, questions
from tests.vllm_server import SERVE_KEY

pytestmark = pytest.mark.engine


@pytest.fixture
def kinds(engine_judge: Judge, engine_client: Client, suffice_server: str) -> Iterator[dict[str, JudgeProtocol]]:
    async_client = AsyncClient(suffice_server, api_key=SERVE_KEY)
    yield {"Judge": engine_judge, "Client": engine_client, "AsyncClient": async_client}
    async_client._blocking().close()  # its asyncio connections closed with the loop of the test's asyncio.run


def verdicts(results: list[JudgeResult]) -> list[dict[str, Any] | None]:
    return [None if r.verdict is None else r.verdict.model_dump(mode="json") for r in results]


async def awaited(judge: JudgeProtocol, records: list[dict[str, object]]) -> list[JudgeResult]:
    return [await judge.ajudge(records[0], gate="sufficiency"), *await judge.ajudge_batch(records[1:])]


DOCS = [
    Evidence("The Eiffel Tower is in Paris. It was completed in 1889.", id="eiffel"),
    Evidence("Bananas are rich in potassium.", id="banana"),
]


def test_every_kind_of_judge_gives_the_same_verdicts_alone_in_an_integration_and_in_the_pipeline(kinds, tmp_path):
    records = load_records("squad2.jsonl", 3)
    pairs = dict(list(load_pairs().items())[:1])
    got: dict[str, dict[str, Any]] = {}
    for name, judge in kinds.items():
        batch = judge.judge_batch(records[:2], gate="sufficiency")
        gate = DocumentGate(judge, on_insufficient="keep")
        kept, outcome = gate.select("When was the Eiffel Tower completed?", DOCS)
        pipeline = Pipeline(judge, hotpot_retriever(pairs, []), PipelineConfig(max_rounds=2), audit=tmp_path / name)
        outcomes = pipeline.run(questions(pairs))
        got[name] = {
            "batch": verdicts(batch),
            "awaited": verdicts(asyncio.run(awaited(judge, records[:2]))),
            "integration": (kept, None if outcome is None else outcome.verdict.model_dump(mode="json")),
            "pipeline": [(o.kind, o.rounds, o.chunk_ids, [t.route for t in o.trace], o.verdict) for o in outcomes],
        }
        assert all(v is not None for v in got[name]["batch"]), [r.error for r in batch]
        assert got[name]["awaited"] == got[name]["batch"], name
    assert got["Client"] == got["Judge"]
    assert got["AsyncClient"] == got["Judge"]
