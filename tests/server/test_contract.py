"""The service's contract: ``/openapi.json`` types each served gate's answer with that gate's verdict
model (a gate from another package included), the rows answered hold to it, and ``/metrics``
names its series by Prometheus's conventions and answers a scraper without the token only when told.

On a scripted engine: the subject is the description and the HTTP layer, not generation."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient

from suffice.config import JudgeConfig
from suffice.gates import gate_class, gate_names
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.contract import response_model
from suffice.server.service import GateService
from suffice.settings import per_request
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.server.test_app import record
from tests.test_client import serve

KEY = b"k" * 32


def client_for(engine: ScriptedEngine | None = None, key: bytes | None = None, **settings: Any) -> TestClient:
    config = ServeConfig(**settings)
    return TestClient(create_app(GateService(config, engine or ScriptedEngine(good)), config, key), "http://127.0.0.1")


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or the component its ``$ref`` names."""
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rpartition("/")[2]]
    return schema


def result_rows(spec: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """The row schemas of a results array's items: one per verdict format the gate has (a gate with one
    format, like the example citation gate, has a single kind, not a union of one)."""
    kinds = results.get("anyOf", [results])
    return [resolve(spec, row) for kind in kinds for row in resolve(spec, kind)["anyOf"]]


def served_verdicts(spec: dict[str, Any], gate: str) -> list[dict[str, Any]]:
    """The verdict schemas the rows of ``gate``'s 200 answer may hold, in the suffice format."""
    answer = spec["paths"][f"/v1/judge/{gate}"]["post"]["responses"]["200"]["content"]["application/json"]
    results = resolve(spec, answer["schema"])["properties"]["results"]["items"]
    rows = result_rows(spec, results)
    verdicts = [row["properties"]["verdict"] for row in rows]
    return [resolve(spec, verdict) for verdict in verdicts if "$ref" in verdict]


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    """Every registered gate served (the example citation gate among them, installed for the tests)."""
    return client_for().get("/openapi.json").json()


def _bodies(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(operation id, what, schema) of every JSON request and response body in ``document``."""
    for operations in document["paths"].values():
        for operation in operations.values():
            name = operation["operationId"]
            for kind, content in operation.get("requestBody", {}).get("content", {}).items():
                yield name, f"request {kind}", content["schema"]
            for status, answer in operation["responses"].items():
                for kind, content in answer.get("content", {}).items():
                    yield name, f"{status} {kind}", content["schema"]


def test_every_json_body_is_a_named_schema() -> None:
    """No inline body a generator would have to name itself; refusals and probes included (reviews too)."""
    document = client_for(key=KEY, audit_db=None).get("/openapi.json").json()
    unnamed = [
        (name, what)
        for name, what, schema in _bodies(document)
        if not (what.endswith("text/plain") and schema == {"type": "string"}) and set(schema) != {"$ref"}
    ]
    assert unnamed == []
    refusals = {what.split()[0] for name, what, _ in _bodies(document) if name == "judge_sufficiency"}
    assert {"200", "401", "422", "429", "503"} <= refusals


def test_the_review_routes_have_stable_operation_ids_and_the_bearer_scheme(tmp_path) -> None:
    document = client_for(audit_db=tmp_path / "audit.db").get("/openapi.json").json()
    reviews = {
        op["operationId"]: op for path, ops in document["paths"].items() if "reviews" in path for op in ops.values()
    }
    reviewers = {"list_reviews", "get_review", "decide_review"}
    assert set(reviews) == reviewers | {"get_review_outcome", "review_events"}
    assert all(reviews[name]["security"] == [{"bearerAuth": []}] for name in reviewers)
    # The application's outcome routes ask the service's key, and this service has none.
    assert all("security" not in reviews[name] for name in ("get_review_outcome", "review_events"))


def test_the_probes_and_metrics_are_typed(spec: dict[str, Any]) -> None:
    paths = spec["paths"]
    ready = paths["/ready"]["get"]["responses"]
    assert ready["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Ready"}
    assert ready["503"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/NotReady"}
    health = paths["/health"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert health == {"$ref": "#/components/schemas/Health"}
    assert paths["/metrics"]["get"]["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}


@pytest.mark.parametrize("gate", gate_names())
def test_each_gates_answer_is_typed_by_its_verdict_model(spec: dict[str, Any], gate: str) -> None:
    [verdict] = served_verdicts(spec, gate)
    assert set(verdict["properties"]) == set(gate_class(gate).verdict_model.model_fields)


@pytest.mark.parametrize("gate", gate_names())
def test_each_gates_answer_names_the_gate(spec: dict[str, Any], gate: str) -> None:
    answer = spec["paths"][f"/v1/judge/{gate}"]["post"]["responses"]["200"]["content"]["application/json"]
    assert resolve(spec, answer["schema"])["properties"]["gate"]["const"] == gate


@pytest.mark.parametrize("gate", gate_names())
def test_each_gates_error_row_is_typed(spec: dict[str, Any], gate: str) -> None:
    answer = spec["paths"][f"/v1/judge/{gate}"]["post"]["responses"]["200"]["content"]["application/json"]
    results = resolve(spec, answer["schema"])["properties"]["results"]["items"]
    rows = result_rows(spec, results)
    errors = [resolve(spec, row["properties"]["error"]) for row in rows if "$ref" in row["properties"]["error"]]
    assert {"type", "message", "field"} <= set(errors[0]["properties"])


@pytest.mark.parametrize("gate", gate_names())
def test_each_gates_request_lists_only_its_own_options(spec: dict[str, Any], gate: str) -> None:
    body = spec["paths"][f"/v1/judge/{gate}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    name = body["$ref"].rsplit("/", 1)[1].removesuffix("Request")
    options = spec["components"]["schemas"][f"{name}Items"]["properties"]["options"]["$ref"].rsplit("/", 1)[1]
    judge = {d.name for d in per_request(JudgeConfig)}
    assert (
        set(spec["components"]["schemas"][options]["properties"])
        == {d.name for d in per_request(gate_class(gate).options_model)} | judge
    )


def test_a_decision_only_server_types_its_verdicts_as_decisions() -> None:
    spec = client_for(judge=JudgeConfig(detail="decision"), gates=("sufficiency",)).get("/openapi.json").json()
    [verdict] = served_verdicts(spec, "sufficiency")
    assert set(verdict["properties"]) == set(DecisionVerdict.model_fields)


def answer_schema(spec: dict[str, Any], gate: str) -> dict[str, Any]:
    """The 200 answer's schema as a document of its own (its references resolve in ``components``)."""
    answer = spec["paths"][f"/v1/judge/{gate}"]["post"]["responses"]["200"]["content"]["application/json"]
    return {**answer["schema"], "components": spec["components"]}


@pytest.mark.parametrize("fmt", ["suffice", "seed", "ragflow"])
def test_an_answer_of_verdicts_and_errors_is_valid_by_the_openapi_schema(fmt: str) -> None:
    client = client_for(gates=("sufficiency",))
    body = client.post(f"/v1/judge/sufficiency?format={fmt}", json=[record(0), {"id": "bad"}]).json()
    jsonschema.Draft202012Validator(answer_schema(client.get("/openapi.json").json(), "sufficiency")).validate(body)


@pytest.mark.parametrize("fmt", ["suffice", "seed"])
def test_an_answer_is_valid_by_the_response_model(fmt: str) -> None:
    body = client_for(gates=("sufficiency",)).post(f"/v1/judge/sufficiency?format={fmt}", json=[record(0)]).json()
    assert (
        response_model("sufficiency", "full").model_validate(body).model_dump(mode="json", exclude_unset=True) == body
    )


def test_a_decision_only_answer_is_valid_by_its_openapi_schema() -> None:
    engine = ScriptedEngine(lambda request: '{"is_sufficient":true}')
    client = client_for(engine, judge=JudgeConfig(detail="decision"), gates=("sufficiency",))
    body = client.post("/v1/judge/sufficiency", json=[record(0), {"id": "bad"}]).json()
    jsonschema.Draft202012Validator(answer_schema(client.get("/openapi.json").json(), "sufficiency")).validate(body)


@pytest.mark.parametrize(("where", "key"), [((), "request_id"), (("results", 0), "model"), (("results", 0), "index")])
def test_an_answer_missing_a_field_is_invalid_by_the_openapi_schema(where: tuple[Any, ...], key: str) -> None:
    client = client_for(gates=("sufficiency",))
    body = client.post("/v1/judge/sufficiency", json=[record(0)]).json()
    broken = copy.deepcopy(body)
    holder = broken
    for step in where:
        holder = holder[step]
    del holder[key]
    validator = jsonschema.Draft202012Validator(answer_schema(client.get("/openapi.json").json(), "sufficiency"))
    assert not validator.is_valid(broken)


def metric_types(text: str) -> dict[str, str]:
    """Each series family's name and type, from the ``# TYPE`` lines (the ``_created`` gauges
    prometheus_client adds beside each counter and histogram left out)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            if not name.endswith("_created"):
                found[name] = kind
    return found


def test_metrics_are_named_by_prometheus_conventions() -> None:
    assert metric_types(client_for(gates=("sufficiency",)).get("/metrics").text) == {
        "suffice_requests_total": "counter",
        "suffice_verdicts_total": "counter",
        "suffice_item_errors_total": "counter",
        "suffice_request_duration_seconds": "histogram",
        "suffice_prompt_tokens_total": "counter",
        "suffice_completion_tokens_total": "counter",
        "suffice_verdict_output_tokens": "histogram",
        "suffice_max_verdict_output_tokens": "gauge",
        "suffice_waiting_requests": "gauge",
        "suffice_pending_items": "gauge",
        "suffice_refused_items_total": "counter",
        "suffice_routed_verdicts_total": "counter",
        "suffice_decision_overrides_total": "counter",
        "suffice_engine_alive": "gauge",
        "suffice_build_info": "gauge",
    }


def test_a_judged_request_is_observed_in_the_duration_histogram() -> None:
    client = client_for(gates=("sufficiency",))
    client.post("/v1/judge/sufficiency", json=record(0))
    text = client.get("/metrics").text
    assert 'suffice_request_duration_seconds_count{gate="sufficiency"} 1.0' in text


def test_build_info_names_the_version_model_backend_and_gates() -> None:
    text = client_for(gates=("sufficiency", "recovery")).get("/metrics").text
    [line] = [line for line in text.splitlines() if line.startswith("suffice_build_info{")]
    labels = 'backend="scripted",gates="sufficiency,recovery",model="scripted",version="'
    assert line.startswith(f"suffice_build_info{{{labels}")
    assert line.endswith("} 1.0")


def test_metrics_need_the_token_by_default() -> None:
    with serve(ScriptedEngine(good), key=KEY.decode()) as url:
        assert httpx.get(f"{url}/metrics").status_code == 401


def test_metrics_without_auth_answers_a_scraper_without_the_token() -> None:
    with serve(ScriptedEngine(good), key=KEY.decode(), metrics_without_auth=True) as url:
        response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    assert "suffice_engine_alive 1.0" in response.text


def test_metrics_without_auth_leaves_judging_behind_the_token() -> None:
    with serve(ScriptedEngine(good), key=KEY.decode(), metrics_without_auth=True) as url:
        assert httpx.post(f"{url}/v1/judge/sufficiency", json=record(0)).status_code == 401


def test_metrics_without_auth_still_checks_the_host_header() -> None:
    client = client_for(key=KEY, gates=("sufficiency",), metrics_without_auth=True)
    assert client.get("/metrics", headers={"host": "attacker.example"}).status_code == 400


def test_a_gate_not_served_is_still_404() -> None:
    assert client_for(gates=("sufficiency",)).post("/v1/judge/recovery", json=record(0)).status_code == 404


def test_a_gate_not_served_is_not_described() -> None:
    assert "/v1/judge/recovery" not in client_for(gates=("sufficiency",)).get("/openapi.json").json()["paths"]
