"""The HTTP layer on a scripted engine: status codes, guards, order, metrics, faults.

Generation through the service is proven on the real engine in test_serve_process.py;
here the engine is scripted so that each HTTP behaviour is checked fast and exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from suffice.audit import AuditLog
from suffice.config import JudgeConfig
from suffice.exceptions import CancelledError, ConfigError, EngineDeadError
from suffice.server.app import create_app
from suffice.server.config import ServeConfig, read_api_key
from suffice.server.guards import BodyLimit
from suffice.server.service import GateService
from suffice.serving.base import GenerationRequest
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine, recovery_reply

KEY = b"k" * 32


def record(i: int) -> dict[str, object]:
    return {"id": f"q{i}", "question": f"Who wrote {i}?", "chunks": [{"id": "c0", "text": "Ada wrote it."}]}


def client_for(
    engine: ScriptedEngine | None = None, key: bytes | None = None, on_fatal=None, **settings: object
) -> TestClient:
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency", "recovery"), **settings)  # type: ignore[arg-type]
    service = GateService(config, engine or ScriptedEngine(good))
    return TestClient(create_app(service, config, key, on_fatal), base_url="http://127.0.0.1")


def test_a_list_of_items_gets_one_result_each_in_order():
    response = client_for().post("/v1/judge/sufficiency", json=[record(0), record(1), record(2)])
    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == ["q0", "q1", "q2"]


def test_results_carry_their_position_in_the_request():
    response = client_for().post("/v1/judge/sufficiency", json=[record(0), record(1)])
    assert [row["index"] for row in response.json()["results"]] == [0, 1]


def test_one_item_object_gets_a_list_of_one_result():
    response = client_for().post("/v1/judge/sufficiency", json=record(7))
    assert [row["id"] for row in response.json()["results"]] == ["q7"]


def test_a_verdict_row_is_the_row_the_cli_writes():
    row = client_for().post("/v1/judge/sufficiency", json=record(0)).json()["results"][0]
    assert row["verdict"]["useful_chunk_ids"] == ["c0"]


def test_a_bad_item_is_an_error_row_and_the_others_still_get_verdicts():
    response = client_for().post("/v1/judge/sufficiency", json=[record(0), {"id": "bad", "chunks": []}, record(2)])
    rows = response.json()["results"]
    assert response.status_code == 200
    assert rows[1]["error"]["field"] == "question"
    assert rows[2]["verdict"] is not None


def test_the_response_names_its_request_id_in_body_and_header():
    response = client_for().post("/v1/judge/sufficiency", json=record(0))
    assert response.headers["x-request-id"] == response.json()["request_id"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the body is not valid JSON"),
        (b'"a string"', "not str"),
        (b"[]", "empty"),
        (b"7", "not int"),
    ],
)
def test_a_body_of_the_wrong_shape_is_422_naming_the_body(body, message):
    response = client_for().post("/v1/judge/sufficiency", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body"]
    assert message in detail["msg"]


def test_too_many_items_is_422():
    response = client_for(max_items=2).post("/v1/judge/sufficiency", json=[record(i) for i in range(3)])
    assert response.status_code == 422
    assert "at most 2" in response.json()["detail"][0]["msg"]


def test_a_gate_not_served_is_404():
    assert client_for().post("/v1/judge/adequacy", json=record(0)).status_code == 404


def test_a_rubric_for_a_gate_without_one_is_422_naming_the_parameter():
    response = client_for().post("/v1/judge/sufficiency?rubric=customer-support", json=record(0))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "rubric"]


def test_an_unknown_threshold_preset_is_422_naming_the_parameter():
    response = client_for().post("/v1/judge/recovery?threshold=lenient", json=record(0))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "threshold"]


def test_a_body_over_the_limit_is_413_by_its_declared_length():
    response = client_for(max_body_bytes=2048).post("/v1/judge/sufficiency", content=b"[" + b" " * 4096 + b"]")
    assert response.status_code == 413


def test_a_chunked_body_over_the_limit_is_413_as_it_streams():
    def chunks():
        for _ in range(8):
            yield b" " * 1024

    response = client_for(max_body_bytes=2048).post("/v1/judge/sufficiency", content=chunks())
    assert response.status_code == 413


def body_limit_passes(parts: list[bytes], limit: int = 1 << 20) -> list[dict[str, object]]:
    """The messages the app behind :class:`BodyLimit` receives for a body sent in ``parts``."""
    incoming = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    seen: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return incoming.pop(0)

    async def app(scope, receive_body, send) -> None:
        while True:
            message = await receive_body()
            seen.append(message)
            if not message.get("more_body"):
                return

    async def send(message) -> None:
        raise AssertionError(f"the guard answered: {message}")

    asyncio.run(BodyLimit(app, limit, 5.0)({"type": "http", "headers": []}, receive, send))
    return seen


def test_a_body_in_many_small_parts_reaches_the_app_as_one_message():
    seen = body_limit_passes([b"x"] * 10_000)
    assert len(seen) == 1


def test_a_body_in_many_small_parts_reaches_the_app_whole():
    seen = body_limit_passes([b"a", b"b", b"c"])
    assert seen[0]["body"] == b"abc"


def test_no_bearer_token_is_401_when_a_key_is_set():
    response = client_for(key=KEY).post("/v1/judge/sufficiency", json=record(0))
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_wrong_bearer_token_is_401():
    headers = {"authorization": "Bearer " + "x" * 32}
    assert client_for(key=KEY).post("/v1/judge/sufficiency", json=record(0), headers=headers).status_code == 401


def test_the_right_bearer_token_is_let_through():
    headers = {"authorization": "Bearer " + KEY.decode()}
    assert client_for(key=KEY).post("/v1/judge/sufficiency", json=record(0), headers=headers).status_code == 200


def test_probes_need_no_token():
    assert client_for(key=KEY).get("/health").status_code == 200


def test_metrics_need_the_token():
    assert client_for(key=KEY).get("/metrics").status_code == 401


def test_metrics_count_verdicts_and_item_errors():
    client = client_for()
    client.post("/v1/judge/sufficiency", json=[record(0), {"id": "bad"}, record(2)])
    text = client.get("/metrics").text
    assert 'suffice_verdicts_total{gate="sufficiency"} 2.0' in text
    assert 'suffice_item_errors_total{gate="sufficiency",type="InputError"} 1.0' in text


def test_ready_reports_the_model_and_gates():
    body = client_for().get("/ready").json()
    assert body["gates"] == ["sufficiency", "recovery"]


class Waiting(ScriptedEngine):
    """Generates nothing until its caller cancels; records the cancel events it got."""

    def __init__(self) -> None:
        super().__init__(good)
        self.cancels: list[threading.Event] = []

    def generate(self, requests, progress=None, cancel=None):
        assert cancel is not None
        self.cancels.append(cancel)
        cancel.wait(30)
        raise CancelledError("the caller withdrew the request")


def test_a_request_over_its_timeout_has_its_generation_cancelled():
    engine = Waiting()
    response = client_for(engine, request_timeout=0.5).post("/v1/judge/sufficiency", json=record(0))
    assert response.status_code == 504
    assert engine.cancels[0].is_set()


@contextlib.contextmanager
def live_server(engine: ScriptedEngine, drain_s: int | None = None, **settings: object) -> Iterator[int]:
    """The app on a real uvicorn server on a loopback port (yielded), in a thread;
    ``drain_s``: uvicorn's graceful-shutdown limit."""
    from tests.server.live import live

    with live(engine, uvicorn_options={"timeout_graceful_shutdown": drain_s}, **settings) as (_, port):
        yield port


def test_a_client_that_hangs_up_has_its_generation_cancelled():
    """A real server on loopback and a client whose read times out and closes the connection."""
    import httpx

    engine = Waiting()
    with live_server(engine) as port:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"http://127.0.0.1:{port}/v1/judge/sufficiency", json=record(0), timeout=1.0)
        deadline = time.monotonic() + 10
        while not (engine.cancels and engine.cancels[0].is_set()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.cancels[0].is_set()


def test_a_request_still_running_when_the_drain_ends_has_its_generation_stopped():
    """uvicorn cancels the requests left when its graceful shutdown runs out; the
    generation behind one must stop with it, or the engine judges on for nobody."""
    import httpx

    engine = Waiting()
    with live_server(engine, drain_s=1, request_timeout=60) as port:

        def ask() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(f"http://127.0.0.1:{port}/v1/judge/sufficiency", json=record(0), timeout=20)

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        deadline = time.monotonic() + 10
        while not engine.cancels and time.monotonic() < deadline:
            time.sleep(0.05)
    # Leaving live_server asked uvicorn to stop: after its 1 s drain it cancels the request.
    assert engine.cancels[0].is_set()


def test_a_request_over_its_timeout_is_504_and_the_next_one_still_works():
    release = threading.Event()

    def slow(request: GenerationRequest) -> str:
        if "slow" in request.messages[-1]["content"]:
            release.wait(10)
        return good(request)

    # Long enough for the next request, scripted, to finish within it on two loaded cores.
    client = client_for(ScriptedEngine(slow), request_timeout=3.0)
    slow_item = {**record(0), "question": "slow?"}
    assert client.post("/v1/judge/sufficiency", json=slow_item).status_code == 504
    release.set()
    assert client.post("/v1/judge/sufficiency", json=record(1)).status_code == 200


class DyingEngine(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__(good)

    def generate(self, requests, progress=None, cancel=None):
        raise EngineDeadError("the engine process 1 exited")

    def check_alive(self) -> None:
        raise EngineDeadError("the engine process 1 exited")


def test_a_dead_engine_is_503_and_the_runner_is_told_once():
    told: list[str] = []
    client = client_for(DyingEngine(), on_fatal=told.append)
    first = client.post("/v1/judge/sufficiency", json=record(0))
    second = client.post("/v1/judge/sufficiency", json=record(1))
    assert first.status_code == 503
    assert second.status_code == 503
    assert len(told) == 1


def test_health_fails_once_the_engine_is_dead():
    client = client_for(DyingEngine())
    client.post("/v1/judge/sufficiency", json=record(0))
    assert client.get("/health").status_code == 503


def test_concurrent_requests_are_judged_together_not_one_after_another():
    batches: list[int] = []
    arrived = threading.Barrier(4, timeout=10)

    class Counting(ScriptedEngine):
        def generate(self, requests, progress=None, cancel=None):
            batches.append(len(requests))
            arrived.wait()  # every request must be inside the engine at once to pass
            return super().generate(requests, progress, cancel)

    client = client_for(Counting(good))
    results: list[int] = []
    threads = [
        threading.Thread(
            target=lambda i=i: results.append(client.post("/v1/judge/sufficiency", json=record(i)).status_code)
        )
        for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert results == [200, 200, 200, 200]


def test_every_verdict_served_is_in_the_audit_log_under_its_request_id(tmp_path: Path):
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",), audit_db=tmp_path / "audit.db")
    service = GateService(config, ScriptedEngine(good))
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    body = client.post("/v1/judge/sufficiency", json=[record(0), record(1)]).json()
    service.close()
    log = AuditLog(tmp_path / "audit.db")
    rows = list(log.rows())
    log.close()
    assert [row["item_id"] for row in rows] == ["q0", "q1"]
    assert {row["run_id"] for row in rows} == {body["request_id"]}


def test_a_short_api_key_file_is_refused_naming_the_option(tmp_path: Path):
    path = tmp_path / "key"
    path.write_text("short\n")
    with pytest.raises(Exception, match="api_key_file"):
        read_api_key(path)


def test_an_api_key_file_is_read_without_its_newline(tmp_path: Path):
    path = tmp_path / "key"
    path.write_text("a" * 40 + "\n")
    path.chmod(0o600)
    assert read_api_key(path) == b"a" * 40


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_an_api_key_file_others_may_read_is_refused_as_an_audit_key_is(tmp_path: Path, mode: int):
    """Whoever reads the service's key can call it as its clients (issue 38)."""
    path = tmp_path / "key"
    path.write_text("a" * 40 + "\n")
    path.chmod(mode)
    with pytest.raises(ConfigError, match="chmod 600") as caught:
        read_api_key(path)
    assert caught.value.parameter == "api_key_file"


def test_a_timed_out_request_does_not_block_the_event_loop():
    """While a slow request runs, the probes still answer at once."""
    release = threading.Event()

    def slow(request: GenerationRequest) -> str:
        release.wait(10)
        return good(request)

    client = client_for(ScriptedEngine(slow))
    worker = threading.Thread(target=lambda: client.post("/v1/judge/sufficiency", json=record(0)))
    worker.start()
    time.sleep(0.2)
    began = time.perf_counter()
    status = client.get("/health").status_code
    waited = time.perf_counter() - began
    release.set()
    worker.join(10)
    assert status == 200
    assert waited < 5


def test_a_calibrated_gate_config_applies_to_its_gate_and_not_to_the_others(tmp_path: Path):
    from suffice.gates.sufficiency.calibration import GateConfig

    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.7).save(path)
    config = ServeConfig(gates=("sufficiency", "recovery"), options={"gate_config": path})
    service = GateService(config, ScriptedEngine(good))
    from suffice.server.service import Options

    assert service.judge_for("sufficiency", Options()).config.options["gate_config"] == path
    assert "gate_config" not in service.judge_for("recovery", Options()).config.options


def test_the_openapi_description_lists_a_route_per_served_gate():
    spec = client_for(key=KEY).get("/openapi.json").json()
    assert [path for path in spec["paths"] if path.startswith("/v1/judge/")] == [
        "/v1/judge/sufficiency",
        "/v1/judge/recovery",
    ]


#: The judge settings every route takes per request (declared ``per_request`` in ``JudgeConfig``).
_JUDGE = {"auto_margin", "max_question_tokens", "max_response_tokens", "min_chunk_tokens", "max_chunks"}


@pytest.mark.parametrize(
    ("gate", "expected"),
    [
        ("recovery", {"threshold", "retrieval_exhausted", "unsupported_marker", "format", *_JUDGE}),
        ("sufficiency", {"format", "max_retrieval_queries", *_JUDGE}),
    ],
)
def test_the_openapi_description_lists_the_options_each_gate_takes_per_request(gate, expected):
    """Recovery's threshold on recovery's route, not on the others."""
    spec = client_for(key=KEY).get("/openapi.json").json()
    assert {p["name"] for p in spec["paths"][f"/v1/judge/{gate}"]["post"]["parameters"]} == expected


def test_the_openapi_description_requires_the_bearer_token_where_the_service_does():
    spec = client_for(key=KEY).get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "the service's API key",
    }
    security = {path: op.get("security") for path, item in spec["paths"].items() for op in item.values()}
    bearer = [{"bearerAuth": []}]
    assert security["/v1/judge/sufficiency"] == security["/v1/settings/{gate}"] == security["/metrics"] == bearer
    assert security["/health"] is None and security["/ready"] is None
    assert (
        client_for(key=KEY, metrics_without_auth=True)
        .get("/openapi.json")
        .json()["paths"]["/metrics"]["get"]
        .get("security")
        is None
    )
    # Without a key nothing is asked for, and the document says so.
    assert "securitySchemes" not in client_for().get("/openapi.json").json().get("components", {})


def test_the_openapi_operation_ids_are_stable_names():
    spec = client_for(key=KEY).get("/openapi.json").json()
    ids = {path: op["operationId"] for path, item in spec["paths"].items() for op in item.values()}
    assert {ids[p] for p in ("/v1/judge/sufficiency", "/v1/judge/recovery", "/v1/settings/{gate}")} == {
        "judge_sufficiency",
        "judge_recovery",
        "get_gate_settings",
    }
    assert (ids["/health"], ids["/ready"], ids["/metrics"]) == ("health", "ready", "get_metrics")


def test_the_openapi_description_documents_the_body_as_an_item_or_a_list():
    spec = client_for().get("/openapi.json").json()
    body = spec["paths"]["/v1/judge/sufficiency"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/SufficiencyRequest"}
    shapes = spec["components"]["schemas"]["SufficiencyRequest"]["anyOf"]
    assert shapes[:2] == [{"$ref": "#/components/schemas/Item"}, {"$ref": "#/components/schemas/ItemList"}]
    assert shapes[2] == {"$ref": "#/components/schemas/SufficiencyItems"}


def test_a_gate_config_for_a_gate_not_served_is_refused_naming_it(tmp_path: Path):
    from suffice.exceptions import ConfigError
    from suffice.gates.sufficiency.calibration import GateConfig
    from suffice.server.service import check_served

    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=0.7).save(path)
    with pytest.raises(ConfigError) as caught:
        check_served(ServeConfig(gates=("recovery",), options={"gate_config": path}))
    assert caught.value.parameter == "gate_config"


def test_a_rubric_without_the_adequacy_gate_served_is_refused_naming_it():
    from suffice.exceptions import ConfigError
    from suffice.server.service import check_served

    with pytest.raises(ConfigError) as caught:
        check_served(ServeConfig(gates=("sufficiency",), options={"rubric": "customer-support"}))
    assert caught.value.parameter == "rubric"


def test_an_engine_that_dies_while_idle_is_noticed_without_a_request(monkeypatch):
    import suffice.server.readiness as readiness_module

    monkeypatch.setattr(readiness_module, "HEALTH_INTERVAL", 0.05)
    told: list[str] = []
    with client_for(DyingEngine(), on_fatal=told.append) as client:
        deadline = time.monotonic() + 10
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
        status = client.get("/health").status_code
    assert told == ["the engine process 1 exited"]
    assert status == 503


def test_a_body_that_stalls_mid_upload_is_408():
    """A real server on loopback; the client sends half its declared body and stops."""
    import socket

    head = b"POST /v1/judge/sufficiency HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    with (
        live_server(ScriptedEngine(good), request_timeout=1.0) as port,
        socket.create_connection(("127.0.0.1", port), timeout=10) as client,
    ):
        client.sendall(head + b"Content-Length: 200\r\n\r\n[ ")
        answer = client.recv(4096)
    assert answer.split(b"\r\n", 1)[0] == b"HTTP/1.1 408 Request Timeout"


def _requests_counted(client: TestClient, gate: str, status: int) -> float:
    for line in client.get("/metrics", headers={"Authorization": "Bearer " + KEY.decode()}).text.splitlines():
        if line.startswith(f'suffice_requests_total{{gate="{gate}",status="{status}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_a_request_refused_for_its_token():
    client = client_for(key=KEY)
    assert client.post("/v1/judge/sufficiency", json=record(0)).status_code == 401
    assert _requests_counted(client, "sufficiency", 401) == 1.0


def test_metrics_count_a_body_over_the_limit():
    client = client_for(key=KEY, max_body_bytes=1024)
    headers = {"Authorization": "Bearer " + KEY.decode()}
    big = [record(i) for i in range(40)]
    assert client.post("/v1/judge/sufficiency", json=big, headers=headers).status_code == 413
    assert _requests_counted(client, "sufficiency", 413) == 1.0


def test_metrics_count_fastapis_own_422():
    client = client_for(key=KEY)
    headers = {"Authorization": "Bearer " + KEY.decode()}
    response = client.post("/v1/judge/recovery?threshold=bogus", json=record(0), headers=headers)
    assert response.status_code == 422
    assert _requests_counted(client, "recovery", 422) == 1.0


def test_metrics_count_a_verdict_request_once():
    client = client_for(key=KEY)
    headers = {"Authorization": "Bearer " + KEY.decode()}
    assert client.post("/v1/judge/sufficiency", json=record(0), headers=headers).status_code == 200
    assert _requests_counted(client, "sufficiency", 200) == 1.0


def test_metrics_count_a_gate_not_served_as_unknown():
    client = client_for(key=KEY)
    headers = {"Authorization": "Bearer " + KEY.decode()}
    assert client.post("/v1/judge/adequacy", json=record(0), headers=headers).status_code == 404
    assert _requests_counted(client, "unknown", 404) == 1.0


def test_a_lone_surrogate_in_an_id_comes_back_escaped_and_the_others_still_get_verdicts():
    # What a JSON body's "\\ud800" escape decodes to; UTF-8 cannot hold it.
    body = (
        b'[{"id": "q0", "question": "Who?", "chunks": [{"id": "c0", "text": "Ada."}]},'
        b' {"id": "q\\ud800", "question": "Who?", "chunks": [{"id": "c\\udfff", "text": "Ada."}]}]'
    )
    response = client_for().post("/v1/judge/sufficiency", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert b'"q\\ud800"' in response.content
    assert [row["verdict"] is not None for row in response.json()["results"]] == [True, True]


def test_chunks_given_as_strings_get_their_positions_as_ids():
    item = {"id": "q1", "question": "Who wrote Hamlet?", "chunks": ["Hamlet is a play by Shakespeare."]}
    row = client_for().post("/v1/judge/sufficiency", json=item).json()["results"][0]
    assert row["verdict"]["useful_chunk_ids"] == [0]


def test_the_openapi_example_is_judged():
    client = client_for()
    spec = client.get("/openapi.json").json()
    example = spec["paths"]["/v1/judge/sufficiency"]["post"]["requestBody"]["content"]["application/json"]["example"]
    row = client.post("/v1/judge/sufficiency", json=example).json()["results"][0]
    assert row["verdict"] is not None


def test_a_ragas_item_is_read_with_suffices_names():
    item = {"id": "r1", "user_input": "Who wrote Emma?", "retrieved_contexts": ["Jane Austen wrote Emma."]}
    row = client_for().post("/v1/judge/sufficiency", json=item).json()["results"][0]
    assert row["verdict"] is not None


@contextlib.contextmanager
def audit_held_elsewhere(tmp_path: Path, monkeypatch) -> Iterator[tuple[TestClient, contextlib.ExitStack]]:
    """A client whose audit log another process holds (BEGIN EXCLUSIVE) until the
    yielded stack is closed; SQLite's wait shortened to 0.2 s."""
    import sqlite3

    from suffice.audit import database

    monkeypatch.setattr(database, "BUSY_TIMEOUT_S", 0.2)
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",), audit_db=tmp_path / "audit.db")
    client = TestClient(create_app(GateService(config, ScriptedEngine(good)), config), base_url="http://127.0.0.1")
    other = sqlite3.connect(tmp_path / "audit.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with contextlib.ExitStack() as held:
        held.callback(other.close)
        held.callback(other.execute, "ROLLBACK")
        yield client, held


def test_an_audit_log_held_by_another_process_is_503_naming_it(tmp_path: Path, monkeypatch):
    with audit_held_elsewhere(tmp_path, monkeypatch) as (client, _):
        response = client.post("/v1/judge/sufficiency", json=record(0))
    assert response.status_code == 503
    assert "another process holds it" in response.json()["detail"]


def test_the_audit_log_is_written_again_once_the_other_process_lets_go(tmp_path: Path, monkeypatch):
    with audit_held_elsewhere(tmp_path, monkeypatch) as (client, held):
        client.post("/v1/judge/sufficiency", json=record(0))
        held.close()
        assert client.post("/v1/judge/sufficiency", json=record(1)).status_code == 200


def test_an_unexpected_failure_is_a_json_500_with_an_id_for_the_log():
    class Failing(GateService):
        def judge(self, *args: object, **kwargs: object):  # type: ignore[override]
            raise RuntimeError("a bug")

    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",))
    client = TestClient(create_app(Failing(config, ScriptedEngine(good)), config), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/sufficiency", json=record(0))
    assert response.status_code == 500
    body = response.json()
    assert body["detail"] == f"internal error (id {body['error_id']} in the server's log)"


def test_an_unknown_rubric_is_422_naming_it_once():
    config = ServeConfig(gates=("adequacy",), options={"rubric": "customer-support"})
    client = TestClient(create_app(GateService(config, ScriptedEngine(good)), config), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/adequacy?rubric=no-such-rubric", json=record(0))
    detail = response.json()["detail"][0]
    assert response.status_code == 422
    assert detail["loc"] == ["query", "rubric"]
    assert detail["msg"].startswith("rubric: unknown rubric 'no-such-rubric'")


def test_an_item_with_a_key_twice_is_its_error_row_and_the_others_are_judged():
    body = (
        b'[{"id": "q0", "question": "Who?", "chunks": [{"id": 0, "text": "Ada."}]},'
        b' {"id": "q1", "question": "Who?", "question": "What?", "chunks": [{"id": 0, "text": "Ada."}]}]'
    )
    response = client_for().post("/v1/judge/sufficiency", content=body, headers={"content-type": "application/json"})
    rows = response.json()["results"]
    assert response.status_code == 200
    assert rows[0]["verdict"] is not None
    assert rows[1]["error"]["field"] == "question"


def test_an_item_with_string_chunks_and_a_key_twice_is_its_error_row():
    body = b'[{"id": "q0", "question": "Who?", "question": "What?", "chunks": ["Ada."]}]'
    response = client_for().post("/v1/judge/sufficiency", content=body, headers={"content-type": "application/json"})
    assert response.json()["results"][0]["error"]["field"] == "question"


def test_a_body_being_parsed_does_not_block_the_event_loop(monkeypatch):
    """On a real server (one event loop), /health answers while a body is parsed."""
    import httpx

    from suffice.server import admission

    release = threading.Event()
    real = admission.parse_line

    def slow_parse(raw: bytes, number: int) -> object:
        release.wait(10)
        return real(raw, number)

    monkeypatch.setattr(admission, "parse_line", slow_parse)
    with live_server(ScriptedEngine(good)) as port:
        base = f"http://127.0.0.1:{port}"
        worker = threading.Thread(
            target=lambda: httpx.post(f"{base}/v1/judge/sufficiency", json=record(0), timeout=20), daemon=True
        )
        worker.start()
        time.sleep(0.3)
        began = time.perf_counter()
        status = httpx.get(f"{base}/health", timeout=20).status_code
        waited = time.perf_counter() - began
        release.set()
        worker.join(10)
    assert status == 200
    assert waited < 5


def test_a_server_side_option_cannot_be_set_by_a_request():
    """``rubric_dir`` names a folder on the server: the server's to set, not a client's."""
    config = ServeConfig(gates=("adequacy",), options={"rubric": "customer-support"})
    client = TestClient(create_app(GateService(config, ScriptedEngine(good)), config), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/adequacy?rubric_dir=/etc", json=record(0))
    assert response.json()["detail"][0]["loc"] == ["query", "rubric_dir"]


def test_options_in_the_body_apply_to_that_request():
    config = ServeConfig(gates=("recovery",))
    service = GateService(config, ScriptedEngine(good))
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    client.post("/v1/judge/recovery", json={"items": [record(0)], "options": {"threshold": "loose"}})
    assert ("recovery", (("threshold", "'loose'"),)) in service._judges


def _recovery_service() -> tuple[GateService, TestClient]:
    config = ServeConfig(gates=("recovery",))
    service = GateService(config, ScriptedEngine(good))
    return service, TestClient(create_app(service, config), base_url="http://127.0.0.1")


def test_explicit_threshold_values_apply_to_that_request_as_text_or_an_object():
    """Issue 30: the recovery threshold a request sets, beyond the presets (as the query and the body give it)."""
    from suffice.gates.recovery.gate import RecoveryGate
    from suffice.server.service import Options

    service, _ = _recovery_service()
    text = service.judge_for("recovery", Options({"threshold": "min_passages=1,min_passage_score=0.5"})).gate
    mapping = service.judge_for("recovery", Options({"threshold": {"min_passages": 3}})).gate
    assert isinstance(text, RecoveryGate) and isinstance(mapping, RecoveryGate)
    assert (text.threshold.min_passages, text.threshold.min_passage_score) == (1, 0.5)
    assert (mapping.threshold.min_passages, mapping.threshold.high_stakes) == (3, True)  # the rest from strict


def test_the_unsupported_marker_a_request_sets_marks_its_partial_delivery():
    """Recovery v4: a partial answer delivered under the loose threshold marks each segment not fully supported,
    with the marker the request names (the query or the body)."""
    config = ServeConfig(gates=("recovery",))
    engine = ScriptedEngine(lambda r: recovery_reply(r, lambda index, text: "unsupported" if index else "supported"))
    client = TestClient(create_app(GateService(config, engine), config), base_url="http://127.0.0.1")
    item = {**record(0), "response": "Ada wrote it. She wrote it in 1843."}
    body = {"items": [item], "options": {"threshold": "loose", "unsupported_marker": " (unverified)"}}
    marked = client.post("/v1/judge/recovery", json=body).json()["results"][0]["verdict"]["answer"]
    assert marked == "Ada wrote it.[CITATION:c0] She wrote it in 1843. (unverified)"
    query = client.post("/v1/judge/recovery?threshold=loose&unsupported_marker=%5B%3F%5D", json=item)
    assert query.json()["results"][0]["verdict"]["answer"].endswith("1843.[?]")
    assert client.post("/v1/judge/recovery?unsupported_marker=%5BCITATION%3Ax%5D", json=item).status_code == 422


def test_a_bad_threshold_key_in_a_request_is_422_naming_it():
    _, client = _recovery_service()
    item = {**record(0), "response": "Ada wrote it."}
    response = client.post("/v1/judge/recovery?threshold=min_pasages=1", json=item)
    assert response.status_code == 422
    assert "min_pasages" in json.dumps(response.json())
    body = {"items": [item], "options": {"threshold": {"required_support_ratio": 2}}}
    response = client.post("/v1/judge/recovery", json=body)
    assert response.status_code == 422
    assert "required_support_ratio" in json.dumps(response.json())
