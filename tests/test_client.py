"""The gate inside a RAG application: ``Judge.ajudge``/``ajudge_batch`` on the event loop, and
``Client``/``AsyncClient`` of ``suffice serve`` with the judge's call shape (a real uvicorn
server on loopback over a scripted engine)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import socket
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from suffice import (
    AsyncClient,
    AuthenticationError,
    Client,
    InvalidRequestError,
    Judge,
    JudgeResult,
    RequestTooLargeError,
    ServiceTimeoutError,
    ServiceUnavailableError,
)
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates import gate_class
from suffice.grammars.decision_verdict import DecisionVerdict
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.server.live import live
from tests.server.test_admission import Held

KEY = "k" * 32


def record(i: int) -> dict[str, object]:
    return {"id": f"q{i}", "question": f"Who wrote {i}?", "chunks": [{"id": f"c{i}", "text": f"Ada wrote {i}."}]}


RECORDS: list[object] = [record(i) for i in range(5)] + [{"id": "bad", "chunks": []}]


@contextlib.contextmanager
def serve(
    engine: ScriptedEngine,
    key: str | None = None,
    judge: JudgeConfig | None = None,
    gates: tuple[str, ...] = ("sufficiency",),
    **settings: Any,
) -> Iterator[str]:
    """``suffice serve``'s app on a real uvicorn server on a loopback port; yields its base URL."""
    with live(engine, key=key, judge=judge, gates=gates, **settings) as (_, port):
        yield f"http://127.0.0.1:{port}"


def verdicts(judge: Judge | Client, records: Sequence[object]) -> list[BaseModel | None]:
    """Application code: it takes a judge or a client alike."""
    return [result.verdict for result in judge.judge_batch(records)]


def comparable(result: JudgeResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude={"raw_text"})


# --- the async Python API ------------------------------------------------------------------------------


def test_sixteen_concurrent_ajudge_calls_give_what_judge_batch_gives():
    judge = Judge(ScriptedEngine(good))
    records = [record(i) for i in range(16)]

    async def main() -> list[JudgeResult]:
        return list(await asyncio.gather(*(judge.ajudge(r) for r in records)))

    assert [comparable(r) for r in asyncio.run(main())] == [comparable(r) for r in judge.judge_batch(records)]


def test_ajudge_batch_gives_what_judge_batch_gives_with_error_rows():
    judge = Judge(ScriptedEngine(good))
    got = asyncio.run(judge.ajudge_batch(RECORDS))
    assert [comparable(r) for r in got] == [comparable(r) for r in judge.judge_batch(RECORDS)]
    assert got[-1].error is not None and got[-1].error.field == "question"


class Blocking(ScriptedEngine):
    """Blocks each call until its cancel is set (or 10 s), recording the cancel events it got."""

    def __init__(self) -> None:
        super().__init__(good)
        self.cancels: list[threading.Event] = []
        self.entered = threading.Event()

    def generate(self, requests, progress=None, cancel=None):
        assert cancel is not None
        self.cancels.append(cancel)
        self.entered.set()
        cancel.wait(10)
        return super().generate(requests, progress, cancel)


def test_cancelling_an_ajudge_stops_its_engine_work_and_reraises():
    engine = Blocking()
    judge = Judge(engine)

    async def main() -> None:
        task = asyncio.ensure_future(judge.ajudge(record(0)))
        while not engine.entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    began = time.monotonic()
    asyncio.run(main())
    assert engine.cancels[0].is_set()
    assert time.monotonic() - began < 5


# --- the client: one object swapped ----------------------------------------------------------------------


def test_a_function_taking_a_judge_or_a_client_gives_equal_verdicts():
    local = verdicts(Judge(ScriptedEngine(good)), RECORDS)
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        remote = verdicts(client, RECORDS)
    assert remote == local
    assert isinstance(remote[0], gate_class("sufficiency").verdict_model)


def test_a_decision_only_service_gives_decision_verdicts_as_the_judge_does():
    engine = ScriptedEngine(lambda request: '{"is_sufficient":true}')
    config = JudgeConfig(detail="decision")
    local = verdicts(Judge(engine, config=config), RECORDS)
    with serve(engine, judge=config) as url, Client(url) as client:
        remote = verdicts(client, RECORDS)
    assert remote == local
    assert isinstance(remote[0], DecisionVerdict)


def test_client_results_are_the_judges_results_but_the_raw_text():
    local = Judge(ScriptedEngine(good)).judge_batch(RECORDS)
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        remote = client.judge_batch(RECORDS)
        one = client.judge(RECORDS[1])
    assert [comparable(r) for r in remote] == [comparable(r) for r in local]
    assert comparable(one) == comparable(local[1])
    assert remote[-1].error is not None and remote[-1].error.field == "question"


def test_the_async_client_gives_the_same_results():
    local = Judge(ScriptedEngine(good)).judge_batch(RECORDS)

    async def main(url: str) -> list[JudgeResult]:
        async with AsyncClient(url) as client:
            batch = await client.ajudge_batch(RECORDS)
            assert comparable(await client.ajudge(RECORDS[0])) == comparable(batch[0])
            return batch

    with serve(ScriptedEngine(good)) as url:
        remote = asyncio.run(main(url))
    assert [comparable(r) for r in remote] == [comparable(r) for r in local]


def test_cancelling_an_async_client_call_stops_the_services_generation():
    engine = Blocking()

    async def main(url: str) -> None:
        async with AsyncClient(url) as client:
            task = asyncio.ensure_future(client.ajudge(record(0)))
            while not engine.entered.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    with serve(engine) as url:
        asyncio.run(main(url))
        deadline = time.monotonic() + 10
        while not engine.cancels[0].is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.cancels[0].is_set()


def test_one_async_client_serves_one_event_loop_after_another():
    """An application that calls ``asyncio.run`` more than once (a CLI's commands, a test per loop) keeps one
    client: each loop sends on connections of its own, closed when ``asyncio.run`` shuts that loop down."""
    with serve(ScriptedEngine(good)) as url:
        made = [AsyncClient(url)]  # made outside any loop, as an application's module makes it

        async def one(i: int) -> JudgeResult:
            return await made[0].ajudge(record(i))

        first = asyncio.run(one(0))
        second = asyncio.run(one(1))  # was: RuntimeError("Event loop is closed")
        third = asyncio.run(made[0].ajudge_batch([record(2), record(3)]))

        async def closing() -> JudgeResult:
            async with made[0]:
                return await one(4)

        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", ResourceWarning)
            fourth = asyncio.run(closing())
            fifth = asyncio.run(one(5))  # a loop that ends without aclose(): asyncio.run's shutdown closes it
            made.clear()
            gc.collect()
    results = [first, second, *third, fourth, fifth]
    assert [r.id for r in results] == ["q0", "q1", "q2", "q3", "q4", "q5"]
    assert all(r.ok for r in results)
    assert [str(w.message) for w in warned if issubclass(w.category, ResourceWarning)] == []


def test_a_key_is_sent_and_a_wrong_one_is_an_authentication_error():
    with serve(ScriptedEngine(good), key=KEY) as url:
        assert Client(url, api_key=KEY).judge(record(0)).ok
        with pytest.raises(AuthenticationError) as caught:
            Client(url, api_key="x" * 32).judge(record(0))
        with pytest.raises(AuthenticationError):
            Client(url).judge(record(0))
    assert caught.value.status == 401


@pytest.mark.parametrize("kind", [Client, AsyncClient])
def test_a_key_read_with_its_newline_is_stripped_and_sent(kind):
    """A key file read whole (``Path(...).read_text()``) ends in a newline: the key is the token without it, not a
    header httpx refuses (once a ServiceUnavailableError that printed the whole key)."""
    with serve(ScriptedEngine(good), key=KEY) as url:
        client = kind(url, api_key=f"  {KEY}\n")
        if isinstance(client, AsyncClient):
            assert asyncio.run(client.ajudge(record(0))).ok
        else:
            assert client.judge(record(0)).ok


@pytest.mark.parametrize("kind", [Client, AsyncClient])
@pytest.mark.parametrize("key", [f"{KEY}\n{KEY}", f"{KEY} {KEY}", f"{KEY}\u00e9", "  \n", f"{KEY}\x00"])
def test_a_key_no_header_can_carry_is_refused_when_the_client_is_made_and_never_said(no_connect, kind, key):
    with pytest.raises(ConfigError) as caught:
        kind("http://127.0.0.1:8000", api_key=key, api_key_source="$MY_KEY")
    assert caught.value.parameter == "api_key"
    assert KEY not in str(caught.value) and KEY not in repr(caught.value.value)
    assert "$MY_KEY" in str(caught.value)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"api_key": "x" * 32}, "the service refused the key from the api_key argument"),
        (
            {"api_key": "x" * 32, "api_key_source": "$RAG_KEY"},
            "the service refused the key from $RAG_KEY",
        ),
        ({}, "no key was sent, and the service wants one: give its key with the api_key argument"),
        ({"api_key_source": "--suffice-api-key"}, "give its key with --suffice-api-key"),
    ],
)
def test_a_401_says_where_the_key_comes_from_and_never_the_key(settings, said):
    with serve(ScriptedEngine(good), key=KEY) as url, pytest.raises(AuthenticationError) as caught:
        Client(url, **settings).judge(record(0))
    assert said in str(caught.value)
    assert "x" * 32 not in str(caught.value) and KEY not in str(caught.value)

    async def main() -> None:
        await AsyncClient(url, **settings).ajudge(record(0))

    with serve(ScriptedEngine(good), key=KEY) as url, pytest.raises(AuthenticationError, match=re.escape(said)):
        asyncio.run(main())


# --- the address, checked when the client is made (the openai engine's rules: suffice.network) ----------------


@pytest.fixture
def no_connect(monkeypatch):
    """Any connection attempt fails the test: a refusal must come before anything is sent."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.mark.parametrize("kind", [Client, AsyncClient])
@pytest.mark.parametrize(
    ("url", "key", "why"),
    [
        ("127.0.0.1:8765", None, "must start with http:// or https://"),
        ("ftp://x", None, "must start with http:// or https://"),
        ("http://", None, "names no host"),
        ("http://127.0.0.1:port", None, "not a valid address"),
        ("http://user:hunter2hunter2@127.0.0.1:8000", None, "holds credentials"),
        ("https://user:hunter2hunter2@service.example", KEY, "holds credentials"),
        ("http://203.0.113.7:8000", KEY, "plain http to 203.0.113.7, another machine"),
        ("http://judge.internal:8000/", KEY, "plain http to judge.internal, another machine"),
        ("http://localhost.attacker.example:8000", KEY, "another machine"),
    ],
)
def test_a_bad_address_is_a_config_error_naming_base_url_when_the_client_is_made(no_connect, kind, url, key, why):
    with pytest.raises(ConfigError, match=why) as caught:
        kind(url, api_key=key)
    assert caught.value.parameter == "base_url"
    assert "hunter2" not in str(caught.value)
    assert KEY not in str(caught.value)


@pytest.mark.parametrize("kind", [Client, AsyncClient])
@pytest.mark.parametrize(
    ("url", "settings"),
    [
        ("http://203.0.113.7:8000", {}),  # no key to expose: a service without auth is its operator's choice
        ("http://203.0.113.7:8000", {"api_key": KEY, "allow_insecure_http": True}),
        ("https://203.0.113.7:8443", {"api_key": KEY}),
        ("http://127.0.0.1:8000", {"api_key": KEY}),
        ("http://127.8.9.10:8000", {"api_key": KEY}),
        ("http://localhost:8000", {"api_key": KEY}),
        ("http://LOCALHOST.:8000", {"api_key": KEY}),
        ("http://[::1]:8000", {"api_key": KEY}),
    ],
)
def test_a_key_goes_over_plain_http_to_this_machine_only_unless_allowed(no_connect, kind, url, settings):
    assert kind(url, **settings).base_url == url


def test_the_one_network_rule_is_the_engines_the_clients_and_the_services():
    from suffice.network import is_loopback
    from suffice.server import config as serve_config
    from suffice.serving import engine_config

    assert serve_config.is_loopback is is_loopback
    assert engine_config.refuse_plain_http.__module__ == "suffice.network"
    assert [is_loopback(h) for h in ("[::1]", "localhost.", "127.0.0.2", "0.0.0.0", "localhost.example")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_the_environments_proxy_never_sees_the_request(monkeypatch):
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with serve(ScriptedEngine(good), key=KEY) as url:
        assert Client(url, api_key=KEY).judge(record(0)).ok


def test_an_option_the_gate_does_not_take_is_the_in_process_judges_config_error_naming_it():
    with serve(ScriptedEngine(good)) as url, Client(url) as client, pytest.raises(ConfigError) as caught:
        client.judge(record(0), options={"no_such_option": 1})
    assert caught.value.parameter == "no_such_option"
    refusal = caught.value.__cause__
    assert isinstance(refusal, InvalidRequestError) and (refusal.status, refusal.field) == (422, "no_such_option")


def test_a_body_over_the_limit_is_request_too_large():
    big = {"id": "q", "question": "Who?", "chunks": [{"id": 0, "text": "x" * 4096}]}
    with (
        serve(ScriptedEngine(good), max_body_bytes=1024) as url,
        Client(url) as client,
        pytest.raises(RequestTooLargeError),
    ):
        client.judge(big)


def test_a_504_is_a_service_timeout():
    engine = Blocking()
    with (
        serve(engine, request_timeout=0.5) as url,
        Client(url) as client,
        pytest.raises(ServiceTimeoutError) as caught,
    ):
        client.judge(record(0))
    assert caught.value.status == 504


def test_a_field_json_cannot_carry_is_an_input_error_for_that_record_and_the_others_are_judged():
    bad = {"id": "odd", "question": "Who?", "chunks": [], "metadata": {"when": object()}}
    records = [record(0), bad, record(1)]
    local = Judge(ScriptedEngine(good)).judge_batch([record(0), record(1)])
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        results = client.judge_batch(records)
        alone = client.judge(bad)
    assert [comparable(r) for r in (results[0], results[2])] == [comparable(r) for r in local]
    for result in (results[1], alone):
        assert result.id == "odd" and result.verdict is None and result.error is not None
        assert (result.error.type, result.error.field) == ("InputError", "metadata")
        assert "JSON" in result.error.message
        assert result.prompt_version == local[0].prompt_version and result.model
    assert results[1].model == local[0].model  # a judged row's, not a second request's


def test_the_async_client_makes_a_field_json_cannot_carry_an_input_error_too():
    bad = {"id": "odd", "question": {1, 2}, "chunks": []}

    async def main(url: str) -> list[JudgeResult]:
        async with AsyncClient(url) as client:
            return await client.ajudge_batch([bad, record(0)])

    with serve(ScriptedEngine(good)) as url:
        results = asyncio.run(main(url))
    assert results[0].error is not None and results[0].error.field == "question"
    assert results[1].verdict is not None


def test_no_answer_within_the_clients_timeout_is_a_service_timeout():
    engine = Blocking()
    with serve(engine) as url, Client(url, timeout=0.5) as client, pytest.raises(ServiceTimeoutError):
        client.judge(record(0))


def test_no_service_is_unavailable():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(ServiceUnavailableError):
        Client(f"http://127.0.0.1:{port}").judge(record(0))


@contextlib.contextmanager
def full(engine: Held) -> Iterator[str]:
    """A service admitting 2 items, holding a request of 2 in its engine."""
    with serve(engine, max_items=2, max_chunks_per_item=1, max_pending_chunks=4) as url:
        first = threading.Thread(target=lambda: Client(url).judge_batch([record(0), record(1)]), daemon=True)
        first.start()
        assert engine.entered.wait(10)
        try:
            yield url
        finally:
            engine.release.set()
            first.join(30)


def test_a_429_is_retried_after_its_retry_after():
    engine = Held()
    with full(engine) as url:
        threading.Timer(0.5, engine.release.set).start()
        began = time.monotonic()
        result = Client(url, max_wait=10).judge(record(2))
        waited = time.monotonic() - began
    assert result.ok
    assert waited >= 4.5  # the service asked for 5 s


@pytest.mark.parametrize("settings", [{"retries": 0}, {"max_wait": 1.0}])
def test_a_429_past_the_retries_or_the_longest_wait_is_service_unavailable(settings):
    engine = Held()
    with full(engine) as url:
        began = time.monotonic()
        with pytest.raises(ServiceUnavailableError) as caught:
            Client(url, **settings).judge(record(2))
        assert time.monotonic() - began < 2
    assert caught.value.status == 429


def test_a_served_rows_cache_mark_and_cascade_come_back_as_the_in_process_result() -> None:
    """A verdict the service's cache answered says so through the client as it does in process (the mark was
    dropped: a cached answer looked freshly judged), and so does the cascade's answer."""
    from suffice.client import _result
    from suffice.results import CacheHit, Cascade
    from suffice.rows.shaping import result_row

    judge = Judge(ScriptedEngine(good), config=JudgeConfig())
    [fresh] = judge.judge_batch([record(0)])
    marked = fresh.model_copy(
        update={
            "cached": CacheHit(first_judged="2026-12-04T10:00:00+00:00"),
            "cascade": Cascade(detail="full", reason="within margin", probability=0.55, margin=0.1),
            "raw_text": None,  # the service sends neither the model's text
            "fence": None,  # nor the prompt's fence token
        }
    )
    back = _result(result_row(marked, judge.gate, "suffice", 0), judge.gate.name)
    assert back == marked
