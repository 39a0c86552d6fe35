"""``suffice serve`` while its engine starts: the port answers from the first moment (503 ``starting`` on
``/ready``, 200 ``starting`` on ``/health``), a SIGTERM then exits 0, and a start that fails exits as the
error says.  The real process with a scripted engine whose start takes :data:`START_S`; the real engine's
start is watched by ``tests/server/test_serve_process.py``'s fixture."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from suffice.exceptions import EXIT_USAGE
from tests.vllm_server import free_port

#: Seconds the scripted engine takes to start: long enough to be seen starting on a loaded machine.
START_S = 6.0


def _serve(folder: Path, **env: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = folder / "server.log"
    command = [sys.executable, "-m", "tests.server.scripted_serve", "serve", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
    return process, f"http://127.0.0.1:{port}", log


def _first_answer(process: subprocess.Popen[bytes], url: str, log: Path) -> httpx.Response:
    """The first answer ``/ready`` gives (the port refuses until the process has listened)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"suffice serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{url}/ready", timeout=5)
        except httpx.TransportError:
            time.sleep(0.05)
    pytest.fail(f"suffice serve never answered:\n{log.read_text()[-3000:]}")


@pytest.fixture
def starting(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    process, url, log = _serve(tmp_path, SCRIPTED_START_S=str(START_S))
    yield process, url, log
    if process.poll() is None:
        process.kill()
        process.wait()


def test_ready_is_503_starting_from_the_first_answer_then_200(starting) -> None:
    process, url, log = starting
    first = _first_answer(process, url, log)
    assert first.status_code == 503, first.text
    assert first.json()["status"] == "starting"
    assert int(first.headers["retry-after"]) > 0
    health = httpx.get(f"{url}/health", timeout=5)
    assert (health.status_code, health.json()["status"]) == (200, "starting")
    record = {"id": "q", "question": "Who?", "chunks": ["Ada."]}
    early = httpx.post(f"{url}/v1/judge/sufficiency", json=record, timeout=5)
    assert early.status_code == 503 and early.json()["status"] == "starting" and "retry-after" in early.headers
    deadline = time.monotonic() + 60
    while (ready := httpx.get(f"{url}/ready", timeout=5)).status_code != 200:
        assert ready.json()["status"] == "starting"
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    assert ready.json()["status"] == "ready"
    assert httpx.post(f"{url}/v1/judge/sufficiency", json=record, timeout=30).status_code == 200
    metrics = httpx.get(f"{url}/metrics", timeout=5).text
    assert "suffice_engine_alive 1.0" in metrics and 'suffice_build_info{backend="' in metrics
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, log.read_text()


def test_sigterm_while_the_engine_starts_exits_0_once_it_is_closed(starting) -> None:
    process, url, log = starting
    assert _first_answer(process, url, log).status_code == 503
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, log.read_text()
    text = log.read_text()
    assert "still starting" in text and "Traceback" not in text, text


def test_an_engine_that_fails_to_start_stops_the_server_with_the_error(tmp_path: Path) -> None:
    process, _, log = _serve(tmp_path, SCRIPTED_START_S="1", SCRIPTED_START_FAILS="1")
    status = process.wait(60)
    text = log.read_text()
    assert status == EXIT_USAGE, text
    assert "the scripted engine was told to fail its start" in text and "Traceback" not in text, text


def test_a_start_that_fails_after_a_sigterm_is_a_clean_stop(tmp_path: Path) -> None:
    """Ctrl-C reaches the engine's own processes too, so their start fails: the stop was asked for."""
    process, url, log = _serve(tmp_path, SCRIPTED_START_S=str(START_S), SCRIPTED_START_FAILS="1")
    assert _first_answer(process, url, log).status_code == 503
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, log.read_text()
    assert "stopped before the engine was up" in log.read_text()
