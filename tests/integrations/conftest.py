"""What the framework integrations' tests share: a scripted judge (harness logic), a real
uvicorn service over it (the client path), and the real engine in process and through the
session's ``suffice serve`` (generation).

The scripted engine reads the question: one containing ``"unknown"`` is judged insufficient
(missing: ``"the launch date"``); any other is sufficient with the second shown chunk useful
(the first when only one is shown).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from suffice import Client, EngineConfig, Judge, JudgeConfig
from suffice.serving.base import GenerationRequest
from suffice.serving.openai import OpenAIEngine
from tests.fakes import ScriptedEngine
from tests.test_client import serve
from tests.vllm_server import SERVE_KEY

MISSING = "the launch date"


def verdict_for(request: GenerationRequest) -> str:
    """A verdict the sufficiency constraint admits, by the question (see the module docstring)."""
    insufficient = "unknown" in request.messages[-1]["content"]
    verdict = {
        "required_entities": [{"entity": "Apollo", "covered": not insufficient}],
        "contradictions": [],
        "reasoning": "Chunk 1 answers." if not insufficient else "No chunk gives the date.",
        "is_sufficient": not insufficient,
        "missing_information": [MISSING] if insufficient else [],
        "confidence": 0.9,
        "useful_chunk_ids": [] if insufficient else [1],
    }
    text = json.dumps(verdict, separators=(",", ":"))
    if not request.constraint.matches(text):  # one chunk shown: its index is the only one
        text = json.dumps({**verdict, "useful_chunk_ids": [0]}, separators=(",", ":"))
    assert request.constraint.matches(text), text
    return text


@pytest.fixture
def scripted_judge() -> Iterator[Judge]:
    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge:
        yield judge


@pytest.fixture
def scripted_client() -> Iterator[Client]:
    """A :class:`~suffice.Client` of a real uvicorn service over the scripted engine."""
    with serve(ScriptedEngine(verdict_for), judge=JudgeConfig()) as url, Client(url) as client:
        yield client


@pytest.fixture(scope="session")
def engine_judge(vllm_server: str) -> Iterator[Judge]:
    """An in-process judge on the real engine (through the session's vLLM server)."""
    engine = OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server))
    judge = Judge(engine, "sufficiency")
    yield judge
    judge.close()


@pytest.fixture(scope="session")
def engine_client(suffice_server: str) -> Iterator[Client]:
    """A client of the session's real ``suffice serve`` (real engine behind it)."""
    with Client(suffice_server, api_key=SERVE_KEY) as client:
        yield client


@pytest.fixture
def down_client() -> Iterator[Client]:
    """A :class:`~suffice.Client` of a loopback port nothing listens on: every call's connection is refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # bound, then closed: a port this machine just gave out and nobody holds
    with Client(f"http://127.0.0.1:{port}", retries=0) as client:
        yield client
