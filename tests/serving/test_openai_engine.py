"""The openai engine against a scripted server (``httpx.MockTransport``): no model, no network.

The fake server tokenizes by character (token id = code point, end of sequence = 0)
and answers every segment with the longest piece of a fixed output that the
segment's regex accepts, the way a server that enforces the constraint would.  The
real server is tested in tests/serving/test_openai_server.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from suffice.batch import judge_file
from suffice.config import JudgeConfig
from suffice.exceptions import (
    CancelledError,
    ConfigError,
    ConstraintNotEnforcedError,
    EngineDeadError,
    EngineError,
    EngineFatalError,
    EngineUnreachableError,
    OutputMismatchError,
    PartialBatchError,
)
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.gates.sufficiency.grammar import HEAD_PREFIX
from suffice.grammars.constraint import Constraint, Segment
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest, OnRecords
from suffice.serving.engine_config import EngineConfig
from suffice.serving.openai import OpenAIEngine, client
from suffice.serving.openai.engine import REFUSED_IN_A_ROW
from suffice.serving.weights import cache_root
from tests.batch.test_runner import write_lines
from tests.grammars.segments import cut_back_constraint
from tests.test_judge import GOOD, rec
from tests.vllm_server import free_port

URL = "https://fake-vllm:8000"
EOS = 0
#: Ends the chat part of a prompt: what follows it was generated.
MARK = "\ue000"  # beyond any real vocabulary
P_CHOSEN = 0.75

Reply = httpx.Response | Exception | None


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids if i != EOS)


def chat(messages: list[dict[str, str]]) -> str:
    return "".join(f"<{m['role']}>{m['content']}" for m in messages) + MARK


class FakeServer:
    """A vLLM OpenAI-compatible server in miniature; ``fail(path, body)`` may answer first."""

    def __init__(
        self,
        answer: Callable[[str], str] = lambda chat_text: "yes",
        *,
        models: list[dict[str, object]] | None = None,
        fail: Callable[[str, dict[str, object] | None], Reply] | None = None,
        ignore_constraint: bool = False,
        eos_in_ids: bool = True,
        finish_reason: str = "stop",
        delay: float = 0.0,
        tokens: Callable[[str], list[int]] = encode,
        metrics: str | None = None,
        policy: str | None = None,
    ) -> None:
        self.answer = answer
        #: ``/metrics``'s text and ``/server_info``'s scheduling policy (None: no such route).
        self.metrics = metrics
        self.policy = policy
        #: How the server tokenizes a text (``/tokenize`` with a prompt): by code point.
        self.tokens = tokens
        self.models = models if models is not None else [{"id": "smollm2", "root": "/m", "max_model_len": 1_000_000}]
        self.fail = fail
        self.ignore_constraint = ignore_constraint
        self.eos_in_ids = eos_in_ids
        self.finish_reason = finish_reason
        self.delay = delay
        self.calls: list[tuple[str, dict[str, object] | None]] = []
        self.headers: list[httpx.Headers] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def paths(self) -> list[str]:
        return [path for path, _ in self.calls]

    def completions(self) -> list[dict[str, object]]:
        return [body for path, body in self.calls if path == "/v1/completions" and body is not None]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.calls.append((path, body))
            self.headers.append(request.headers)
        if self.fail is not None:
            reply = self.fail(path, body)
            if isinstance(reply, Exception):
                raise reply
            if reply is not None:
                return reply
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": self.models})
        if path == "/health":
            return httpx.Response(200)
        if path == "/metrics" and self.metrics is not None:
            return httpx.Response(200, text=self.metrics)
        if path == "/server_info" and self.policy is not None:
            return httpx.Response(200, json={"vllm_config": {"scheduler_config": {"policy": self.policy}}})
        if path in ("/metrics", "/server_info"):
            return httpx.Response(404, json={"detail": "Not Found"})
        assert body is not None
        if path == "/tokenize":
            ids = encode(chat(body["messages"])) if "messages" in body else self.tokens(body["prompt"])
            return httpx.Response(200, json={"count": len(ids), "max_model_len": 10**6, "tokens": ids})
        if path == "/detokenize":
            return httpx.Response(200, json={"prompt": decode(body["tokens"])})
        if path == "/v1/completions":
            return self._complete(body)
        return httpx.Response(404, json={"detail": "Not Found"})

    def _complete(self, body: dict[str, object]) -> httpx.Response:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            prompt = decode(body["prompt"])  # type: ignore[arg-type]
            chat_text, mark, done = prompt.rpartition(MARK)
            if not mark:  # a prompt from a local tokenizer: nothing generated is told apart
                chat_text, done = prompt, ""
            full = self.answer(chat_text)
            if self.ignore_constraint:  # whatever the model says, prefilled text or not
                piece = full
            else:
                assert full.startswith(done), (full, done)
                rest = full[len(done) :]
                regex = re.compile(body["structured_outputs"]["regex"])  # type: ignore[index]
                ends = (end for end in range(len(rest), -1, -1) if regex.fullmatch(rest[:end]))
                piece = rest[: next(ends, len(rest))]
            ids = encode(piece) + ([EOS] if self.eos_in_ids else [])
            choice: dict[str, object] = {
                "index": 0,
                "text": piece,
                "finish_reason": self.finish_reason,
                "stop_reason": None,
                "token_ids": ids,
                "logprobs": None,
            }
            if body.get("logprobs"):
                tokens = [*piece] + ([""] if self.eos_in_ids else [])
                choice["logprobs"] = {
                    "text_offset": list(range(len(tokens))),
                    "tokens": tokens,
                    "token_logprobs": [math.log(P_CHOSEN)] * len(tokens),
                    "top_logprobs": [
                        {t: math.log(P_CHOSEN), ("f" if t == "t" else "t"): math.log(1 - P_CHOSEN)} for t in tokens
                    ],
                }
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}  # type: ignore[arg-type]
            return httpx.Response(200, json={"id": "cmpl-1", "model": "smollm2", "choices": [choice], "usage": usage})
        finally:
            with self.lock:
                self.in_flight -= 1


def make(server: FakeServer, **settings: object) -> OpenAIEngine:
    config = EngineConfig(kind="openai", base_url=URL, **settings)  # type: ignore[arg-type]
    return OpenAIEngine(config, transport=httpx.MockTransport(server))


def one_segment(pattern: str = r"[a-z]+") -> Constraint:
    return Constraint(pattern=pattern, max_bytes=20, key="word")


def two_segments() -> Constraint:
    """``{"a":`` then a boolean and ``}``; log-probabilities for the second part only."""
    tail = Segment(r"(true|false)\}", max_bytes=6, key="tail", logprobs=True)
    return Constraint(
        pattern=r'\{"a":(true|false)\}',
        max_bytes=11,
        key="object",
        head=Segment(r'\{"a":', max_bytes=5, key="head"),
        continuation=lambda text: tail if text == '{"a":' else None,
    )


def request(content: str = "Is it?", constraint: Constraint | None = None) -> GenerationRequest:
    return GenerationRequest(({"role": "user", "content": content},), constraint or one_segment())


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "BACKOFF_SECONDS", 0.0)


def status(code: int, message: str = "server says no", headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(code, headers=headers, json={"error": {"message": message, "type": "x", "code": code}})


def completions_fail(times: int, reply: Callable[[], Reply]) -> Callable[[str, object], Reply]:
    """A ``fail`` hook: the first ``times`` completion calls get ``reply()``."""
    count = {"n": 0}

    def fail(path: str, body: object) -> Reply:
        if path != "/v1/completions":
            return None
        count["n"] += 1
        return reply() if count["n"] <= times else None

    return fail


# -- the request ----------------------------------------------------------------------


def test_the_constraint_is_sent_in_the_structured_outputs_field():
    server = FakeServer()
    make(server).generate([request()])
    assert server.completions()[0]["structured_outputs"] == {"regex": "[a-z]+"}


def test_no_legacy_guided_field_is_sent():
    server = FakeServer()
    make(server).generate([request()])
    assert not [key for key in server.completions()[0] if key.startswith("guided")]


def test_requests_are_greedy_seeded_and_ask_for_token_ids():
    server = FakeServer()
    make(server, seed=7).generate([request()])
    body = server.completions()[0]
    assert (body["temperature"], body["seed"], body["return_token_ids"]) == (0.0, 7, True)


def test_the_prompt_is_the_servers_chat_templated_ids():
    server = FakeServer()
    make(server).generate([request("Hello?")])
    assert server.completions()[0]["prompt"] == encode("<user>Hello?" + MARK)


def test_max_tokens_is_the_segments_worst_case():
    server = FakeServer()
    make(server).generate([request()])
    assert server.completions()[0]["max_tokens"] == 21  # 20 bytes + end of sequence


def test_the_text_is_the_servers_answer():
    [generation] = make(FakeServer(lambda c: "yes")).generate([request()])
    assert generation.text == "yes"


def test_the_key_is_sent_as_a_bearer_token(tmp_path: Path):
    key = tmp_path / "key"
    key.write_text("  s3cret\n")
    server = FakeServer()
    make(server, api_key_file=key)
    assert server.headers[0]["authorization"] == "Bearer s3cret"


# -- segments ---------------------------------------------------------------------------


def test_each_segment_continues_with_the_prompt_and_the_generated_ids():
    server = FakeServer(lambda c: '{"a":true}')
    make(server).generate([request("Q", two_segments())])
    first, second = server.completions()
    assert second["prompt"] == [*first["prompt"], *encode('{"a":')]  # type: ignore[misc]


def test_the_segments_make_up_the_whole_text():
    [generation] = make(FakeServer(lambda c: '{"a":true}')).generate([request("Q", two_segments())])
    assert generation.text == '{"a":true}'


def test_the_next_segment_gets_its_own_pattern():
    server = FakeServer(lambda c: '{"a":true}')
    make(server).generate([request("Q", two_segments())])
    assert [b["structured_outputs"] for b in server.completions()] == [
        {"regex": r'\{"a":'},
        {"regex": r"(true|false)\}"},
    ]


def test_log_probabilities_are_asked_only_for_segments_that_need_them():
    server = FakeServer(lambda c: '{"a":true}')
    make(server, top_logprobs=5).generate([request("Q", two_segments())])
    assert [b.get("logprobs") for b in server.completions()] == [None, 5]


def test_a_server_that_leaves_the_end_token_out_keeps_every_generated_id():
    server = FakeServer(lambda c: '{"a":true}', eos_in_ids=False)
    make(server).generate([request("Q", two_segments())])
    first, second = server.completions()
    assert second["prompt"] == [*first["prompt"], *encode('{"a":')]  # type: ignore[misc]


#: Any list of digits: the scripted server's answer decides what is listed.
ANY_LIST = r"[0-9](,[0-9])*\]"


def out_of_order_then_in_order() -> Callable[[str], str]:
    answers = iter(["[2,1]", "[2,3]"])
    return lambda chat_text: next(answers)


def test_a_speculative_segment_cut_back_continues_from_the_kept_ids():
    server = FakeServer(out_of_order_then_in_order())
    make(server).generate([request("Q", cut_back_constraint(ANY_LIST))])
    first, second = server.completions()
    assert second["prompt"] == [*first["prompt"], *encode("2")]  # type: ignore[misc]


def test_a_speculative_segment_cut_back_leaves_only_the_kept_text():
    engine = make(FakeServer(out_of_order_then_in_order()))
    [generation] = engine.generate([request("Q", cut_back_constraint(ANY_LIST))])
    assert generation.text == "[2,3]"


def test_completion_tokens_count_every_generated_id():
    [generation] = make(FakeServer(lambda c: '{"a":true}')).generate([request("Q", two_segments())])
    assert generation.completion_tokens == len('{"a":') + 1 + len("true}") + 1  # each with its end token


def test_prompt_tokens_are_the_prompt_ids():
    [generation] = make(FakeServer()).generate([request("Hello?")])
    assert generation.prompt_tokens == len("<user>Hello?" + MARK)


# -- log-probabilities ------------------------------------------------------------------


def test_tokens_stay_aligned_with_the_text():
    [generation] = make(FakeServer(lambda c: '{"a":true}')).generate([request("Q", two_segments())])
    assert generation.tokens == ('{"a":', "t", "r", "u", "e", "}")  # a stand-in for the first segment


def test_top_logprobs_are_mapped_by_token_text():
    [generation] = make(FakeServer(lambda c: '{"a":true}')).generate([request("Q", two_segments())])
    assert generation.top_logprobs is not None
    assert generation.top_logprobs[1] == pytest.approx({"t": math.log(0.75), "f": math.log(0.25)})


def test_no_log_probabilities_when_they_are_turned_off():
    [generation] = make(FakeServer(lambda c: '{"a":true}'), top_logprobs=0).generate([request("Q", two_segments())])
    assert generation.top_logprobs is None


def test_the_judge_gets_decision_probabilities_through_the_server():
    text = json.dumps(GOOD, separators=(",", ":"))
    judge = Judge(make(FakeServer(lambda c: text)), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.verdict is not None
    assert result.verdict.p_sufficient == pytest.approx(P_CHOSEN)


def test_the_judge_reads_the_verdict_generated_segment_by_segment():
    text = json.dumps(GOOD, separators=(",", ":"))
    judge = Judge(make(FakeServer(lambda c: text)), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.raw_text == text


# -- the constraint is verified -------------------------------------------------------


def test_text_outside_the_constraint_stops_the_run():
    engine = make(FakeServer(lambda c: "Hello, World!", ignore_constraint=True))
    with pytest.raises(ConstraintNotEnforcedError, match="structured-outputs-config"):
        engine.generate([request()])


def test_the_error_names_the_segment_of_the_constraint():
    engine = make(FakeServer(lambda c: "Hello, World!", ignore_constraint=True))
    with pytest.raises(ConstraintNotEnforcedError) as caught:
        engine.generate([request()])
    assert caught.value.segment == "word"


def test_the_error_quotes_the_text():
    engine = make(FakeServer(lambda c: "Hello, World!", ignore_constraint=True))
    with pytest.raises(ConstraintNotEnforcedError, match="Hello, World!"):
        engine.generate([request()])


def test_a_judge_stops_on_a_server_that_ignores_the_constraint():
    judge = Judge(make(FakeServer(lambda c: "Sure! Here it is.", ignore_constraint=True)), SufficiencyGate())
    with pytest.raises(ConstraintNotEnforcedError):
        judge.judge_batch([rec(0), rec(1)])


def unconstrained_until_max_tokens(path: str, body: dict[str, object] | None) -> Reply:
    """A ``fail`` hook: a server that ignores the constraint and talks on until ``max_tokens``."""
    if path != "/v1/completions" or body is None:
        return None
    count = int(body["max_tokens"])  # type: ignore[call-overload]
    piece = ("Sure! The chunks answer it. " * count)[:count]
    choice = {"index": 0, "text": piece, "finish_reason": "length", "token_ids": encode(piece), "logprobs": None}
    return httpx.Response(200, json={"choices": [choice]})


def test_text_outside_the_constraint_cut_off_at_max_tokens_stops_the_run():
    engine = make(FakeServer(fail=unconstrained_until_max_tokens))
    with pytest.raises(ConstraintNotEnforcedError):
        engine.generate([request()])


def test_a_judge_stops_on_a_server_that_ignores_the_constraint_until_max_tokens():
    judge = Judge(make(FakeServer(fail=unconstrained_until_max_tokens)), SufficiencyGate())
    with pytest.raises(ConstraintNotEnforcedError):
        judge.judge_batch([rec(0), rec(1)])


def test_a_cut_off_inside_a_character_at_the_bound_is_still_a_cut_off():
    piece = "\u00e9\ufffd"  # é, then the first byte of another: 3 bytes of the 4 allowed

    def cut(path: str, body: object) -> Reply:
        if path != "/v1/completions":
            return None
        choice = {"text": piece, "finish_reason": "length", "token_ids": [1, 2, 3], "logprobs": None}
        return httpx.Response(200, json={"choices": [choice]})

    constraint = Constraint(pattern="\u00e9{1,2}", max_bytes=4, key="accents")
    [generation] = make(FakeServer(fail=cut)).generate([request("Q", constraint)])
    assert generation.finish_reason == "length"


def test_a_cut_off_segment_is_returned_as_cut_off():
    [generation] = make(FakeServer(lambda c: "Hello, World!", finish_reason="length")).generate([request()])
    assert generation.finish_reason == "length"


def test_a_cut_off_segment_ends_the_request():
    server = FakeServer(lambda c: '{"a":true}', finish_reason="length")
    make(server).generate([request("Q", two_segments())])
    assert len(server.completions()) == 1


def test_an_aborted_request_is_an_engine_error():
    engine = make(FakeServer(finish_reason="abort"))
    with pytest.raises(EngineError, match="abort"):
        engine.generate([request()])


def test_an_aborted_request_is_not_fatal():
    engine = make(FakeServer(finish_reason="abort"))
    with pytest.raises(EngineError) as caught:
        engine.generate([request()])
    assert not isinstance(caught.value, EngineFatalError)


# -- retries and failures -------------------------------------------------------------


def test_a_busy_server_is_retried_until_it_answers():
    server = FakeServer(fail=completions_fail(2, lambda: status(503)))
    [generation] = make(server, retries=3).generate([request()])
    assert generation.text == "yes"


def test_each_retry_is_one_more_call():
    server = FakeServer(fail=completions_fail(2, lambda: status(503)))
    make(server, retries=3).generate([request()])
    assert len(server.completions()) == 3


def test_too_many_requests_is_retried():
    server = FakeServer(fail=completions_fail(1, lambda: status(429, headers={"Retry-After": "0"})))
    [generation] = make(server, retries=1).generate([request()])
    assert generation.text == "yes"


def waits_before_retrying(monkeypatch: pytest.MonkeyPatch, retry_after: str) -> list[float]:
    """The seconds the engine waited before its one retry of a 429 with ``Retry-After``."""
    waits: list[float] = []
    # The engine's waits only (the fake server sleeps too).
    monkeypatch.setattr(client, "time", SimpleNamespace(sleep=waits.append, monotonic=time.monotonic))
    server = FakeServer(fail=completions_fail(1, lambda: status(429, headers={"Retry-After": retry_after})))
    make(server).generate([request()])
    return waits


def test_a_retry_after_the_server_asks_for_is_waited(monkeypatch: pytest.MonkeyPatch):
    assert waits_before_retrying(monkeypatch, "7") == [7.0]


def test_a_retry_after_longer_than_the_cap_waits_the_cap_not_the_short_backoff(monkeypatch: pytest.MonkeyPatch):
    assert waits_before_retrying(monkeypatch, "120") == [client.MAX_RETRY_AFTER]


def test_a_server_error_after_every_retry_fails_the_request():
    server = FakeServer(fail=completions_fail(99, lambda: status(500, "boom")))
    with pytest.raises(EngineError, match="boom") as caught:
        make(server, retries=2).generate([request()])
    assert not isinstance(caught.value, EngineFatalError)


def test_a_bad_request_quotes_the_servers_message():
    server = FakeServer(fail=completions_fail(99, lambda: status(400, "prompt is too long for this model")))
    with pytest.raises(EngineError, match="prompt is too long for this model"):
        make(server).generate([request()])


def test_a_bad_request_is_not_retried():
    server = FakeServer(fail=completions_fail(99, lambda: status(400)))
    with pytest.raises(EngineError):
        make(server, retries=3).generate([request()])
    assert len(server.completions()) == 1


def test_a_refused_key_is_fatal_and_names_the_key_file(tmp_path: Path):
    key = tmp_path / "wrong-key"
    key.write_text("nope")
    server = FakeServer(fail=completions_fail(99, lambda: httpx.Response(401, json={"error": "Unauthorized"})))
    engine = make(server, api_key_file=key)
    with pytest.raises(EngineFatalError, match="--api-key-file"):
        engine.generate([request()])


def test_a_refused_key_at_start_names_the_file(tmp_path: Path):
    key = tmp_path / "wrong-key"
    key.write_text("nope")
    server = FakeServer(fail=lambda path, body: httpx.Response(401, json={"error": "Unauthorized"}))
    with pytest.raises(EngineFatalError, match="wrong-key"):
        make(server, api_key_file=key)


def test_a_lost_connection_is_retried():
    fail = completions_fail(1, lambda: httpx.ConnectError("connection reset"))
    [generation] = make(FakeServer(fail=fail), retries=1).generate([request()])
    assert generation.text == "yes"


def test_a_server_that_goes_away_is_dead_after_the_retries():
    engine = make(FakeServer(fail=completions_fail(99, lambda: httpx.ConnectError("Connection refused"))), retries=1)
    with pytest.raises(EngineDeadError, match="rerun to resume"):
        engine.generate([request()])


def test_a_connect_timeout_after_the_retries_is_a_dead_server():
    engine = make(FakeServer(fail=completions_fail(99, lambda: httpx.ConnectTimeout("timed out"))), retries=1)
    with pytest.raises(EngineDeadError):
        engine.generate([request()])


def test_a_read_timeout_after_the_retries_fails_that_request_only():
    """Connected but slow is not gone: the request fails and the server stays in use."""
    engine = make(FakeServer(fail=completions_fail(99, lambda: httpx.ReadTimeout("timed out"))), retries=1)
    with pytest.raises(EngineError) as caught:
        engine.generate([request()])
    assert not isinstance(caught.value, EngineDeadError)


def test_the_dead_server_was_tried_once_more_than_the_retries():
    server = FakeServer(fail=completions_fail(99, lambda: httpx.ConnectError("Connection refused")))
    with pytest.raises(EngineDeadError):
        make(server, retries=1).generate([request()])
    assert len(server.completions()) == 2


def test_a_refused_connection_at_start_is_a_dead_server():
    config = EngineConfig(kind="openai", base_url=f"http://127.0.0.1:{free_port()}", retries=1)
    with pytest.raises(EngineDeadError, match="cannot be reached"):
        OpenAIEngine(config)


def test_check_alive_passes_while_the_server_is_healthy():
    server = FakeServer()
    make(server).check_alive()
    assert server.paths()[-1] == "/health"


def test_check_alive_raises_when_the_server_is_gone():
    gone = {"now": False}
    server = FakeServer(fail=lambda path, body: httpx.ConnectError("refused") if gone["now"] else None)
    engine = make(server, retries=0)
    gone["now"] = True
    with pytest.raises(EngineDeadError):
        engine.check_alive()


def test_check_alive_raises_when_the_server_reports_its_engine_dead():
    server = FakeServer(fail=lambda path, body: httpx.Response(503) if path == "/health" else None)
    with pytest.raises(EngineDeadError):
        make(server, retries=0).check_alive()


# -- the judge isolates a failing request ---------------------------------------------


def bad_question(path: str, body: dict[str, object] | None) -> Reply:
    if path == "/v1/completions" and body is not None and "Question 1?" in decode(body["prompt"]):  # type: ignore[arg-type]
        return status(400, "this one is poisoned")
    return None


def test_the_judge_isolates_a_request_the_server_refuses():
    text = json.dumps(GOOD, separators=(",", ":"))
    judge = Judge(make(FakeServer(lambda c: text, fail=bad_question)), SufficiencyGate())
    results = judge.judge_batch([rec(0), rec(1), rec(2)])
    assert [r.ok for r in results] == [True, False, True]


def test_the_refused_requests_error_quotes_the_server():
    text = json.dumps(GOOD, separators=(",", ":"))
    judge = Judge(make(FakeServer(lambda c: text, fail=bad_question)), SufficiencyGate())
    results = judge.judge_batch([rec(0), rec(1), rec(2)])
    assert results[1].error is not None
    assert "this one is poisoned" in results[1].error.message


def test_a_batch_whose_requests_fail_on_their_own_carries_every_outcome():
    with pytest.raises(PartialBatchError) as caught:
        make(FakeServer(fail=bad_question)).generate([request("Question 0?"), request("Question 1?")])
    assert [type(o).__name__ for o in caught.value.outcomes] == ["Generation", "ServerError"]


def test_requests_that_succeeded_are_not_generated_again_when_the_batch_is_split():
    text = json.dumps(GOOD, separators=(",", ":"))
    server = FakeServer(lambda c: text, fail=bad_question)
    Judge(make(server), SufficiencyGate()).judge_batch([rec(0), rec(1), rec(2)])
    # A request's first segment: its prompt ends with the prefilled opening.
    starts = [b for b in server.completions() if decode(b["prompt"]).endswith(MARK + HEAD_PREFIX)]  # type: ignore[arg-type]
    assert sum("Question 0?" in decode(b["prompt"]) for b in starts) == 1  # type: ignore[arg-type]


def test_progress_counts_each_record_once_when_the_batch_is_split():
    text = json.dumps(GOOD, separators=(",", ":"))
    done: list[int] = []
    Judge(make(FakeServer(lambda c: text, fail=bad_question)), SufficiencyGate()).judge_batch(
        [rec(0), rec(1), rec(2)], progress=OnRecords(done.append)
    )
    assert sum(done) == 3


# -- concurrency ----------------------------------------------------------------------


def numbered(chat_text: str) -> str:
    return re.findall(r"\d+", chat_text)[-1]


def test_calls_in_flight_never_exceed_max_concurrency():
    server = FakeServer(numbered, delay=0.05)
    make(server, max_concurrency=2).generate([request(f"n {i}", one_segment("[0-9]+")) for i in range(8)])
    assert server.max_in_flight == 2


def test_the_bound_is_shared_by_every_caller():
    server = FakeServer(numbered, delay=0.05)
    engine = make(server, max_concurrency=2)
    threads = [
        threading.Thread(target=engine.generate, args=([request(f"n {i}", one_segment("[0-9]+"))],)) for i in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert server.max_in_flight == 2


def test_results_come_back_in_input_order():
    server = FakeServer(numbered, delay=0.01)
    generations = make(server, max_concurrency=4).generate([request(f"n {i}", one_segment("[0-9]+")) for i in range(8)])
    assert [g.text for g in generations] == [str(i) for i in range(8)]


def test_progress_is_called_once_per_request():
    done: list[int] = []
    requests = [request(f"n {i}", one_segment("[0-9]+")) for i in range(5)]
    make(FakeServer(numbered)).generate(requests, OnRecords(done.append))
    assert done == [1] * 5


# -- scheduling: the in-process engine's order and admission rules, on a server ------


def cache_info(blocks: int, block_size: int, engines: int = 1) -> str:
    """``/metrics`` as vLLM writes its cache configuration (one line per engine)."""
    lines = ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig"]
    lines += [
        f'vllm:cache_config_info{{block_size="{block_size}",cache_dtype="auto",engine="{e}",'
        f'num_gpu_blocks="{blocks}",prefix_caching_hash_algo="sha256"}} 1.0'
        for e in range(engines)
    ]
    return "\n".join(lines) + "\n"


def test_every_segment_of_a_request_carries_its_requests_priority():
    server = FakeServer(lambda chat_text: '{"a":true}', policy="priority")
    make(server, max_concurrency=1).generate([request(f"n {i}", two_segments()) for i in range(3)])
    priorities = [body["priority"] for body in server.completions()]
    assert priorities == [0, 0, 1, 1, 2, 2]


def test_requests_are_ranked_in_the_order_they_started_across_calls():
    server = FakeServer(numbered, policy="priority")
    engine = make(server, max_concurrency=1)
    engine.generate([request("n 1", one_segment("[0-9]+"))])
    engine.generate([request("n 2", one_segment("[0-9]+"))])
    assert [body["priority"] for body in server.completions()] == [0, 1]


def test_a_server_that_schedules_first_come_first_served_gets_no_priority_and_is_named(
    caplog: pytest.LogCaptureFixture,
):
    server = FakeServer(numbered, policy="fcfs", metrics=cache_info(10, 16))
    with caplog.at_level(logging.WARNING):
        engine = make(server)
    engine.generate([request("n 1", one_segment("[0-9]+"))])
    assert "priority" not in server.completions()[0]
    assert engine.scheduling.notes == [
        f"the server at {URL} schedules fcfs, not by priority: a verdict's continuations may wait behind new "
        "prompts and compute theirs again under load (start it with --scheduling-policy priority)"
    ]
    assert "schedules fcfs" in caplog.text


def test_a_server_that_says_nothing_is_said_to_be_unknown():
    engine = make(FakeServer())
    assert engine.scheduling.policy is None and engine.scheduling.capacity is None
    assert "does not say how it schedules" in engine.scheduling.notes[0]
    assert "does not report its KV cache" in engine.scheduling.notes[1]


def test_a_server_that_says_both_leaves_nothing_to_say():
    engine = make(FakeServer(policy="priority", metrics=cache_info(10, 16, engines=2)))
    assert engine.scheduling.notes == []
    assert engine.scheduling.capacity == 2 * 10 * 16


def test_a_server_that_refuses_priorities_is_asked_again_without_them():
    def refuse(path: str, body: dict[str, object] | None) -> Reply:
        if path == "/v1/completions" and body is not None and "priority" in body:
            return httpx.Response(400, json={"message": "Got priority 1 but Priority scheduling is not enabled."})
        return None

    server = FakeServer(numbered, fail=refuse)
    engine = make(server, max_concurrency=1)
    generations = engine.generate([request(f"n {i}", one_segment("[0-9]+")) for i in range(3)])
    assert [g.text for g in generations] == ["0", "1", "2"]
    sent = server.completions()
    assert ["priority" in body for body in sent] == [True, False, False, False]
    assert "refused request priorities" in engine.scheduling.notes[-1]


def test_requests_start_only_while_the_servers_kv_cache_holds_them():
    # A request holds its prompt (70 ids, 6 shared with the one before) and its bound (20): 90 + 84 fit in 200
    # tokens, a third does not.  Every output as long as the bound: what finished teaches no smaller estimate.
    server = FakeServer(lambda chat_text: numbered(chat_text) * 20, delay=0.05, metrics=cache_info(20, 10))
    requests = [request(f"{i} " + "x" * 60, one_segment("[0-9]+")) for i in range(8)]
    generations = make(server, max_concurrency=8).generate(requests)
    assert [g.text for g in generations] == [str(i) * 20 for i in range(8)]
    assert server.max_in_flight == 2


def test_without_a_known_cache_the_concurrency_is_the_only_bound():
    server = FakeServer(numbered, delay=0.05)
    make(server, max_concurrency=8).generate([request(f"{i} " + "x" * 60, one_segment("[0-9]+")) for i in range(8)])
    assert server.max_in_flight > 2


def test_a_request_larger_than_the_cache_still_starts_alone():
    server = FakeServer(numbered, delay=0.01, metrics=cache_info(blocks=1, block_size=4))
    generations = make(server, max_concurrency=4).generate([request(f"n {i}", one_segment("[0-9]+")) for i in range(3)])
    assert [g.text for g in generations] == ["0", "1", "2"]
    assert server.max_in_flight == 1


def test_requests_of_a_withdrawn_call_pass_their_turns_on():
    # One request at a time, the first in flight for a second: the withdrawn call's two waiting requests are given up
    # as their turns come, unsent, so the next call's request still starts, ranked after the first.
    server = FakeServer(numbered, delay=1.0, policy="priority", metrics=cache_info(blocks=1, block_size=4))
    engine = make(server, max_concurrency=4)
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(CancelledError):
        engine.generate([request(f"n {i}", one_segment("[0-9]+")) for i in range(3)], cancel=cancel)
    later: list[list[str]] = []
    caller = threading.Thread(
        target=lambda: later.append([g.text for g in engine.generate([request("n 7", one_segment("[0-9]+"))])])
    )
    caller.start()
    caller.join(timeout=10)
    assert later == [["7"]]
    assert [body["priority"] for body in server.completions()] == [0, 1]  # a request given up is never ranked


# -- start-up -------------------------------------------------------------------------


def test_the_model_is_the_servers_only_one():
    assert make(FakeServer()).model_id == "smollm2"


def test_the_named_model_is_used():
    server = FakeServer(models=[{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 8192}])
    engine = make(server, served_model="b")
    engine.generate([request()])
    assert server.completions()[0]["model"] == "b"


def test_the_context_window_is_the_servers():
    assert make(FakeServer(models=[{"id": "m", "max_model_len": 8192}])).max_model_len == 8192


def test_a_smaller_max_model_len_caps_the_servers():
    assert make(FakeServer(models=[{"id": "m", "max_model_len": 8192}]), max_model_len=2048).max_model_len == 2048


def test_a_model_the_server_does_not_serve_is_a_config_error():
    server = FakeServer(models=[{"id": "smollm2", "max_model_len": 8192}])
    with pytest.raises(ConfigError) as caught:
        make(server, served_model="llama")
    assert caught.value.parameter == "served_model"


def test_several_models_and_none_named_is_a_config_error():
    server = FakeServer(models=[{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 4096}])
    with pytest.raises(ConfigError, match="several models") as caught:
        make(server)
    assert caught.value.parameter == "served_model"


def test_a_server_without_v1_models_is_a_config_error_naming_base_url():
    server = FakeServer(fail=lambda path, body: httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(ConfigError, match="vLLM OpenAI-compatible") as caught:
        make(server)
    assert caught.value.parameter == "base_url"


def test_a_server_without_tokenize_is_a_config_error_naming_base_url():
    server = FakeServer(fail=lambda path, body: httpx.Response(404) if path == "/tokenize" else None)
    with pytest.raises(ConfigError, match="--tokenizer") as caught:
        make(server)
    assert caught.value.parameter == "base_url"


def test_an_unreadable_key_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        make(FakeServer(), api_key_file=tmp_path / "missing")
    assert caught.value.parameter == "api_key_file"


@pytest.mark.parametrize("text", ["line one\nline two\n", "cl\u00e9\n", "s3cret\x00"])
def test_a_key_an_http_header_cannot_carry_is_a_config_error_naming_the_file(tmp_path: Path, text: str):
    key = tmp_path / "server.key"
    key.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        make(FakeServer(), api_key_file=key)
    assert caught.value.parameter == "api_key_file"


def test_a_key_file_saved_with_a_byte_order_mark_sends_the_key_alone(tmp_path: Path):
    key = tmp_path / "server.key"
    key.write_bytes("\ufeffs3cret\n".encode())
    server = FakeServer()
    make(server, api_key_file=key)
    assert server.headers[0]["authorization"] == "Bearer s3cret"


def test_a_missing_tokenizer_folder_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        make(FakeServer(), tokenizer=tmp_path / "missing")
    assert caught.value.parameter == "tokenizer"


def test_base_url_may_end_in_v1():
    server = FakeServer()
    OpenAIEngine(EngineConfig(kind="openai", base_url=URL + "/v1/"), transport=httpx.MockTransport(server))
    assert server.paths() == ["/v1/models", "/tokenize", "/metrics", "/server_info"]


def test_settings_are_known_without_the_server():
    config = EngineConfig(kind="openai", base_url="http://127.0.0.1:1", served_model="smollm2")
    assert OpenAIEngine.settings_of(config) == {
        "model": "smollm2",
        "weights": "http://127.0.0.1:1",
        "engine": "openai",
        "backend": "server",
        "max_model_len": "server's own",
    }


def test_the_backend_is_the_servers():
    assert make(FakeServer()).backend == "server"


# -- tokens through the server --------------------------------------------------------


def test_tokens_are_counted_by_the_server():
    assert make(FakeServer()).count_tokens(["abc", "hello"]) == [3, 5]


def test_counting_uses_the_tokenize_route():
    server = FakeServer()
    make(server).count_tokens(["abc"])
    assert server.calls[-1] == ("/tokenize", {"model": "smollm2", "prompt": "abc", "add_special_tokens": False})


def test_text_is_truncated_by_the_server():
    assert make(FakeServer()).truncate("hello world", 5) == "hello"


def test_truncating_uses_the_detokenize_route():
    server = FakeServer()
    make(server).truncate("hello world", 5)
    assert server.calls[-1] == ("/detokenize", {"model": "smollm2", "tokens": encode("hello")})


def test_short_text_is_not_truncated():
    assert make(FakeServer()).truncate("hi", 5) == "hi"


def test_the_prompt_is_counted_with_the_servers_chat_template():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert make(FakeServer()).prompt_tokens(messages) == len("<system>Be brief.<user>Hi" + MARK)


def test_the_chat_template_is_asked_with_the_generation_prompt():
    server = FakeServer()
    make(server).prompt_tokens([{"role": "user", "content": "Hi"}])
    assert server.calls[-1] == (
        "/tokenize",
        {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
    )


def test_a_prompt_counted_for_fitting_is_not_tokenized_again_to_generate():
    server = FakeServer()
    engine = make(server)
    engine.prompt_tokens([{"role": "user", "content": "Is it?"}])
    engine.generate([request("Is it?")])
    assert server.paths().count("/tokenize") == 2  # the probe at start, then this prompt once


# -- a local tokenizer ----------------------------------------------------------------


def embedded_tokenizer() -> Path:
    found = sorted((cache_root() / "models").glob("*-bf16/tokenizer_config.json"))
    if not found:
        pytest.skip("the embedded model has not been converted on this machine")
    return found[-1].parent


def local_tokens(folder: Path) -> Callable[[str], list[int]]:
    """A server that tokenizes as the tokenizer in ``folder`` does (the model it serves)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_a_local_tokenizer_is_used_instead_of_the_servers_routes():
    folder = embedded_tokenizer()
    server = FakeServer(lambda c: "yes", tokens=local_tokens(folder))
    engine = make(server, tokenizer=folder)
    started = len(server.calls)
    engine.count_tokens(["hello"])
    assert "/tokenize" not in server.paths()[started:]


def test_a_local_tokenizer_of_another_model_is_refused_at_start_naming_it():
    with pytest.raises(ConfigError) as caught:
        make(FakeServer(), tokenizer=embedded_tokenizer())  # the fake server tokenizes by code point
    assert caught.value.parameter == "tokenizer"


def test_a_local_tokenizer_is_trusted_by_a_server_without_tokenize():
    no_route = FakeServer(fail=lambda path, body: httpx.Response(404) if path == "/tokenize" else None)
    assert make(no_route, tokenizer=embedded_tokenizer()).count_tokens(["hello"]) == [1]


def test_a_local_tokenizer_templates_the_prompt():
    from transformers import AutoTokenizer

    folder = embedded_tokenizer()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    messages = [{"role": "user", "content": "Hello?"}]
    templated = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = tokenizer(templated, add_special_tokens=False)
    server = FakeServer(lambda c: "yes", tokens=local_tokens(folder))
    make(server, tokenizer=folder).generate([request("Hello?")])
    assert server.completions()[0]["prompt"] == expected["input_ids"]


def test_check_alive_falls_back_to_the_model_list_on_a_server_without_health():
    server = FakeServer(fail=lambda path, body: httpx.Response(404) if path == "/health" else None)
    make(server).check_alive()
    assert server.paths()[-1] == "/v1/models"


def served_by(root: str) -> FakeServer:
    text = json.dumps(GOOD, separators=(",", ":"))
    return FakeServer(lambda c: text, models=[{"id": "judge", "root": root, "max_model_len": 1_000_000}])


def test_the_engine_says_which_model_the_server_serves():
    assert make(served_by("/models/a")).served() == {"served_model": "judge", "served_root": "/models/a"}


def _judge_into(out: Path, server: FakeServer, records: int) -> Any:
    source = out.with_name("in.jsonl")
    write_lines(source, [json.dumps(rec(i)).encode() for i in range(records)])
    return judge_file(JudgeConfig(), source, out, open_judge=lambda config: Judge(make(server), config=config))


def test_a_resume_against_a_server_now_serving_another_model_is_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    _judge_into(out, served_by("/models/a"), 2)
    with pytest.raises(OutputMismatchError) as caught:
        _judge_into(out, served_by("/models/b"), 3)
    assert caught.value.setting == "served_root"


def test_a_refused_resume_adds_no_row(tmp_path):
    out = tmp_path / "out.jsonl"
    _judge_into(out, served_by("/models/a"), 2)
    before = out.read_bytes()
    with pytest.raises(OutputMismatchError):
        _judge_into(out, served_by("/models/b"), 3)
    assert out.read_bytes() == before


def test_a_resume_against_the_same_model_judges_what_is_missing(tmp_path):
    out = tmp_path / "out.jsonl"
    _judge_into(out, served_by("/models/a"), 2)
    report = _judge_into(out, served_by("/models/a"), 3)
    assert report.skipped == 2


def test_a_parquet_output_records_the_served_model_beside_itself(tmp_path):
    out = tmp_path / "out.parquet"
    _judge_into(out, served_by("/models/a"), 2)
    with pytest.raises(OutputMismatchError) as caught:
        _judge_into(out, served_by("/models/b"), 3)
    assert caught.value.setting == "served_root"


# -- faults at the edges: a split, a server that refuses all, a cut, a wedge, a close ------


def test_a_request_that_fails_is_sent_once_however_deep_the_batch_is_split():
    text = json.dumps(GOOD, separators=(",", ":"))
    busy = lambda path, body: (  # noqa: E731 - the one record always gets 503, after every retry
        status(503, "busy") if path == "/v1/completions" and "Question 5?" in decode(body["prompt"]) else None  # type: ignore[index, arg-type]
    )
    server = FakeServer(lambda c: text, fail=busy)
    results = Judge(make(server, retries=3), SufficiencyGate()).judge_batch([rec(i) for i in range(16)])
    calls = [b for b in server.completions() if "Question 5?" in decode(b["prompt"])]  # type: ignore[arg-type]
    assert [r.ok for r in results].count(False) == 1
    assert len(calls) == 4  # its own first try and three retries, not that again at each of five split levels


def test_a_server_that_refuses_every_request_stops_the_run_instead_of_an_error_row_each():
    def refuse(path: str, body: object) -> Reply:
        return status(400, "Token id 57344 is out of vocabulary") if path == "/v1/completions" else None

    judge = Judge(make(FakeServer(fail=refuse)), SufficiencyGate())
    with pytest.raises(EngineFatalError) as caught:
        judge.judge_batch([rec(i) for i in range(REFUSED_IN_A_ROW + 8)])
    assert "out of vocabulary" in str(caught.value)


def test_refusals_with_answers_between_them_stay_each_records_error():
    text = json.dumps(GOOD, separators=(",", ":"))

    def odd(path: str, body: dict[str, object] | None) -> Reply:
        prompt = decode(body["prompt"]) if path == "/v1/completions" and body else ""  # type: ignore[arg-type]
        return status(400, "no") if re.search(r"Question \d*[13579]\?", prompt) else None

    results = Judge(make(FakeServer(lambda c: text, fail=odd)), SufficiencyGate()).judge_batch(
        [rec(i) for i in range(2 * REFUSED_IN_A_ROW + 8)]
    )
    assert [r.ok for r in results].count(False) == REFUSED_IN_A_ROW + 4


def test_an_answer_that_is_not_json_while_fitting_is_not_blamed_on_the_record():
    html = lambda path, body: httpx.Response(200, text="<html>proxy</html>") if path == "/tokenize" else None  # noqa: E731
    server = FakeServer()
    engine = make(server)
    server.fail = html
    with pytest.raises(EngineError) as caught:
        engine.count_tokens(["hello"])
    assert "/tokenize with a body that is not JSON" in str(caught.value)


def test_a_fitting_failure_from_a_garbled_answer_is_judged_again_on_resume():
    server = FakeServer()
    judge = Judge(make(server), SufficiencyGate())
    server.fail = lambda path, body: httpx.Response(200, text="<html>proxy</html>") if path == "/tokenize" else None
    [result] = judge.judge_batch([rec(0)])
    assert result.error is not None
    assert result.error.type == "GenerationError"
    assert result.error.final is False


def test_a_server_that_dies_during_a_completion_implicates_the_records_in_flight():
    down = {"now": False}

    def dies(path: str, body: object) -> Reply:
        if path == "/v1/completions" and not down["now"]:
            down["now"] = True
            return httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.ConnectError("Connection refused") if down["now"] else None

    server = FakeServer()
    engine = make(server, retries=1)
    server.fail = dies
    with pytest.raises(EngineDeadError) as caught:
        engine.generate([request()])
    assert not isinstance(caught.value, EngineUnreachableError)


def test_a_server_that_is_simply_gone_implicates_no_record():
    server = FakeServer()
    engine = make(server, retries=1)
    server.fail = lambda path, body: httpx.ConnectError("Connection refused")
    with pytest.raises(EngineUnreachableError):
        engine.generate([request()])


def test_a_timed_out_request_on_a_server_that_answers_no_health_check_stops_the_run_at_once():
    server = FakeServer()
    engine = make(server, retries=3)
    started = len(server.calls)
    server.fail = lambda path, body: httpx.ReadTimeout("timed out")
    with pytest.raises(EngineUnreachableError):
        engine.generate([request()])
    # The call that timed out is not retried: the health check (asked twice) failed after it.
    assert server.paths()[started:] == ["/tokenize", "/health", "/health"]


def test_a_timed_out_request_on_a_healthy_server_is_that_requests_failure():
    server = FakeServer()
    engine = make(server, retries=1)
    server.fail = lambda path, body: httpx.ReadTimeout("timed out") if path == "/v1/completions" else None
    with pytest.raises(EngineError) as caught:
        engine.generate([request()])
    assert not isinstance(caught.value, EngineFatalError)


def test_the_health_check_asks_with_its_own_short_timeout():
    server = FakeServer()
    engine = make(server, request_timeout=300)
    timeouts: list[object] = []
    original = server.__call__

    def recording(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            timeouts.append(request.extensions["timeout"]["read"])
        return original(request)

    engine._client._http._transport = httpx.MockTransport(recording)  # type: ignore[attr-defined]
    engine.check_alive()
    assert timeouts == [client.HEALTH_TIMEOUT]


def test_closing_the_engine_while_it_generates_ends_the_generation():
    engine = make(FakeServer(delay=0.5), max_concurrency=1)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            engine.generate([request(f"Q{i}?") for i in range(8)])
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    time.sleep(0.7)
    engine.close()
    worker.join(10)
    assert not worker.is_alive()
    assert isinstance(outcome[0], EngineFatalError)


def test_a_health_check_does_not_wait_for_a_slot_held_by_a_hanging_request():
    release = threading.Event()

    def hang(path: str, body: object) -> Reply:
        if path == "/v1/completions":
            release.wait(20)
        return None

    server = FakeServer()
    engine = make(server, max_concurrency=1)
    server.fail = hang
    generating = threading.Thread(target=lambda: engine.generate([request()]), daemon=True)
    generating.start()
    deadline = time.monotonic() + 10
    while "/v1/completions" not in server.paths() and time.monotonic() < deadline:
        time.sleep(0.02)
    checking = threading.Thread(target=engine.check_alive, daemon=True)
    checking.start()
    checking.join(5)
    hung = checking.is_alive()
    release.set()
    generating.join(10)
    assert not hung


def test_a_request_that_failed_is_asked_again_by_a_later_call():
    """Nothing of a failure is kept past the split: a retry later reaches the server."""
    text = json.dumps(GOOD, separators=(",", ":"))
    down = {"now": True}

    def transient(path: str, body: dict[str, object] | None) -> Reply:
        if path == "/v1/completions" and down["now"] and "Question 1?" in decode(body["prompt"]):  # type: ignore[index, arg-type]
            return status(503, "busy")
        return None

    server = FakeServer(lambda c: text, fail=transient)
    judge = Judge(make(server, retries=0), SufficiencyGate())
    first = judge.judge_batch([rec(0), rec(1), rec(2)])
    down["now"] = False
    [again] = judge.judge_batch([rec(1)])
    assert first[1].ok is False
    assert again.ok is True


def test_a_single_request_that_failed_is_asked_again_by_a_later_call():
    down = {"now": True}
    server = FakeServer(
        fail=lambda path, body: status(503, "busy") if down["now"] and path == "/v1/completions" else None
    )
    engine = make(server, retries=0)
    with pytest.raises(EngineError):
        engine.generate([request()])
    down["now"] = False
    assert engine.generate([request()])[0].text == "yes"


def test_refusals_of_another_status_restart_the_count():
    def refuse(path: str, body: object) -> Reply:
        if path != "/v1/completions":
            return None
        refuse.calls += 1  # type: ignore[attr-defined]
        return status(422 if refuse.calls == 1 else 400, "no")  # type: ignore[attr-defined]

    refuse.calls = 0  # type: ignore[attr-defined]
    judge = Judge(make(FakeServer(fail=refuse)), SufficiencyGate())
    with pytest.raises(EngineFatalError) as caught:
        judge.judge_batch([rec(i) for i in range(REFUSED_IN_A_ROW + 8)])
    assert "HTTP 400" in str(caught.value)


def test_a_timeout_then_no_connection_for_the_health_check_stops_at_once():
    server = FakeServer()
    engine = make(server, retries=3)
    started = len(server.calls)

    def wedged(path: str, body: object) -> Reply:
        if path in ("/health", "/v1/models"):
            return httpx.ConnectError("Connection refused")
        return httpx.ReadTimeout("timed out")

    server.fail = wedged
    with pytest.raises(EngineUnreachableError):
        engine.generate([request()])
    assert server.paths()[started:].count("/tokenize") == 1


@pytest.mark.parametrize(
    "reply", [status(403, "forbidden"), status(502, "bad gateway"), httpx.Response(200, text="<html>")]
)
def test_a_local_tokenizer_is_trusted_when_the_server_cannot_be_asked(reply):
    server = FakeServer(fail=lambda path, body: reply if path == "/tokenize" else None)
    assert make(server, tokenizer=embedded_tokenizer(), retries=0).count_tokens(["hello"]) == [1]


def test_a_server_that_dies_with_requests_in_flight_is_dead_whichever_failure_comes_back_first():
    down = {"now": False}
    lock = threading.Lock()

    def dies(path: str, body: object) -> Reply:
        if path != "/v1/completions":
            return httpx.ConnectError("Connection refused") if down["now"] else None
        with lock:
            first = not down["now"]
            down["now"] = True
        if first:
            time.sleep(0.2)  # the others find the server gone before this one's cut returns
            return httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.ConnectError("Connection refused")

    for _ in range(5):
        down["now"] = False
        server = FakeServer()
        engine = make(server, retries=0, max_concurrency=4)
        server.fail = dies
        with pytest.raises(EngineDeadError) as caught:
            engine.generate([request(f"Q{i}?") for i in range(8)])
        assert not isinstance(caught.value, EngineUnreachableError)


# -- a real socket: answers that never end ---------------------------------------------


class _EndlessAnswers(BaseHTTPRequestHandler):
    """Answers the start-up routes, and every completion with a body that never ends:
    one byte every 50 ms (``trickle``) or ``huge_bytes`` of it at once (``huge``)."""

    protocol_version = "HTTP/1.1"
    mode = "trickle"
    huge_bytes = 0

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test's output is the engine's."""

    def _send(self, body: bytes, length: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self) -> None:
        models = {"data": [{"id": "smollm2", "root": "/m", "max_model_len": 100_000}]}
        self._send(json.dumps(models if self.path == "/v1/models" else {}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            text = body.get("prompt") or chat(body["messages"])
            self._send(json.dumps({"tokens": encode(text)}).encode())
        elif self.mode == "huge":
            with contextlib.suppress(OSError):  # the engine hangs up once it has enough
                self._send(b'{"choices": [{"text": "' + b"y" * self.huge_bytes + b'"}]}')
        else:
            with contextlib.suppress(OSError):  # until the engine hangs up
                self._send(b'{"choices": [{"text": "', length=10**9)
                while True:
                    time.sleep(0.05)
                    self.wfile.write(b"y")
                    self.wfile.flush()


@pytest.fixture
def endless() -> Iterator[tuple[str, type[_EndlessAnswers]]]:
    """A real server on a loopback port (its address, and the handler to set its mode)."""
    handler = type("Endless", (_EndlessAnswers,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def generate_within(engine: OpenAIEngine, seconds: float) -> BaseException | None:
    """What one generation raised, or ``None`` if it had not ended within ``seconds``."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            engine.generate([request()])
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else None


def test_an_answer_that_trickles_on_fails_after_request_timeout(endless: tuple[str, type[_EndlessAnswers]]):
    url, _ = endless
    engine = OpenAIEngine(EngineConfig(kind="openai", base_url=url, request_timeout=0.5, retries=0))
    assert isinstance(generate_within(engine, 8.0), EngineError)


def test_an_answer_larger_than_any_completion_fails_the_request(
    endless: tuple[str, type[_EndlessAnswers]], monkeypatch: pytest.MonkeyPatch
):
    url, handler = endless
    handler.mode, handler.huge_bytes = "huge", 2**20
    monkeypatch.setattr(client, "MAX_ANSWER_BYTES", 2**16, raising=False)
    engine = OpenAIEngine(EngineConfig(kind="openai", base_url=url, retries=0))
    with pytest.raises(EngineError, match="larger than"):
        engine.generate([request()])


@pytest.fixture
def refusing_proxy() -> Iterator[str]:
    """A real proxy on a socket that refuses every CONNECT (403): its address, for ``proxy``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def refuse() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=refuse, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_a_proxy_that_refuses_the_server_is_unreachable_not_an_httpx_error(refusing_proxy: str):
    with pytest.raises(EngineUnreachableError):
        OpenAIEngine(
            EngineConfig(kind="openai", base_url="https://judge.internal:8443/v1", proxy=refusing_proxy, retries=0)
        )


def test_a_proxy_that_refuses_the_server_is_named_with_its_option(refusing_proxy: str):
    with pytest.raises(EngineUnreachableError, match=rf"through the proxy {re.escape(refusing_proxy)} \(--proxy\)"):
        OpenAIEngine(
            EngineConfig(kind="openai", base_url="https://judge.internal:8443/v1", proxy=refusing_proxy, retries=0)
        )


def redirected(path: str, body: object) -> httpx.Response:
    return httpx.Response(301, headers={"Location": "https://judge.internal/v1/models"})


def test_a_server_that_redirects_is_a_config_error_naming_base_url():
    with pytest.raises(ConfigError) as caught:
        make(FakeServer(fail=redirected))
    assert caught.value.parameter == "base_url"


def test_a_server_that_redirects_is_named_with_where_it_redirects():
    with pytest.raises(ConfigError, match=r"redirects to https://judge\.internal/v1/models"):
        make(FakeServer(fail=redirected))
