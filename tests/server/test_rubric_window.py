"""A request that names a rubric whose prompt cannot fit the served window: the
request's error (422 naming ``max_model_len``), not the service's (500)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine

#: customer-support's prompt fits this window (checked at start-up); legal-review's does not.
WINDOW = 4700
ITEM = {"id": "q0", "question": "Who?", "response": "Ada.", "chunks": [{"id": "c0", "text": "Ada wrote it."}]}


def post_legal_review():
    config = ServeConfig(gates=("adequacy",), options={"rubric": "customer-support"})
    service = GateService(config, ScriptedEngine(good, max_model_len=WINDOW))
    return TestClient(create_app(service, config), base_url="http://127.0.0.1").post(
        "/v1/judge/adequacy?rubric=legal-review", json=ITEM
    )


def test_a_rubric_too_long_for_the_window_is_422():
    assert post_legal_review().status_code == 422


def test_a_rubric_too_long_for_the_window_names_max_model_len():
    assert "max_model_len" in str(post_legal_review().json())
