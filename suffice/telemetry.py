"""Traces of the judge through the OpenTelemetry API (the ``otel`` extra); no other module imports it.

Only the API is used, so nothing is recorded or sent unless the application installs an SDK
(a ``TracerProvider``) with an exporter of its own; without ``opentelemetry-api`` installed at
all, every function here does nothing and suffice works unchanged.

The spans follow the GenAI semantic conventions (``gen_ai.*``, as the installed
``opentelemetry-semantic-conventions`` names them; ``tests/test_telemetry.py`` holds the names
to that package):

- **A span per record**, an inference span: ``gen_ai.operation.name`` is ``chat`` (the
  conventions' value for a chat completion), because the judge sends each record to the model
  as chat messages (the gate's system and user turns) and reads one assistant answer back.  Its
  name is ``chat {gen_ai.request.model}``, as the conventions say for inference spans.  A retry
  after a failed validation stays inside the record's span: the conventions ask a retried
  request's span to cover the logical operation with all its retries, and the token counts are
  the record's (both generations), as its :class:`~suffice.results.JudgeResult` counts them.
- **A span per batch**, ``invoke_workflow``: one ``judge_batch`` call coordinates many inference
  calls (the records share the engine's running batch), which is what the conventions' workflow
  span stands for.  Its name is ``invoke_workflow {gen_ai.workflow.name}``, the workflow being
  ``suffice.<gate>``; it also carries the model and the batch's token totals.

Both are ``INTERNAL`` spans: they stand for the judge's own work (fitting, generation, parsing,
routing), not only a call to the model, which runs under the judge's own engine.  suffice's own
attributes: ``suffice.gate``, ``suffice.route`` (``Gate.route``), ``suffice.p_positive`` (the
model's probability of the gate's positive decision value, read from its log-probabilities; absent
where the model was not called or gave none), ``suffice.record.id``, ``suffice.retries``; a record
that failed has an error status and ``error.type`` (its error class, as in the result row).

The record spans are written when the batch ends (the engine generates for all of a batch's
records together, so no record has a generation of its own to time): each starts with the batch
and ends when its result was settled (before generation, after the first pass, or after a retry).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from suffice.gates.base import Gate
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
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
WORKFLOW_NAME = "gen_ai.workflow.name"
#: The stable general convention's name of an operation's error class.
ERROR_TYPE = "error.type"
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

#: The instrumentation scope of every span.
SCOPE = "suffice"

T = TypeVar("T")


@functools.cache
def _version() -> str | None:
    """suffice's version as the instrumentation scope's (read once: the lookup scans the installed packages)."""
    try:
        return importlib.metadata.version("suffice")
    except importlib.metadata.PackageNotFoundError:
        return None


class BatchTrace:
    """The spans of one ``judge_batch`` call: the batch's (current while the batch runs, so spans of
    the engine's own nest under it) and, at :meth:`finish`, one per record.  Does nothing without the
    OpenTelemetry API, and records nothing where the batch's span is not recorded (no SDK installed,
    or sampled out)."""

    def __init__(self, gate: Gate, model: str, records: int) -> None:
        self.gate = gate
        self.model = model
        self.records = records
        self._started = time.time_ns()
        #: When each record's result was settled, by its position.
        self._settled: dict[int, int] = {}
        self._scope: contextlib.AbstractContextManager[Span] | None = None
        self._span: Span | None = None

    def __enter__(self) -> BatchTrace:
        if _trace is None:
            return self
        tracer = _trace.get_tracer(SCOPE, _version())
        self._started = time.time_ns()
        self._scope = tracer.start_as_current_span(
            f"{INVOKE_WORKFLOW} suffice.{self.gate.name}",
            kind=_trace.SpanKind.INTERNAL,
            attributes={
                OPERATION_NAME: INVOKE_WORKFLOW,
                WORKFLOW_NAME: f"suffice.{self.gate.name}",
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

    def settle(self, results: Sequence[JudgeResult | None]) -> None:
        """Note now as the end of every record whose result is set and was not noted before."""
        if not self.recording:
            return
        now = time.time_ns()
        for index, result in enumerate(results):
            if result is not None:
                self._settled.setdefault(index, now)

    def finish(self, results: Sequence[JudgeResult], p_positive: Mapping[int, float]) -> None:
        """A span per record under the batch's, and the batch's totals; ``p_positive``: the model's
        probability of the gate's positive decision by record position, where it gave one."""
        if _trace is None or self._span is None or not self.recording:
            return
        tracer = _trace.get_tracer(SCOPE, _version())
        parent = _trace.set_span_in_context(self._span)
        now = time.time_ns()
        for index, result in enumerate(results):
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
            }
        )

    def _record_attributes(self, result: JudgeResult, p_positive: float | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            OPERATION_NAME: CHAT,
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
