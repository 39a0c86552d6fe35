"""``/metrics`` counts what the seeds say to watch: the routes each gate's verdicts take
and how often the code's decision overrides the model's own."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from suffice.config import JudgeConfig
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving.base import Generation
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.monitoring import record, scripted
from tests.server.test_app import record as sufficiency_record

ROUTES = ("deliver", "retrieve_more", "abstain", "human_review")


def client_for(engine: ScriptedEngine, gates: tuple[str, ...]) -> TestClient:
    config = ServeConfig(judge=JudgeConfig(), gates=gates)
    return TestClient(create_app(GateService(config, engine), config), base_url="http://127.0.0.1")


def samples(text: str, name: str) -> dict[str, float]:
    """The samples of metric ``name`` by their label text."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def test_metrics_count_every_route_by_gate():
    client = client_for(ScriptedEngine(scripted), ("adequacy",))
    cases = ["deliver", "deliver", "overridden", "review", "more"]
    response = client.post("/v1/judge/adequacy", json=[record(case, i) for i, case in enumerate(cases)])
    assert response.status_code == 200
    routes = samples(client.get("/metrics").text, "suffice_routed_verdicts_total")
    assert routes == {
        'gate="adequacy",route="deliver"': 2.0,
        'gate="adequacy",route="retrieve_more"': 1.0,
        'gate="adequacy",route="abstain"': 1.0,
        'gate="adequacy",route="human_review"': 1.0,
    }


def test_metrics_count_the_code_overriding_the_model():
    client = client_for(ScriptedEngine(scripted), ("adequacy",))
    client.post("/v1/judge/adequacy", json=[record("deliver"), record("overridden"), record("review")])
    client.post("/v1/judge/adequacy", json=[record("overridden", 1)])
    overrides = samples(client.get("/metrics").text, "suffice_decision_overrides_total")
    assert overrides == {'gate="adequacy"': 2.0}


def test_every_served_gate_has_its_route_and_override_series_from_the_start():
    text = client_for(ScriptedEngine(good), ("sufficiency", "recovery")).get("/metrics").text
    routes = samples(text, "suffice_routed_verdicts_total")
    assert routes == {f'gate="{g}",route="{r}"': 0.0 for g in ("sufficiency", "recovery") for r in ROUTES}
    assert samples(text, "suffice_decision_overrides_total") == {'gate="sufficiency"': 0.0, 'gate="recovery"': 0.0}


def test_an_item_error_takes_no_route():
    client = client_for(ScriptedEngine(good), ("sufficiency",))
    client.post("/v1/judge/sufficiency", json=[sufficiency_record(0), {"id": "bad"}])
    routes = samples(client.get("/metrics").text, "suffice_routed_verdicts_total")
    assert routes['gate="sufficiency",route="deliver"'] == 1.0
    assert sum(routes.values()) == 1.0
    assert samples(client.get("/metrics").text, "suffice_decision_overrides_total") == {'gate="sufficiency"': 0.0}


def counted_client() -> TestClient:
    """Verdicts the model writes in 10 and 30 tokens."""
    lengths = iter([10, 30])
    return client_for(ScriptedEngine(lambda r: Generation(good(r), "stop", 5, next(lengths))), ("sufficiency",))


def test_metrics_give_the_output_tokens_per_verdict_as_a_sum_and_a_count():
    client = counted_client()
    client.post("/v1/judge/sufficiency", json=[sufficiency_record(0), sufficiency_record(1)])
    text = client.get("/metrics").text
    sums = samples(text, "suffice_verdict_output_tokens_sum")
    counts = samples(text, "suffice_verdict_output_tokens_count")
    assert (sums, counts) == ({'gate="sufficiency"': 40.0}, {'gate="sufficiency"': 2.0})


def test_metrics_give_the_most_output_tokens_of_a_verdict():
    client = counted_client()
    client.post("/v1/judge/sufficiency", json=[sufficiency_record(0), sufficiency_record(1)])
    assert samples(client.get("/metrics").text, "suffice_max_verdict_output_tokens") == {'gate="sufficiency"': 30.0}
