"""Attacks on the HTTP connection of a real ``suffice serve`` process, by clients without the key.

One process for the module (``tests.server.scripted_serve``: the real command, settings, uvicorn
server and guards; a scripted engine whose generation takes :data:`GENERATION_S`), with small
limits so each attack reaches them in a second or two.  Every client here is on loopback, every
loop is bounded and stops by itself.  See docs/security.md, attacks 29 to 32.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import uvicorn

from suffice.server.http_guard import (
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    MAX_PIPELINED,
    MAX_REQUEST_LINE,
)
from tests.server.test_app import record
from tests.vllm_server import free_port

KEY = "http-attack-key-0123456789abcdef"
AUTH = {"authorization": f"Bearer {KEY}"}
#: What one scripted generation takes: a judge request costs about what a small real one does.
GENERATION_S = 0.1
MAX_CONNECTIONS = 64
HEADER_TIMEOUT = 2.0
JUDGE_CACHE = 8
#: The descriptor limit the server runs under (a common default), so exhausting it is possible.
SERVER_NOFILE = 1024
PAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ps(self) -> psutil.Process:
        return psutil.Process(self.process.pid)


def _low_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_NOFILE, SERVER_NOFILE))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("http-attacks")
    key_file = folder / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    port = free_port()
    log = folder / "server.log"
    command = [
        sys.executable,
        "-m",
        "tests.server.scripted_serve",
        "serve",
        "--port",
        str(port),
        "--api-key-file",
        str(key_file),
        "--gate",
        "sufficiency",
        "--gate",
        "recovery",
        "--max-connections",
        str(MAX_CONNECTIONS),
        "--header-timeout",
        str(HEADER_TIMEOUT),
        "--judge-cache-size",
        str(JUDGE_CACHE),
    ]
    env = {**os.environ, "SCRIPTED_GENERATION_S": str(GENERATION_S)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_low_descriptor_limit
        )
    server = Served(process, port, log)
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            pytest.fail(f"suffice serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(server.url + "/ready", timeout=2).status_code == 200:
                break
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"suffice serve not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    yield server
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


def judge_seconds(server: Served, count: int = 5) -> float:
    """The median time of ``count`` authenticated judge requests, each on a new connection."""
    times = []
    for _ in range(count):
        began = time.perf_counter()
        response = httpx.post(f"{server.url}/v1/judge/sufficiency", json=record(0), headers=AUTH, timeout=30)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200, response.text
    return statistics.median(times)


def send_without_end(port: int, first: bytes, piece: bytes, most: int) -> tuple[int, bytes]:
    """Send ``first`` then ``piece`` over and over, up to ``most`` bytes or until the server
    stops reading; the bytes sent and what the server answered."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(first)
            while sent < most:
                sock.sendall(piece)
                sent += len(piece)
        except OSError:  # reset or closed: the server gave up on this client
            pass
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    return sent, answer


# Attack 1: a head without end.


@pytest.mark.parametrize(
    ("first", "status"),
    [(PAD, b"431"), (b"GET /health?x=", b"414")],
    ids=["endless header value", "endless URL"],
)
def test_a_head_without_end_is_cut_at_its_limit_and_the_server_stays_small(served: Served, first: bytes, status: bytes):
    rss = served.ps.memory_info().rss
    sent, answer = send_without_end(served.port, first, b"a" * 16384, 64 * 2**20)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert b"connection: close" in answer
    # Cut near the limit, not after 64 MiB (kernel buffers may hold a few MiB more).
    assert sent < 16 * 2**20
    assert served.ps.memory_info().rss - rss < 16 * 2**20
    assert httpx.get(served.url + "/health", timeout=5).status_code == 200


def test_a_body_of_millions_of_empty_objects_is_refused_before_it_is_parsed(served: Served):
    """16 MiB of ``[{},{},...]`` (5.6 million objects): parsed, it took +454 MiB of the server's memory per request.
    Its objects are counted before the parse now: 422 naming the body, and the peak grows by a small multiple of
    the body (the body, its text, the count's copy), not by the parse's ~80 bytes an object."""
    body = b"[" + b"{}," * ((16 * 2**20 - 2048) // 3) + b"{}]"
    before = served.ps.memory_info().rss
    peak = 0
    with httpx.Client(timeout=60) as client:
        for _ in range(3):
            answer = client.post(
                f"{served.url}/v1/judge/sufficiency",
                content=body,
                headers={**AUTH, "content-type": "application/json"},
            )
            peak = max(peak, served.ps.memory_info().rss)
            assert answer.status_code == 422, answer.text[:300]
            assert "objects and arrays" in answer.text and '"body"' in answer.text
    assert peak - before < 8 * len(body), f"+{(peak - before) >> 20} MiB for a {len(body) >> 20} MiB body"


def _read_all(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends until it closes the connection (or ``seconds`` pass)."""
    sock.settimeout(seconds)
    got = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            got += chunk
    return got


@pytest.mark.parametrize(
    "second",
    [
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 100_000 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"a: b\r\n" * 5000 + b"\r\n",
    ],
    ids=["100 KB head", "5,000 lines"],
)
def test_a_second_head_pipelined_in_the_same_read_meets_the_head_limits(served: Served, second: bytes):
    """The guard counted a read only up to its first blank line: a small request followed by a huge second head in
    the same write was answered 200.  Now the parser's own callbacks count every head: 431, and closed."""
    first = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(first + second)
        answer = _read_all(sock, 10)
    assert b"HTTP/1.1 431" in answer, answer[-300:]
    assert answer.count(b"HTTP/1.1 200") <= 1  # the first request's answer at most, never the second's


def test_pipelining_without_reading_is_cut_at_its_limit_and_the_memory_stays(served: Served):
    """One connection pipelining ``GET /health`` and never reading took the server from 82 to 2,005 MiB in 12 s,
    kept after the client left.  Now at most MAX_PIPELINED requests queue behind one in flight: 503, closed."""
    rss = served.ps.memory_info().rss
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            while sent < 64 * 2**20:
                sock.sendall(request * 1000)
                sent += len(request) * 1000
        answer = _read_all(sock, 10)
    assert b"HTTP/1.1 503" in answer and b"pipelined" in answer, answer[-300:]
    assert answer.count(b"HTTP/1.1 200") <= MAX_PIPELINED + 1
    assert sent < 32 * 2**20  # refused near the start, not after 64 MiB
    assert served.ps.memory_info().rss - rss < 32 * 2**20
    assert judge_seconds(served, 3) < 5


def test_answers_never_read_do_not_hold_the_places_of_keyed_clients(served: Served):
    """Connections pipelining ``GET /openapi.json`` for ever and never reading held every place: each one's answer
    could never finish, so none was idle, and keyed requests and ``/health`` answered 503 for the whole hold.  Now a
    connection queues at most MAX_PIPELINED requests (then 503, closed), and one whose answers wait unread past
    WRITE_TIMEOUT_S is closed: keyed clients keep their place."""
    request = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    holders = []
    try:
        for _ in range(MAX_CONNECTIONS):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
            sock.connect(("127.0.0.1", served.port))
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                for _ in range(2000):
                    sock.send(request * 50)
            holders.append(sock)
        time.sleep(1)
        assert judge_seconds(served, 3) < 5  # keyed requests are answered while the hold lasts
        assert httpx.get(served.url + "/health", timeout=10).status_code == 200
    finally:
        for sock in holders:
            sock.close()


def test_a_connection_whose_answer_waits_unread_is_closed_after_the_write_timeout(monkeypatch: pytest.MonkeyPatch):
    """The transport says writing is blocked (its buffer past the high-water mark): if the client does not read
    within WRITE_TIMEOUT_S the connection is aborted; reading in time keeps it."""
    from suffice.server import http_guard

    monkeypatch.setattr(http_guard, "WRITE_TIMEOUT_S", 0.05)
    protocol_cls = http_guard.protocol_class(http_guard.ConnectionLimits(8, 5.0))

    class Transport(asyncio.Transport):
        aborted = False

        def abort(self) -> None:
            self.aborted = True

        def is_closing(self) -> bool:
            return self.aborted

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

        def write(self, data: Any) -> None:
            pass

        def close(self) -> None:
            self.aborted = True

    async def run() -> tuple[bool, bool]:
        from uvicorn.config import Config
        from uvicorn.server import ServerState

        config = Config(app=lambda *_: None, log_level="critical")
        config.load()
        outcomes = []
        for read_in_time in (True, False):
            protocol = protocol_cls(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
            transport = Transport()
            protocol.connection_made(transport)
            protocol.pause_writing()
            if read_in_time:
                protocol.resume_writing()
            await asyncio.sleep(0.2)
            outcomes.append(transport.aborted)
            protocol.connection_lost(None)
        return outcomes[0], outcomes[1]

    assert asyncio.run(run()) == (False, True)


def test_a_head_of_too_many_header_lines_is_431(served: Served):
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"a: b\r\n" * (MAX_HEADERS + 5) + b"\r\n"
    _, answer = send_without_end(served.port, head, b"", 0)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]


def test_heads_within_the_limits_are_served(served: Served):
    """The limits leave room: a long URL and many headers just under them are answered."""
    query = "x=" + "a" * (MAX_REQUEST_LINE - 100)
    headers = {
        f"x-h{i}": "v" * ((MAX_HEAD_BYTES - MAX_REQUEST_LINE) // MAX_HEADERS // 2) for i in range(MAX_HEADERS - 5)
    }
    response = httpx.get(f"{served.url}/health?{query}", headers=headers, timeout=10)
    assert response.status_code == 200


# Attack 2: requests that never finish.


def test_a_request_whose_head_never_ends_is_closed_after_the_header_timeout(served: Served):
    with socket.create_connection(("127.0.0.1", served.port), timeout=HEADER_TIMEOUT + 10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        began = time.monotonic()
        answer = sock.recv(65536)
        waited = time.monotonic() - began
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert sock.recv(1) == b""  # closed
    assert HEADER_TIMEOUT - 0.5 < waited < HEADER_TIMEOUT + 5


def test_a_body_sent_slowly_to_an_open_path_does_not_hold_the_connection(served: Served):
    """``/health`` takes no body: it answers at once (before, the body was awaited for
    --request-timeout, 600 s), and the bytes that follow count as the next request's head, so a
    client dribbling them is cut at the header timeout."""
    answer = b""
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(0.2)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\nx")
        began = time.monotonic()
        answered = closed = None
        while time.monotonic() - began < HEADER_TIMEOUT + 10 and closed is None:
            with contextlib.suppress(OSError):
                sock.sendall(b"x")
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                closed = time.monotonic() - began
            answer += chunk
            if answered is None and b" 200 " in answer:
                answered = time.monotonic() - began
    assert answered is not None and answered < 1.5, answer[:300]
    assert b" 408 " in answer
    assert closed is not None and closed < HEADER_TIMEOUT + 3


def open_half(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)
    return socks


def test_a_thousand_half_open_requests_use_no_more_than_the_connection_cap(served: Served):
    """1,100 half-open requests against a server allowed 1,024 descriptors: without the cap
    the descriptors run out and even ``/health`` is reset."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = 1_100
    if soft < count + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 200), hard))
    fds = served.ps.num_fds()
    socks = open_half(served.port, count)
    try:
        assert served.ps.num_fds() <= fds + MAX_CONNECTIONS + 8
        assert httpx.get(served.url + "/health", timeout=5).status_code == 200
        assert judge_seconds(served, 1) < 5
    finally:
        for sock in socks:
            sock.close()


# The service cannot be stalled by clients without a key.


def _hostile(port: int, seconds: float, started: Any) -> None:
    """What clients without a key throw at the service for ``seconds``: three endless headers,
    an endless URL, and half-open requests kept at twice the connection cap; ``started`` is set
    once they all run."""
    stop = time.monotonic() + seconds

    def endless(first: bytes) -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(OSError):
                send_without_end(port, first, b"a" * 16384, 64 * 2**20)
            time.sleep(0.05)

    def half_open() -> None:
        held: list[socket.socket] = []
        while time.monotonic() < stop:
            with contextlib.suppress(OSError):
                held.extend(open_half(port, 2 * MAX_CONNECTIONS - len(held)))
            time.sleep(0.2)
            alive = []
            for sock in held:
                sock.setblocking(False)
                try:
                    sock.recv(1)  # answered (408) or closed: either way the server let it go
                    gone = True
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    sock.close()
                else:
                    alive.append(sock)
            held = alive
        for sock in held:
            sock.close()

    threads = [threading.Thread(target=endless, args=(PAD,)) for _ in range(3)]
    threads.append(threading.Thread(target=endless, args=(b"GET /health?x=",)))
    threads.append(threading.Thread(target=half_open))
    for thread in threads:
        thread.start()
    started.set()
    for thread in threads:
        thread.join(seconds + 30)


@pytest.mark.serial
def test_authenticated_latency_stays_within_twice_its_baseline_while_hostile_clients_run(served: Served):
    baseline = judge_seconds(served)
    rss = served.ps.memory_info().rss
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    hostile = context.Process(target=_hostile, args=(served.port, 15.0, started), daemon=True)
    hostile.start()
    try:
        assert started.wait(60)
        time.sleep(1)  # the attack under way
        during = judge_seconds(served)
        grown = served.ps.memory_info().rss - rss
        fds = served.ps.num_fds()
    finally:
        hostile.join(60)
        if hostile.is_alive():
            hostile.kill()
    assert during < 2 * baseline, (baseline, during)
    assert grown < 16 * 2**20  # before: 78 MB
    assert fds < MAX_CONNECTIONS + 64


# Attack 7: per-request options building judges that are kept for ever.


def test_distinct_thresholds_in_settings_look_ups_and_judge_requests_keep_at_most_the_cache(served: Served):
    """Settings look-ups build nothing that is kept; judge requests keep at most --judge-cache-size judges."""
    thresholds = [f"min_passage_score=0.{i:05d}1" for i in range(3_000)]
    with httpx.Client(base_url=served.url, headers=AUTH, timeout=30) as client:
        for threshold in thresholds[:20]:  # the allocator's arenas warmed
            assert client.get("/v1/settings/recovery", params={"threshold": threshold}).status_code == 200
        rss = served.ps.memory_info().rss
        for threshold in thresholds[20:]:
            assert client.get("/v1/settings/recovery", params={"threshold": threshold}).status_code == 200
        grown = served.ps.memory_info().rss - rss
    # Kept for ever, 2,980 judges hold about 5 MB (20,000: 32 MB).
    assert grown < 2 * 2**20, grown


def test_the_judge_cache_keeps_the_most_recently_used_and_settings_keep_nothing():
    from suffice.config import JudgeConfig
    from suffice.server.config import ServeConfig
    from suffice.server.service import GateService, Options
    from tests.batch.test_runner import good
    from tests.fakes import ScriptedEngine

    config = ServeConfig(judge=JudgeConfig(), gates=("recovery",), judge_cache_size=2)
    service = GateService(config, ScriptedEngine(good))
    a, b, c = (Options({"threshold": f"min_passage_score=0.{i}"}) for i in (1, 2, 3))
    for options in (a, b, c):
        service.settings("recovery", options)
    assert not service._judges
    first = service.judge_for("recovery", a)
    service.judge_for("recovery", b)
    assert service.judge_for("recovery", a) is first  # a used again: b is now the oldest
    service.judge_for("recovery", c)
    assert len(service._judges) == 2
    assert service.judge_for("recovery", a) is first
    service.settings("recovery", b)  # not kept, and a look-up does not mark a used
    assert [key[1][0][1] for key in service._judges] == [repr(c.values["threshold"]), repr(a.values["threshold"])]


def test_the_limits_the_docs_give_are_the_code_s():
    from suffice.server.config import ServeConfig
    from suffice.server.http_guard import KEEP_ALIVE_S, SILENT_GRACE_S
    from suffice.server.run import SPARE_DESCRIPTORS

    root = Path(__file__).resolve().parents[2] / "docs"
    security = " ".join((root / "security.md").read_text().split())
    serve = " ".join((root / "serve.md").read_text().split())
    defaults = ServeConfig()
    for text in (security, serve):
        assert f"over {MAX_REQUEST_LINE // 1024} KiB" in text
        assert f"{MAX_HEAD_BYTES // 1024} KiB or {MAX_HEADERS} header lines" in text
    assert f"`--header-timeout` ({defaults.header_timeout:g} s)" in security
    assert f"`--max-connections` ({defaults.max_connections})" in security
    assert f"`--judge-cache-size` ({defaults.judge_cache_size})" in security
    assert f"closed after {KEEP_ALIVE_S} s" in security
    assert f"waited {SILENT_GRACE_S:g} s less" in security
    assert f"plus {SPARE_DESCRIPTORS} for the engine" in security
    assert f"(default {defaults.max_connections})" in serve
    assert f"(default {defaults.header_timeout:g})" in serve
    assert f"(default {defaults.judge_cache_size})" in serve


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_connections", 0),
        ("judge_cache_size", 0),
        ("header_timeout", 0.0),
        ("header_timeout", float("nan")),
        ("header_timeout", 301.0),
        ("header_timeout", True),
    ],
)
def test_a_connection_setting_out_of_range_is_refused_naming_it(field: str, value: object):
    from suffice.exceptions import ConfigError
    from suffice.server.config import ServeConfig

    with pytest.raises(ConfigError) as caught:
        ServeConfig(**{field: value})  # type: ignore[arg-type]
    assert caught.value.parameter == field


def test_a_connection_cap_the_descriptor_limit_cannot_hold_is_refused_naming_it():
    """Run in a child whose hard limit is 1,024, so this process's limit is left alone."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (512, 1024))\n"
        "from suffice.exceptions import ConfigError\n"
        "from suffice.server.run import reserve_descriptors\n"
        "reserve_descriptors(600)\n"
        "assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 856, resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "try:\n"
        "    reserve_descriptors(900)\n"
        "except ConfigError as exc:\n"
        "    print(exc.parameter)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "max_connections"


@pytest.mark.parametrize("parser", ["h11", "httptools"])
def test_both_of_uvicorn_s_parsers_are_guarded(parser: str):
    """uvicorn falls back to h11 where httptools is missing: the limits hold on either."""
    import importlib

    import uvicorn

    from suffice.config import JudgeConfig
    from suffice.server.app import create_app
    from suffice.server.config import ServeConfig
    from suffice.server.http_guard import ConnectionLimits, guarded
    from suffice.server.service import GateService
    from tests.batch.test_runner import good
    from tests.fakes import ScriptedEngine

    module, name = {
        "h11": ("uvicorn.protocols.http.h11_impl", "H11Protocol"),
        "httptools": ("uvicorn.protocols.http.httptools_impl", "HttpToolsProtocol"),
    }[parser]
    base = getattr(importlib.import_module(module), name)
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",))
    app = create_app(GateService(config, ScriptedEngine(good)), config)
    limits = ConnectionLimits(max_connections=4, header_timeout=1.0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    # h11's own buffer limit as run.py sets it (its default, 16 KiB, would answer 400 first).
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="critical",
            http=guarded(base, limits),
            ws="none",
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        assert send_without_end(port, PAD, b"a" * 16384, 16 * 2**20)[1].startswith(b"HTTP/1.1 431")
        assert send_without_end(port, b"GET /health?x=", b"a" * 4096, 16 * 2**20)[1].startswith(b"HTTP/1.1 414")
        held = open_half(port, 8)
        try:
            # Past the cap of 4 each new one took an older one's place; all are answered 408 in time.
            answers = []
            for sock in held:
                sock.settimeout(5)
                with contextlib.suppress(OSError):
                    answers.append(sock.recv(65536))
            assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers), answers
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        finally:
            for sock in held:
                sock.close()
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


@contextlib.contextmanager
def guarded_server(loop: str, cap: int) -> Iterator[tuple[uvicorn.Server, int]]:
    """An in-process ``serve`` app behind the guard, capped at ``cap`` connections, on ``loop``."""
    from suffice.server.http_guard import ConnectionLimits, protocol_class
    from tests.batch.test_runner import good
    from tests.fakes import ScriptedEngine
    from tests.server.live import live

    limits = ConnectionLimits(max_connections=cap, header_timeout=HEADER_TIMEOUT)
    options = {"loop": loop, "ws": "none", "http": protocol_class(limits)}
    with live(ScriptedEngine(good), uvicorn_options=options) as running:
        yield running


def read_all(sock: socket.socket) -> bytes:
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def test_a_client_whose_request_waits_unread_keeps_its_place_when_a_burst_passes_the_cap():
    """A burst of connections accepted in one turn of a busy loop, before any is read, does not
    close the client that connected just before it: its request waits in the kernel, so it is
    not idle. The loop is held while the client sends its whole request and the burst connects
    behind it. (asyncio accepts the whole burst before reading; uvloop reads first.)"""
    cap = 4
    with guarded_server("asyncio", cap) as (server, port):
        server.servers[0].get_loop().call_soon_threadsafe(time.sleep, 1.0)
        time.sleep(0.2)  # the loop is held
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(HEALTH)
            burst = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2 * cap)]
            try:
                answer = read_all(client)
                assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
                # The silent ones took each other's places: descriptors stayed bounded.
                for sock in burst:
                    sock.settimeout(HEADER_TIMEOUT + 5)
                assert sum(read_all(sock).startswith(b"HTTP/1.1 408") for sock in burst) >= len(burst) - cap
            finally:
                for sock in burst:
                    sock.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_client_between_connect_and_send_keeps_its_place_while_slow_heads_pass_the_cap(loop: str):
    """A client descheduled between ``connect`` and ``send`` has sent nothing yet; slow heads that
    arrived after it (the half-open attack) make room before it does."""
    cap = 4
    with guarded_server(loop, cap) as (_, port), socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        time.sleep(0.1)  # accepted, silent
        slow = open_half(port, 2 * cap)
        try:
            time.sleep(0.2)  # each past the cap took an older one's place
            client.sendall(HEALTH)
            answer = read_all(client)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        finally:
            for sock in slow:
                sock.close()


def test_making_room_reads_a_bounded_number_of_kernel_buffers_and_picks_the_longest_waiting():
    """A new connection past the cap reads connections' buffers oldest first, until none older can beat the best:
    silent connections wait their grace longer, so a younger slow head goes before them; a flood of silent ones
    costs at most READS_PER_NEW_CONNECTION reads a connection, not one per connection held."""
    from suffice.server import http_guard as g

    class Stub(g._Guarded):
        reads = 0

        def __init__(self, since: float, silent: bool, in_flight: bool = False) -> None:
            self._waiting_since, self._silent, self.in_flight = since, silent, in_flight

        def _without_request(self) -> bool:
            return not self.in_flight

        def _idle_since(self) -> float | None:
            Stub.reads += 1
            return self._waiting_since + (g.SILENT_GRACE_S if self._silent else 0.0)

    silent = [Stub(float(i) / 1000, silent=True) for i in range(500)]
    assert g._longest_waiting(silent) is silent[0]
    assert Stub.reads <= g.READS_PER_NEW_CONNECTION
    Stub.reads = 0
    slow_head = Stub(0.5, silent=False)  # younger than the oldest silent one, but it has shown it is slow
    busy = Stub(0.0, silent=False, in_flight=True)
    assert g._longest_waiting([*silent[:10], slow_head, busy]) is slow_head
    assert g._longest_waiting([busy]) is None
