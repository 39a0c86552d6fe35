"""Prometheus metrics of the service, in a registry of its own (one per app, so tests
and several apps in one process do not collide).

Names follow Prometheus's conventions: ``suffice_`` first, the unit last and plural
(``_seconds``, ``_tokens``, ``_items``), ``_total`` on counters, and ``suffice_build_info``
(always 1) carrying what runs as labels.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel

from suffice.gates.base import Gate
from suffice.gates.roles import model_positive
from suffice.grammars.routes import Route
from suffice.results import Judged

#: Where judge requests go: ``/v1/judge/<gate>``.
JUDGE_PATH = "/v1/judge/"

#: Seconds; judging takes from a fraction of a second (decision only, GPU) to minutes
#: (a large batch on CPU).
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)
#: Output tokens of one verdict: a handful decision-only, about 175 for a full verdict on the embedded model, and
#: a constraint's worst case in the thousands.
OUTPUT_TOKEN_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


class Metrics:
    def __init__(self, gates: Collection[str] = (), build: Mapping[str, str | None] | None = None) -> None:
        """``gates``: the served gates, whose route and override counters start at 0 (a series from the start);
        ``build``: the labels of ``suffice_build_info`` (``version``, ``model``, ``backend``, ``gates``; one
        ``None`` while the engine starts: the series appears when :meth:`describe` is called)."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "suffice_requests_total", "HTTP judge requests by gate and status code", ["gate", "status"], registry=r
        )
        self.verdicts = Counter("suffice_verdicts_total", "Verdicts served", ["gate"], registry=r)
        self.item_errors = Counter(
            "suffice_item_errors_total", "Items answered with an error row", ["gate", "type"], registry=r
        )
        self.latency = Histogram(
            "suffice_request_duration_seconds",
            "Seconds a judge request took to judge its items",
            ["gate"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "suffice_prompt_tokens_total", "Prompt tokens sent to the engine", ["gate"], registry=r
        )
        self.completion_tokens = Counter("suffice_completion_tokens_total", "Tokens generated", ["gate"], registry=r)
        self.verdict_tokens = Histogram(
            "suffice_verdict_output_tokens",
            "Output tokens per verdict the model generated (its _sum over its _count: the mean)",
            ["gate"],
            buckets=OUTPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.verdict_tokens_max = Gauge(
            "suffice_max_verdict_output_tokens", "The most output tokens of one verdict so far", ["gate"], registry=r
        )
        self._most: dict[str, int] = {}
        self._most_lock = threading.Lock()  # requests are answered on several threads
        self.waiting = Gauge("suffice_waiting_requests", "Judge requests waiting for their verdicts", registry=r)
        self.pending_items = Gauge(
            "suffice_pending_items",
            "Items admitted and not yet answered (their chunks at most --max-pending-chunks)",
            registry=r,
        )
        self.refused_items = Counter(
            "suffice_refused_items_total", "Items of requests answered 429: the service was full", registry=r
        )
        self.routes = Counter(
            "suffice_routed_verdicts_total",
            "Verdicts by where they route (deliver, retrieve_more, abstain, human_review)",
            ["gate", "route"],
            registry=r,
        )
        self.decision_overrides = Counter(
            "suffice_decision_overrides_total",
            "Verdicts whose routed decision differs from the model's own (the code's decision overrode it)",
            ["gate"],
            registry=r,
        )
        for gate in gates:
            for route in get_args(Route):
                self.routes.labels(gate, route)
            self.decision_overrides.labels(gate)
        self.engine_alive = Gauge("suffice_engine_alive", "1 while the engine can judge", registry=r)
        self.engine_alive.set(1)
        build = dict(build or {})
        self._info = Gauge(
            "suffice_build_info", "What this service runs: 1, with it as labels", list(build), registry=r
        )
        if None not in build.values():  # a value not known yet (the engine starts) is set by describe()
            self.describe(build)

    def describe(self, build: Mapping[str, str | None]) -> None:
        """Set ``suffice_build_info``'s labels (the names given when made)."""
        (self._info.labels(**build) if build else self._info).set(1)

    def on_judged(self, judged: Judged) -> None:
        """A :class:`~suffice.results.ResultsObserver` (of the service's results, each request's once it is
        answered): count a batch's results under its name; its gate (the one that judged them) routes each verdict
        and says whether its decision overrode the model's own."""
        gate, judged_by = judged.name, judged.gate
        self.latency.labels(gate).observe(judged.seconds)
        for result in judged.results:
            if result.error is None:
                self.verdicts.labels(gate).inc()
                self._output_tokens(gate, result.tokens.completion)
                if judged_by is not None and result.verdict is not None:
                    self._route(gate, judged_by, result.verdict)
            else:
                self.item_errors.labels(gate, result.error.type).inc()
            self.prompt_tokens.labels(gate).inc(result.tokens.prompt)
            self.completion_tokens.labels(gate).inc(result.tokens.completion)

    def _output_tokens(self, gate: str, completion: int) -> None:
        """A verdict made without the model (0 tokens) decodes nothing: not counted."""
        if completion <= 0:
            return
        self.verdict_tokens.labels(gate).observe(completion)
        with self._most_lock:
            if completion > self._most.get(gate, 0):
                self._most[gate] = completion
                self.verdict_tokens_max.labels(gate).set(completion)

    def _route(self, gate: str, judged_by: Gate, verdict: BaseModel) -> None:
        self.routes.labels(gate, judged_by.route(verdict).route).inc()
        model = model_positive(judged_by, verdict)
        if model is not None and model != judged_by.is_positive(verdict):
            self.decision_overrides.labels(gate).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class CountedRequests:
    """Counts every judge request by gate and the status it was answered with, at the
    outermost layer: the guards' 401, 408 and 413 and FastAPI's own 422 (a bad query
    parameter) never reach the route, and a route that counted for itself missed them.
    A request that ends with no response at all (the app raised) counts as 500."""

    def __init__(self, app: Any, metrics: Metrics, gates: Collection[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.gates = frozenset(gates)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(JUDGE_PATH):
            await self.app(scope, receive, send)
            return
        name = path[len(JUDGE_PATH) :]
        gate = name if name in self.gates else "unknown"
        status: list[int] = []

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start" and not status:
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            self.metrics.requests.labels(gate=gate, status=str(status[0] if status else 500)).inc()
