"""Requests that would stall the service or reach it from a web page, on the real app.

The engine is scripted; where the cost of the work matters it models the real one: a tokenizer lock
every request shares, whose calls cost per text, and a generation of a fixed time per call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

import httpx
import pytest
from fastapi.testclient import TestClient

from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_USAGE, CancelledError, ConfigError
from suffice.gates.adequacy.store import builtin_dir
from suffice.judge import Judge
from suffice.prompts.fitting import fit_prompt
from suffice.records.item import Chunk, Item
from suffice.server import readiness as readiness_module
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving.base import Generation, GenerationRequest, Message, Progress
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.server.test_admission import Held
from tests.server.test_app import live_server, record

LOCAL = "http://127.0.0.1"
URL = "/v1/judge/sufficiency"


def client(engine: ScriptedEngine | None = None, **settings: object) -> TestClient:
    config = ServeConfig(
        judge=JudgeConfig(),
        gates=("sufficiency", "adequacy"),
        options={"rubric": "customer-support"},
        **settings,  # type: ignore[arg-type]
    )
    return TestClient(create_app(GateService(config, engine or ScriptedEngine(good)), config), base_url=LOCAL)


def item_of(chunks: int, text: str = "a") -> dict[str, object]:
    return {"id": "big", "question": "Who?", "chunks": [text] * chunks}


# Caps, checked while the request is read.


def test_an_item_of_thousands_of_one_letter_chunks_is_422_naming_the_field_and_the_cap():
    response = client(max_chunks_per_item=512).post(URL, json=item_of(5_000))
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "chunks"]
    assert "at most 512" in detail["msg"]


def test_a_list_item_over_the_chunk_cap_is_422_naming_its_position():
    response = client(max_chunks_per_item=8).post(URL, json=[record(0), item_of(9)])
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", 1, "chunks"]


def test_a_string_over_the_character_cap_is_422_naming_the_field_and_the_cap():
    item = {**record(0), "question": "x" * 1_001}
    response = client(max_field_chars=1_000).post(URL, json={"items": [item]})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "items", 0, "question"]
    assert "at most 1000" in detail["msg"]


def test_an_over_cap_request_never_reaches_the_tokenizer():
    engine = Tokenizing()
    http = client(engine, max_chunks_per_item=16)
    engine.texts = 0  # the start-up's window checks
    http.post(URL, json=item_of(100))
    assert engine.texts == 0


def test_the_pending_limit_counts_chunks_not_items():
    """One item of 3 chunks is held in the engine; another of 3 would pass 6 chunks pending."""
    engine = Held()
    with live_server(engine, max_chunks_per_item=4, max_pending_chunks=6) as port:
        url = f"{LOCAL}:{port}{URL}"
        first = threading.Thread(target=lambda: httpx.post(url, json=item_of(3, "Ada."), timeout=30), daemon=True)
        first.start()
        assert engine.entered.wait(10)
        try:
            status = httpx.post(url, json=item_of(3, "Ada."), timeout=10).status_code
        finally:
            engine.release.set()
            first.join(30)
    assert status == 429


@pytest.mark.parametrize("setting", ["max_chunks_per_item", "max_field_chars", "max_pending_chunks"])
def test_a_cap_below_one_is_a_config_error_naming_it(setting: str):
    with pytest.raises(ConfigError) as caught:
        ServeConfig(**{setting: 0})  # type: ignore[arg-type]
    assert caught.value.parameter == setting


def test_the_caps_are_serve_flags():
    from suffice.cli.main import build_parser
    from suffice.cli.serve_cmd import config_from_args

    argv = ["serve", "--max-chunks-per-item", "64", "--max-field-chars", "5000", "--max-pending-chunks", "9000"]
    config = config_from_args(build_parser().parse_args(argv))
    assert (config.max_chunks_per_item, config.max_field_chars, config.max_pending_chunks) == (64, 5000, 9000)


# Work stopped when its request is given up.


class Tokenizing(ScriptedEngine):
    """The real engine's costs: tokenizer calls under one lock all requests share, each costing per
    text (sleeping, as a Rust tokenizer releases the GIL), and a generation of a fixed time per call."""

    def __init__(self, per_text_s: float = 0.0, engine_s: float = 0.0) -> None:
        super().__init__(good)
        self.lock = threading.Lock()
        self.per_text_s = per_text_s
        self.engine_s = engine_s
        self.texts = 0

    def _cost(self, texts: int) -> None:
        self.texts += texts
        if self.per_text_s:
            time.sleep(self.per_text_s * texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        with self.lock:
            self._cost(len(texts))
            return super().count_tokens(texts)

    def truncate(self, text: str, max_tokens: int) -> str:
        with self.lock:
            self._cost(1)
            return super().truncate(text, max_tokens)

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        with self.lock:
            self._cost(len(messages))
            return super().prompt_tokens(messages)

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        time.sleep(self.engine_s)
        return super().generate(requests, progress, cancel)


def test_a_request_answered_504_stops_fitting_its_items():
    """Fitting 40 items takes seconds here; the request is given up at 0.3 s and its work stops."""
    engine = Tokenizing(per_text_s=0.02)
    response = client(engine, request_timeout=0.3).post(URL, json=[item_of(4, "Ada.") for _ in range(40)])
    assert response.status_code == 504
    time.sleep(0.5)  # the current step ends
    stopped_at = engine.texts
    time.sleep(1.0)
    assert engine.texts == stopped_at


def test_fitting_a_withdrawn_request_raises_cancelled():
    engine = ScriptedEngine(good)
    judge = Judge(engine, "sufficiency")
    cancel = threading.Event()
    cancel.set()
    item = Item(id="q", question="Who?", chunks=(Chunk(id=0, text="Ada."),))
    gate = judge.gate
    with pytest.raises(CancelledError):
        fit_prompt(
            engine,
            gate.template,
            item,
            judge.config,
            gate.constraint_for,
            gate.system_context(item),
            gate.user_context(item),
            cancel,
        )


def test_a_withdrawn_batch_raises_cancelled_before_its_generation():
    engine = ScriptedEngine(good)
    judge = Judge(engine, "sufficiency")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        judge.judge_batch([record(0)], cancel=cancel)
    assert engine.calls == []


# A large request does not stall a small one.

ENGINE_S = 1.0


def small_latency(port: int) -> float:
    began = time.perf_counter()
    assert httpx.post(f"{LOCAL}:{port}{URL}", json=record(0), timeout=60).status_code == 200
    return time.perf_counter() - began


def delay_beside(big: object, **settings: object) -> tuple[float, float]:
    """The small request's latency alone and beside ``big`` (sent first, measured once it tokenizes)."""
    engine = Tokenizing(per_text_s=20e-6, engine_s=ENGINE_S)
    with live_server(engine, request_timeout=120, **settings) as port:
        alone = small_latency(port)
        sender = threading.Thread(target=lambda: httpx.post(f"{LOCAL}:{port}{URL}", json=big, timeout=120), daemon=True)
        before = engine.texts
        sender.start()
        # Until the big request is in its fitting (or answered without one).
        deadline = time.monotonic() + 60
        while sender.is_alive() and engine.texts == before and time.monotonic() < deadline:
            time.sleep(0.01)
        beside = small_latency(port)
        sender.join(120)
    return alone, beside


@pytest.mark.serial
def test_an_item_of_two_hundred_thousand_chunks_does_not_stall_a_small_request():
    alone, beside = delay_beside(item_of(200_000))
    assert beside < 2 * alone, f"alone {alone:.2f} s, beside {beside:.2f} s"


@pytest.mark.serial
def test_a_request_of_the_largest_allowed_size_delays_a_small_one_by_less_than_its_engine_time():
    caps = {"max_items": 16, "max_chunks_per_item": 512, "max_pending_chunks": 16 * 513 + 2}
    big = [{**item_of(512, "Ada wrote it."), "id": f"big{i}"} for i in range(16)]
    alone, beside = delay_beside(big, **caps)
    assert beside < 2 * alone, f"alone {alone:.2f} s, beside {beside:.2f} s"


# /ready: cached, and one probe at a time.


class SlowProbe(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__(good)
        self.probes = 0

    def check_alive(self) -> None:
        self.probes += 1
        time.sleep(0.02)


def test_three_hundred_concurrent_ready_calls_are_ready_and_probe_once(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(readiness_module, "PROBE_TIMEOUT", 1.0)
    engine = SlowProbe()
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",))
    app = create_app(GateService(config, engine), config)

    async def crowd() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as http:
            answers = await asyncio.gather(*(http.get("/ready") for _ in range(300)))
        return [answer.status_code for answer in answers]

    statuses = asyncio.run(crowd())
    assert set(statuses) == {200}
    assert engine.probes <= 2


# Reached from a web page.


def test_a_text_plain_form_post_is_415():
    body = b'{"id": "q0", "question": "Who?", "chunks": ["Ada."]}'
    response = client().post(URL, content=body, headers={"content-type": "text/plain"})
    assert response.status_code == 415


def test_json_with_a_charset_is_read():
    body = b'{"id": "q0", "question": "Who?", "chunks": ["Ada."]}'
    response = client().post(URL, content=body, headers={"content-type": "application/json; charset=utf-8"})
    assert response.status_code == 200


def test_a_host_header_of_another_name_is_refused():
    """DNS rebinding: the page's own name resolves to 127.0.0.1, and the browser sends that name."""
    response = client().post(URL, json=record(0), headers={"host": "attacker.example:8000"})
    assert response.status_code == 400


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1", "[::1]:8000"])
def test_loopback_host_headers_are_served(host: str):
    assert client().get("/health", headers={"host": host}).status_code == 200


def test_an_allowed_host_is_served():
    http = client(allowed_hosts=("judge.internal",))
    assert http.get("/health", headers={"host": "judge.internal:8000"}).status_code == 200


def test_serving_without_a_key_on_a_public_address_is_refused_naming_the_parameter():
    with pytest.raises(ConfigError) as caught:
        ServeConfig(host="0.0.0.0")
    assert caught.value.parameter == "api_key_file"
    assert "insecure_no_auth" in str(caught.value)


def test_serving_without_a_key_on_a_public_address_is_served_when_asked_by_name():
    assert ServeConfig(host="0.0.0.0", insecure_no_auth=True).host == "0.0.0.0"


def test_serve_without_a_key_on_a_public_address_is_a_usage_error_before_the_engine_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    import suffice.server.service as service
    from suffice.cli.main import build_parser

    def no_engine(config: object) -> None:
        raise AssertionError("the engine was started")

    monkeypatch.setattr(service, "make_engine", no_engine)
    args = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--port", "0", "--gate", "sufficiency"])
    assert args.run(args) == EXIT_USAGE
    assert "--insecure-no-auth" in capsys.readouterr().err


# What answers tell.


def test_a_500_tells_an_id_not_the_exception_and_the_log_has_both(caplog: pytest.LogCaptureFixture):
    class Failing(GateService):
        def judge(self, *args: object, **kwargs: object):  # type: ignore[override]
            raise RuntimeError("cannot open /srv/private/weights.bin")

    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",))
    http = TestClient(create_app(Failing(config, ScriptedEngine(good)), config), base_url=LOCAL)
    with caplog.at_level(logging.ERROR, logger="suffice.server"):
        response = http.post(URL, json=record(0))
    assert response.status_code == 500
    assert "/srv/private" not in response.text
    error_id = response.json()["error_id"]
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and "/srv/private" in str(logged[0].exc_info[1])


def test_an_unknown_rubric_names_the_rubric_and_the_known_ones_not_the_folder():
    response = client().post("/v1/judge/adequacy?rubric=no-such-rubric", json=record(0))
    message = response.json()["detail"][0]["msg"]
    assert response.status_code == 422
    assert "no-such-rubric" in message and "customer-support" in message
    assert str(builtin_dir()) not in message


def test_a_records_own_unknown_rubric_names_the_rubric_not_the_folder():
    """The same name as a record's ``rubric`` field gives an error row, not a 422: trimmed as the option is."""
    response = client().post("/v1/judge/adequacy", json={**record(0), "rubric": "no-such-rubric"})
    error = response.json()["results"][0]["error"]
    assert response.status_code == 200
    assert error["field"] == "rubric"
    assert "no-such-rubric" in error["message"] and "customer-support" in error["message"]
    assert str(builtin_dir()) not in response.text


class AtAPath(ScriptedEngine):
    model_id = "/srv/models/private/Qwen3-8B"


def test_ready_names_the_model_not_its_folder():
    assert client(AtAPath(good)).get("/ready").json()["model"] == "Qwen3-8B"


def test_ready_names_a_hub_model_as_it_is():
    class Hub(ScriptedEngine):
        model_id = "Qwen/Qwen3-8B"

    assert client(Hub(good)).get("/ready").json()["model"] == "Qwen/Qwen3-8B"


def test_no_page_loads_scripts_from_a_cdn():
    http = client()
    for path in ("/docs", "/redoc"):
        assert "cdn" not in http.get(path).text
    assert http.get("/openapi.json").status_code == 200
