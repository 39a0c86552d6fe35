"""One scenario through every kind of judge on the real engine: the in-process ``Judge`` and a ``Client`` and an
``AsyncClient`` of the session's real ``suffice serve`` (both judge through the session's float32 vLLM server, so
their verdicts are comparable), blocking and awaited, then an integration's gate over each.  The verdicts must be
equal.  Kept to one record and two short documents (a 10-chunk Pipeline round per kind took the test past its
900 s on two shared cores); the Pipeline over each kind, and the batch runner, are compared on the scripted engine
in tests/test_judge_protocol.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from suffice import AsyncClient, Client, Judge, JudgeProtocol, JudgeResult
from suffice.integrations.gating import DocumentGate, Evidence
from tests.conftest import load_records
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
    return [await judge.ajudge(records[0], gate="sufficiency")]


DOCS = [
    Evidence("The Eiffel Tower is in Paris. It was completed in 1889.", id="eiffel"),
    Evidence("Bananas are rich in potassium.", id="banana"),
]


def test_every_kind_of_judge_gives_the_same_verdicts_alone_and_in_an_integration(kinds):
    records = load_records("squad2.jsonl", 1)
    got: dict[str, dict[str, Any]] = {}
    for name, judge in kinds.items():
        batch = judge.judge_batch(records, gate="sufficiency")
        kept, outcome = DocumentGate(judge, on_insufficient="keep").select("When was the Eiffel Tower completed?", DOCS)
        got[name] = {
            "batch": verdicts(batch),
            "awaited": verdicts(asyncio.run(awaited(judge, records))),
            "integration": (kept, None if outcome is None else outcome.verdict.model_dump(mode="json")),
        }
        assert all(v is not None for v in got[name]["batch"]), [r.error for r in batch]
        assert got[name]["awaited"] == got[name]["batch"], name
    assert got["Client"] == got["Judge"]
    assert got["AsyncClient"] == got["Judge"]
