"""A real ``suffice serve`` process on loopback with the embedded model.

One server for the module (starting the engine is the slow part); the last test
stops it with SIGTERM while requests are in flight and checks that none is lost.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from suffice.audit import AuditLog
from tests.conftest import load_records
from tests.gates import recovery_checks
from tests.vllm_server import free_port

pytestmark = pytest.mark.engine

KEY = "serve-test-key-0123456789abcdef"
AUTH = {"authorization": f"Bearer {KEY}"}
START_TIMEOUT = 300


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    audit_db: Path
    log: Path
    #: What ``/ready`` answered while the server started, in order, repeats dropped: (status code, ``status``).
    starting: list[tuple[int, str]]

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("serve")
    key_file = folder / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)  # serve refuses a key file others may read
    port = free_port()
    log = folder / "server.log"
    command = [
        sys.executable,
        "-m",
        "suffice.cli.main",
        "serve",
        "--port",
        str(port),
        "--api-key-file",
        str(key_file),
        "--audit-db",
        str(folder / "audit.db"),
        "--max-body-bytes",
        "65536",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    served = Server(process, f"http://127.0.0.1:{port}", folder / "audit.db", log, [])
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            pytest.fail(f"suffice serve exited with {process.returncode}:\n{served.log_tail()}")
        try:
            answer = httpx.get(served.url + "/ready", timeout=5)
            seen = (answer.status_code, answer.json().get("status", ""))
            if not served.starting or served.starting[-1] != seen:
                served.starting.append(seen)
            if answer.status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"suffice serve not ready after {START_TIMEOUT} s:\n{served.log_tail()}")
        time.sleep(1)
    yield served
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()


def judge(server: Server, gate: str, body: object, **params: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/judge/{gate}", json=body, params=params, headers=AUTH, timeout=600)


def squad(count: int, skip: int = 0) -> list[dict[str, object]]:
    return load_records("squad2.jsonl", count + skip)[skip:]


def test_ready_answered_503_starting_while_the_engine_loaded_then_200(server: Server) -> None:
    """The fixture's start, watched: the port answered before the engine was up."""
    assert server.starting == [(503, "starting"), (200, "ready")], server.log_tail()


def test_a_short_and_a_windowed_response_are_judged_whole_by_the_served_recovery_gate(server: Server) -> None:
    """Issue 49 through ``suffice serve``: every segment of each response judged once, citing only sources shown,
    the longer one in several windows (a window of at most 100 tokens of segments, per request)."""
    body = {"items": recovery_checks.records(), "options": {"threshold": "loose"}}
    response = judge(server, "recovery", body, max_response_tokens="100")
    assert response.status_code == 200, response.text[:500]
    rows = response.json()["results"]
    for record, row in zip(body["items"], rows, strict=True):
        assert row["error"] is None, row
        recovery_checks.assert_judged_whole(record, row["verdict"])
    short, windowed = (row["verdict"] for row in rows)
    assert short["windows"] == 1 and windowed["windows"] > 1


def test_concurrent_clients_on_every_gate_get_valid_verdicts_in_order(server: Server) -> None:
    records = squad(12)
    calls: list[tuple[str, list[dict[str, object]], dict[str, str]]] = [
        ("sufficiency", records[i : i + 2], {}) for i in range(0, 8, 2)
    ]
    calls.append(("recovery", [{**r, "response": str(r.get("answer") or "No.")} for r in records[8:10]], {}))
    calls.append(("adequacy", records[10:12], {"rubric": "customer-support"}))
    responses: dict[int, httpx.Response] = {}

    def call(index: int) -> None:
        gate, body, params = calls[index]
        responses[index] = judge(server, gate, body, **params)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    for index, (gate, body, _) in enumerate(calls):
        response = responses[index]
        assert response.status_code == 200, (gate, response.text[:500])
        rows = response.json()["results"]
        assert [row["id"] for row in rows] == [r["id"] for r in body]
        assert [row["error"] for row in rows] == [None] * len(body)
        assert all(row["gate"] == gate for row in rows)


def test_a_sufficiency_verdict_has_its_decision_probability(server: Server) -> None:
    [row] = judge(server, "sufficiency", squad(1)).json()["results"]
    assert 0.0 <= row["verdict"]["p_sufficient"] <= 1.0


def test_bad_items_are_error_rows_in_a_200(server: Server) -> None:
    body = [{"id": "no-question", "chunks": ["x"]}, squad(1)[0], {"id": "bad-chunks", "question": "Q?", "chunks": 5}]
    response = judge(server, "sufficiency", body)
    rows = response.json()["results"]
    assert response.status_code == 200
    assert rows[0]["error"]["field"] == "question"
    assert rows[1]["verdict"] is not None
    assert rows[2]["error"]["field"] == "chunks"


def test_no_token_is_401(server: Server) -> None:
    response = httpx.post(f"{server.url}/v1/judge/sufficiency", json=squad(1), timeout=30)
    assert response.status_code == 401


def test_a_body_over_the_limit_is_413(server: Server) -> None:
    big = [{"id": "big", "question": "Q?", "chunks": ["x" * 70_000]}]
    assert judge(server, "sufficiency", big).status_code == 413


def test_malformed_json_is_422(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/judge/sufficiency",
        content=b'{"id": ',
        headers={**AUTH, "content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 422


def test_metrics_count_what_was_served(server: Server) -> None:
    text = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=30).text
    line = next(x for x in text.splitlines() if x.startswith('suffice_verdicts_total{gate="sufficiency"}'))
    assert float(line.split()[-1]) >= 9


def _metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=30).text
    line = next(x for x in text.splitlines() if x.startswith(name + " ") or x.startswith(name + "{"))
    return float(line.split()[-1])


def test_a_client_that_hangs_up_frees_the_engine(server: Server) -> None:
    """24 items keep the engine busy for well over a minute here; the client gives up
    after 3 s and the server stops their generation instead of finishing it for nobody.
    The engine notices after its current step (a large prefill step takes ~10 s here)."""
    body = squad(24, skip=20)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/judge/sufficiency", json=body, headers=AUTH, timeout=3)
    deadline = time.monotonic() + 40
    busy = _tree_cpu_seconds(server, over=3.0)
    while busy >= 1.0 and time.monotonic() < deadline:
        busy = _tree_cpu_seconds(server, over=3.0)
    assert busy < 1.0, "the engine kept generating for a client that left"
    assert _metric(server, 'suffice_requests_total{gate="sufficiency",status="499"}') == 1


def _tree_cpu_seconds(server: Server, over: float) -> float:
    """CPU seconds the server and its engine processes use in the next ``over`` seconds
    (a busy engine on two cores uses about two per second; an idle one next to none)."""
    root = psutil.Process(server.process.pid)
    processes = [root, *root.children(recursive=True)]

    def used() -> float:
        total = 0.0
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    before = used()
    time.sleep(over)
    return used() - before


def test_clients_without_the_key_do_not_slow_judging_on_the_real_engine(server: Server) -> None:
    """docs/security.md attacks 29 to 31 on the real engine: endless heads and half-open requests
    while a client with the key judges; its median latency stays within twice its baseline."""
    import statistics

    from tests.server.test_http_attacks import PAD, open_half, send_without_end

    body = squad(1, skip=40)

    def timed() -> float:
        began = time.perf_counter()
        response = judge(server, "sufficiency", body)
        assert response.status_code == 200, response.text[:300]
        return time.perf_counter() - began

    baseline = statistics.median(timed() for _ in range(3))
    stop = threading.Event()
    answers: list[bytes] = []

    def endless() -> None:
        while not stop.is_set():
            answers.append(send_without_end(int(server.url.rsplit(":", 1)[1]), PAD, b"a" * 16384, 64 * 2**20)[1])
            stop.wait(0.05)  # this process shares the engine's cores: its own reconnect loop is not the server's cost

    def half_open() -> None:
        held = open_half(int(server.url.rsplit(":", 1)[1]), 100)
        stop.wait(60)
        for sock in held:
            sock.close()

    hostile = [threading.Thread(target=endless) for _ in range(3)] + [threading.Thread(target=half_open)]
    for thread in hostile:
        thread.start()
    try:
        time.sleep(1)
        during = statistics.median(timed() for _ in range(3))
    finally:
        stop.set()
        for thread in hostile:
            thread.join(60)
    assert answers and all(answer.startswith(b"HTTP/1.1 431") for answer in answers), answers[:1]
    assert during < 2 * baseline, (baseline, during)


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(server: Server) -> None:
    """Last in the module: it stops the server."""
    records = squad(8, skip=12)
    responses: list[httpx.Response] = []

    def call(body: list[dict[str, object]]) -> None:
        responses.append(judge(server, "sufficiency", body))

    threads = [threading.Thread(target=call, args=(records[i : i + 2],)) for i in range(0, 8, 2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # all four requests are inside the server
        metrics = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=30).text
        waiting = next(x for x in metrics.splitlines() if x.startswith("suffice_waiting_requests "))
        if float(waiting.split()[-1]) >= 4:
            break
        time.sleep(0.1)
    children = psutil.Process(server.process.pid).children(recursive=True)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(600)
    status = server.process.wait(120)
    assert status == 0, server.log_tail()
    assert [r.status_code for r in responses] == [200] * 4
    served = {row["id"] for r in responses for row in r.json()["results"] if row["verdict"] is not None}
    assert served == {r["id"] for r in records}
    request_ids = {r.json()["request_id"] for r in responses}
    log = AuditLog(server.audit_db)
    audited = {row["run_id"] for row in log.rows()}
    log.close()
    assert request_ids <= audited
    # multiprocessing's resource tracker exits a moment after the server (measured: under 1 s).
    _, alive = psutil.wait_procs([p for p in children if p.is_running()], timeout=10)
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert "Traceback" not in server.log_tail()
