"""Prometheus metrics of the service, in a registry of its own (one per app, so tests
and several apps in one process do not collide).

Names follow Prometheus's conventions: ``suffice_`` first, the unit last and plural
(``_seconds``, ``_tokens``, ``_items``), ``_total`` on counters, and ``suffice_build_info``
(always 1) carrying what runs as labels.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Mapping
from typing import Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from suffice.grammars.routes import Route
from suffice.results import Judged, Tally

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
        self.latency = Histogram(
            "suffice_request_duration_seconds",
            "Seconds a judge request took to judge its items",
            ["gate"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.waiting = Gauge("suffice_waiting_requests", "Judge requests waiting for their verdicts", registry=r)
        self.pending_items = Gauge(
            "suffice_pending_items",
            "Items admitted and not yet answered (their chunks at most --max-pending-chunks)",
            registry=r,
        )
        self.refused_items = Counter(
            "suffice_refused_items_total", "Items of requests answered 429: the service was full", registry=r
        )
        #: The results counted by gate (a :class:`~suffice.results.Tally` each), read when scraped (:meth:`series`);
        #: a served gate's route and override series start at 0.
        self.tallies: dict[str, Tally] = {gate: Tally() for gate in gates}
        r.register(_Series(self))
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
        answered): count a batch's results under its name, by its gate's rules (the gate that judged them)."""
        self.latency.labels(judged.name).observe(judged.seconds)
        self.tallies.setdefault(judged.name, Tally()).on_judged(judged)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def series(self) -> Iterator[Metric]:
        """The results' series, read from the tallies when scraped."""
        by_gate = functools.partial(CounterMetricFamily, labels=["gate"])
        verdicts = by_gate("suffice_verdicts", "Verdicts served")
        errors = CounterMetricFamily("suffice_item_errors", "Items answered with an error row", labels=["gate", "type"])
        prompt = by_gate("suffice_prompt_tokens", "Prompt tokens sent to the engine (none for a cache hit)")
        completion = by_gate("suffice_completion_tokens", "Tokens generated")
        output = HistogramMetricFamily(
            "suffice_verdict_output_tokens",
            "Output tokens per verdict the model generated (its _sum over its _count: the mean)",
            labels=["gate"],
        )
        most = GaugeMetricFamily(
            "suffice_max_verdict_output_tokens", "The most output tokens of one verdict so far", labels=["gate"]
        )
        routes = CounterMetricFamily(
            "suffice_routed_verdicts",
            "Verdicts by where they route (deliver, retrieve_more, abstain, human_review)",
            labels=["gate", "route"],
        )
        overrides = by_gate(
            "suffice_decision_overrides",
            "Verdicts whose routed decision differs from the model's own (the code's decision overrode it)",
        )

        for gate, tally in list(self.tallies.items()):
            routes_taken = dict(tally.routes)
            for route in dict.fromkeys([*get_args(Route), *routes_taken]):
                routes.add_metric([gate, route], routes_taken.get(route, 0))
            overrides.add_metric([gate], tally.overrides)
            if not tally.items:
                continue
            verdicts.add_metric([gate], tally.verdicts)
            for kind, n in dict(tally.error_types).items():
                errors.add_metric([gate, kind], n)
            prompt.add_metric([gate], tally.prompt_tokens)
            completion.add_metric([gate], tally.completion_tokens)
            counts = dict(tally.output_tokens.counts)
            if counts:
                below = [(str(float(b)), sum(k for n, k in counts.items() if n <= b)) for b in OUTPUT_TOKEN_BUCKETS]
                buckets = [*below, ("+Inf", sum(counts.values()))]
                output.add_metric([gate], buckets, sum(n * k for n, k in counts.items()))
                most.add_metric([gate], max(counts))
        yield from (verdicts, errors, prompt, completion, output, most, routes, overrides)


class _Series(Collector):
    """What ``prometheus_client`` scrapes of :meth:`Metrics.series` (its ``describe`` is another)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.series()


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
