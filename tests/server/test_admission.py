"""Admission: past ``max_pending_chunks`` chunks being judged or waiting, a request gets
429 with ``Retry-After`` at once, and room comes back when the work ends (a real
uvicorn server on loopback, a scripted engine held until released)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.server.app import RETRY_AFTER_S
from suffice.server.config import ServeConfig
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.server.test_app import live_server, record


class Held(ScriptedEngine):
    """Judges as scripted, but its first call waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(good)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.first = True
        #: Items of every call, as it enters (the first is held before it is judged).
        self.asked: list[int] = []

    def generate(self, requests, progress=None, cancel=None):
        self.asked.append(len(requests))
        if self.first:
            self.first = False
            self.entered.set()
            self.release.wait(30)
        return super().generate(requests, progress, cancel)


@pytest.fixture
def full_service() -> Iterator[tuple[str, Held]]:
    """A service admitting 2 items, holding a request of 2 in its engine."""
    engine = Held()
    with live_server(engine, max_items=2, max_chunks_per_item=1, max_pending_chunks=4) as port:
        url = f"http://127.0.0.1:{port}/v1/judge/sufficiency"
        first = threading.Thread(target=lambda: httpx.post(url, json=[record(0), record(1)], timeout=30), daemon=True)
        first.start()
        assert engine.entered.wait(10)
        try:
            yield url, engine
        finally:
            engine.release.set()
            first.join(30)


def test_a_request_past_the_pending_items_is_429(full_service):
    url, _ = full_service
    assert httpx.post(url, json=record(2), timeout=10).status_code == 429


def test_a_429_says_when_to_try_again(full_service):
    url, _ = full_service
    assert httpx.post(url, json=record(2), timeout=10).headers["retry-after"] == str(RETRY_AFTER_S)


def test_a_429_never_reaches_the_engine(full_service):
    url, engine = full_service
    httpx.post(url, json=record(2), timeout=10)
    assert engine.asked == [2]


def test_room_comes_back_when_the_work_ends(full_service):
    url, engine = full_service
    engine.release.set()
    deadline = time.monotonic() + 10
    status = 0
    while time.monotonic() < deadline:
        status = httpx.post(url, json=record(2), timeout=10).status_code
        if status != 429:
            break
        time.sleep(0.1)
    assert status == 200


def test_refused_items_are_counted_in_the_metrics(full_service):
    url, _ = full_service
    httpx.post(url, json=record(2), timeout=10)
    metrics = httpx.get(url.replace("/v1/judge/sufficiency", "/metrics"), timeout=10).text
    assert "suffice_refused_items_total 1.0" in metrics


def test_a_request_answered_504_holds_its_room_until_its_generation_stops():
    """The 504 goes out at the timeout, but the engine still works on the request: its
    items stay admitted until the work ends, then the room is back."""
    engine = Held()
    with live_server(engine, max_items=1, max_chunks_per_item=1, max_pending_chunks=2, request_timeout=0.5) as port:
        url = f"http://127.0.0.1:{port}/v1/judge/sufficiency"
        assert httpx.post(url, json=record(0), timeout=10).status_code == 504
        held = httpx.post(url, json=record(1), timeout=10).status_code
        engine.release.set()
        assert held == 429


def test_fewer_pending_chunks_than_one_items_chunks_is_a_config_error_naming_it():
    with pytest.raises(ConfigError) as caught:
        ServeConfig(judge=JudgeConfig(), max_chunks_per_item=100, max_pending_chunks=10)
    assert caught.value.parameter == "max_pending_chunks"
