from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SAMPLE = Path(__file__).resolve().parents[1] / "suffice" / "data" / "sample.jsonl"


def load_records(name: str, limit: int) -> list[dict[str, object]]:
    """Records from ../shared/data when present, else from the bundled sample."""
    path = DATA / name
    if not path.exists():
        path = SAMPLE
    out = []
    with path.open() as handle:
        for line in handle:
            out.append(json.loads(line))
            if len(out) >= limit:
                break
    return out


@pytest.fixture
def squad_records() -> list[dict[str, object]]:
    return load_records("squad2.jsonl", 6)


@pytest.fixture(scope="session", params=["outlines", "xgrammar", "guidance", "transformers"])
def engine(request):
    """One real engine per structured-output backend (and the transformers engine),
    shared by every gate's tests.

    Session-scoped and parametrized: pytest groups the tests by backend and closes
    each engine before the next starts.
    """
    from suffice.serving.engine_config import EngineConfig

    if request.param == "transformers":
        from suffice.serving.transformers_engine import TransformersEngine

        # The transformers engine re-encodes the whole prompt for every segment (no KV
        # cache across calls): a 6,144-token window keeps its prompts short enough for CI
        # on two cores and still leaves the adequacy gate (3,085 output tokens at worst
        # and a rubric in its instructions) room for evidence.
        built = TransformersEngine(EngineConfig(kind="transformers", max_model_len=6144))
    else:
        from suffice.serving.vllm_engine import VLLMEngine

        built = VLLMEngine(EngineConfig(backend=request.param))
    yield built
    built.close()
