"""Secrets and the network (issue 29): which proxy the openai engine uses, which addresses it refuses, and that no
key reaches a settings file, an output or an error; what Ray and vLLM are told so that they try no address off
this machine (the end-to-end proof, under strace: tests/test_no_network.py).

Real loopback sockets, no model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from suffice.batch import BatchOptions, RayOptions, judge_file, ray_pool
from suffice.cli.engine_args import add_engine_args, engine_config_from_args
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError, EngineError
from suffice.serving import machine
from suffice.serving.engine_config import EngineConfig
from suffice.serving.offline import OFFLINE_ENV
from suffice.serving.openai import OpenAIEngine
from tests.batch.test_runner import write_lines
from tests.serving.test_openai_engine import FakeServer, request
from tests.test_judge import GOOD, rec

KEY = "sk-engine-key-0123456789abcdef"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class Recorder:
    """A proxy-ish listener on a loopback port: keeps every byte it is sent, answers 502 and hangs up."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(8)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.received = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)
                data = conn.recv(65536)
                with self._lock:
                    self.received += data
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    listener = Recorder()
    yield listener
    listener.close()


def _relay_handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    """Serves ``fake`` (an ``httpx.MockTransport`` handler) on a real socket."""

    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            content = self.rfile.read(length) if length else b""
            request = httpx.Request(
                self.command,
                f"http://{self.headers['Host']}{self.path}",
                headers=list(self.headers.items()),
                content=content,
            )
            response = fake(request)
            body = response.read()
            self.send_response(response.status_code)
            for name, value in response.headers.items():
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _relay

    return Relay


@contextlib.contextmanager
def serving(fake: FakeServer) -> Iterator[str]:
    """``fake`` on a loopback port: its plain-http address."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _relay_handler(fake))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "engine.key"
    path.write_text(KEY + "\n")
    return path


# -- proxies: only the one given ----------------------------------------------------------


def test_a_proxy_in_the_environment_gets_neither_the_key_nor_the_prompts(
    recorder: Recorder, key_file: Path, monkeypatch: pytest.MonkeyPatch
):
    for name in PROXY_VARIABLES:
        monkeypatch.setenv(name, recorder.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    fake = FakeServer()
    with (
        serving(fake) as url,
        OpenAIEngine(EngineConfig(kind="openai", base_url=url, api_key_file=key_file, retries=0)) as engine,
    ):
        engine.count_tokens(["a prompt only the server may read"])
    assert bytes(recorder.received) == b""
    assert "/tokenize" in fake.paths()
    assert all(headers["authorization"] == f"Bearer {KEY}" for headers in fake.headers)


def test_the_proxy_given_is_the_one_used(recorder: Recorder, key_file: Path):
    fake = FakeServer()
    with serving(fake) as url, pytest.raises(EngineError):
        OpenAIEngine(EngineConfig(kind="openai", base_url=url, api_key_file=key_file, retries=0, proxy=recorder.url))
    assert bytes(recorder.received).startswith(f"GET {url}/v1/models".encode())
    assert fake.calls == []


def test_the_proxy_option_reaches_the_engine_config():
    p = argparse.ArgumentParser()
    add_engine_args(p)
    args = p.parse_args(
        ["--engine", "openai", "--base-url", "http://gpu-box:8000", "--allow-insecure-http", "--proxy", "http://p:3128"]
    )
    config = engine_config_from_args(args)
    assert (config.proxy, config.allow_insecure_http) == ("http://p:3128", True)


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"kind": "vllm", "proxy": "http://p:3128"}, "proxy"),
        ({"kind": "vllm", "allow_insecure_http": True}, "allow_insecure_http"),
        ({"kind": "openai", "base_url": "https://h", "proxy": "ftp://p:21"}, "proxy"),
        ({"kind": "openai", "base_url": "https://h", "proxy": "p:3128"}, "proxy"),
    ],
)
def test_proxy_settings_are_checked_and_named(settings: dict[str, Any], parameter: str):
    with pytest.raises(ConfigError) as caught:
        EngineConfig(**settings)
    assert caught.value.parameter == parameter


# -- addresses: no plain http off this machine unless allowed, no credentials ---------------------------------


@pytest.mark.parametrize("url", ["http://gpu-box:8000", "http://10.0.0.5:8000", "http://[2001:db8::1]:8000/v1"])
def test_plain_http_to_another_machine_is_refused_naming_base_url(url: str):
    with pytest.raises(ConfigError, match="--allow-insecure-http") as caught:
        EngineConfig(kind="openai", base_url=url)
    assert caught.value.parameter == "base_url"


@pytest.mark.parametrize("url", ["http://gpu-box:8000", "http://10.0.0.5:8000"])
def test_plain_http_to_another_machine_is_taken_when_allowed(url: str):
    assert EngineConfig(kind="openai", base_url=url, allow_insecure_http=True).base_url == url


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://127.0.0.7:8000", "http://localhost:8000", "http://[::1]:8000", "https://h"]
)
def test_loopback_or_https_needs_no_permission(url: str):
    assert EngineConfig(kind="openai", base_url=url).base_url == url


@pytest.mark.parametrize(
    ("settings", "parameter", "secret"),
    [
        ({"base_url": "http://judge:s3cr3t-pw@127.0.0.1:8000"}, "base_url", "s3cr3t-pw"),
        ({"base_url": "https://t0ken-in-url@gpu-box:8443/v1"}, "base_url", "t0ken-in-url"),
        ({"base_url": "ftp://judge:s3cr3t-pw@gpu-box"}, "base_url", "s3cr3t-pw"),
        ({"base_url": "https://judge:s3cr3t-pw@gpu-box:80OO"}, "base_url", "s3cr3t-pw"),
        ({"base_url": "https://h", "proxy": "http://me:pr0xy-pw@proxy:3128"}, "proxy", "pr0xy-pw"),
    ],
)
def test_credentials_in_an_address_are_refused_without_echoing_them(
    settings: dict[str, str], parameter: str, secret: str
):
    with pytest.raises(ConfigError) as caught:
        EngineConfig(kind="openai", **settings)  # type: ignore[arg-type]
    assert caught.value.parameter == parameter
    assert secret not in str(caught.value)
    assert secret not in repr(caught.value.value)


# -- no key in a settings file, an output or an error ----------------------------------------------------------


def _echoing_key(fake: FakeServer, status: int, pad: int) -> Callable[[str, object], httpx.Response | None]:
    """A server that quotes the request's Authorization header back in its error (after ``pad`` characters)."""

    def fail(path: str, body: object) -> httpx.Response | None:
        if path != "/v1/completions":
            return None
        quoted = "x" * pad + f"invalid key in {fake.headers[-1]['authorization']}"
        return httpx.Response(status, json={"error": {"message": quoted}})

    return fail


def test_no_key_reaches_the_settings_file_the_output_or_an_error(key_file: Path, tmp_path: Path):
    audit_key = os.urandom(32)
    source, out = tmp_path / "in.jsonl", tmp_path / "out" / "verdicts.jsonl"
    out.parent.mkdir()
    write_lines(source, [json.dumps(rec(i)).encode() for i in range(2)])
    fake = FakeServer(lambda chat_text: json.dumps(GOOD, separators=(",", ":")))
    with serving(fake) as url:
        config = JudgeConfig(engine=EngineConfig(kind="openai", base_url=url, api_key_file=key_file, retries=0))
        judge_file(config, source, out, BatchOptions(audit_db=tmp_path / "out" / "audit.db", audit_key=audit_key))
        fake.fail = _echoing_key(fake, 401, 0)
        with pytest.raises(EngineError) as caught:
            judge_file(config, source, tmp_path / "out" / "again.jsonl")
    assert "***" in str(caught.value)
    secrets = [KEY.encode(), audit_key, audit_key.hex().encode()]
    assert (out.parent / "verdicts.jsonl.settings.json").exists()
    for path in sorted(out.parent.iterdir()):
        body = path.read_bytes()
        assert not any(secret in body for secret in secrets), path
    assert not any(secret.decode(errors="replace") in str(caught.value) for secret in secrets)


@pytest.mark.parametrize("pad", [0, 263])
def test_a_key_the_server_quotes_back_is_hidden_in_the_error(key_file: Path, pad: int):
    """Also when the quote is cut inside the key (``pad`` 263: after its 15th character): it is hidden before the
    cut."""
    fake = FakeServer()
    fake.fail = _echoing_key(fake, 400, pad)
    with serving(fake) as url:
        engine = OpenAIEngine(EngineConfig(kind="openai", base_url=url, api_key_file=key_file, retries=0))
        with engine, pytest.raises(EngineError) as caught:
            engine.generate([request()])
    assert KEY[:8] not in str(caught.value)


# -- Ray and vLLM are told their address; Ray reports no usage -------------------------------------------------


def test_a_local_ray_instance_starts_on_loopback_and_quiet(monkeypatch: pytest.MonkeyPatch):
    ray = pytest.importorskip("ray")
    import ray._private.ray_constants as constants

    seen: dict[str, Any] = {}

    def init(**kwargs: Any) -> None:
        seen.update(kwargs=kwargs, env=dict(os.environ), cluster=constants.ENABLE_RAY_CLUSTER)
        raise RuntimeError("stop here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("http_proxy", raising=False)
    for name in OFFLINE_ENV:  # set by suffice for ray.init alone (not on import: tests/test_import_side_effects.py)
        monkeypatch.delenv(name, raising=False)
    before, cluster = dict(os.environ), constants.ENABLE_RAY_CLUSTER
    pool = ray_pool.ActorPool(JudgeConfig(), RayOptions(address="local"), lambda message: None, "", None)
    with pytest.raises(ConfigError):
        pool.start()
    assert seen["kwargs"]["_node_ip_address"] == "127.0.0.1"
    assert seen["kwargs"]["include_dashboard"] is False
    env = seen["env"]
    assert {name: env.get(name) for name in OFFLINE_ENV} == OFFLINE_ENV  # Ray's usage report off, hub offline
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and seen["cluster"] is False
    assert env["grpc_proxy"] == "" and env["http_proxy"].startswith("http://127.0.0.1:")
    assert dict(os.environ) == before and cluster == constants.ENABLE_RAY_CLUSTER


def test_a_ray_cluster_elsewhere_gets_the_drivers_environment(monkeypatch: pytest.MonkeyPatch):
    ray = pytest.importorskip("ray")
    seen: dict[str, Any] = {}

    def init(**kwargs: Any) -> None:
        seen.update(kwargs=kwargs, env=dict(os.environ))
        raise RuntimeError("stop here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    for name in OFFLINE_ENV:
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    pool = ray_pool.ActorPool(JudgeConfig(), RayOptions(address="ray://head:10001"), lambda message: None, "", None)
    with pytest.raises(ConfigError):
        pool.start()
    assert "_node_ip_address" not in seen["kwargs"]
    assert seen["env"]["RAY_USAGE_STATS_ENABLED"] == "0" and dict(os.environ) == before
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in seen["env"] or "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in os.environ


def test_vllm_is_told_its_address_so_it_asks_no_public_host(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "VLLM_HOST_IP"})
    machine.apply_machine_config(machine.MachineConfig((0,), 1.0, None, "", ""))
    assert os.environ["VLLM_HOST_IP"] == "127.0.0.1"


def test_an_address_the_user_gave_vllm_is_kept(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(os, "environ", {**os.environ, "VLLM_HOST_IP": "10.1.2.3"})
    machine.apply_machine_config(machine.MachineConfig((0,), 1.0, None, "", ""))
    assert os.environ["VLLM_HOST_IP"] == "10.1.2.3"
