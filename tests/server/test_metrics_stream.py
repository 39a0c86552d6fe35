"""``/metrics`` counts what clients get: the service publishes each request's results to its results stream once they
are to be answered, and :class:`~suffice.server.metrics.Metrics` observes that stream like the judge's statistics
and a batch run's summary do, so no route feeds it by hand."""

from __future__ import annotations

import threading
from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from suffice import Client
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.results import Judged
from suffice.server.config import ServeConfig
from suffice.server.metrics import Metrics
from suffice.server.service import GateService, Options
from tests.fakes import ScriptedEngine
from tests.monitoring import record, scripted
from tests.test_client import serve

GATE = "adequacy"


class CachingEngine(ScriptedEngine):
    """A scripted engine whose verdicts the verdict cache may keep."""

    cacheable = True


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, by name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_every_result_a_client_gets_is_counted_in_metrics_and_nothing_else(tmp_path):
    """Every route, an override, an error item, a cached hit, a request with its own option, and a refused request:
    the counters of ``/metrics`` are exactly what the clients were answered."""
    engine = CachingEngine(scripted)
    served = JudgeConfig(gate=GATE, cache=str(tmp_path / "verdicts.sqlite3"))
    calls: list[tuple[list[object], dict[str, object] | None]] = [
        ([record("deliver", 0), record("overridden", 1), {"id": "bad"}, record("review", 2)], None),
        ([record("deliver", 0)], None),  # the verdict cache's hit
        ([record("more", 3), record("more", 4)], {"retrieval_exhausted": True}),  # a judge for the request's option
        ([record("more", 5)], None),
    ]
    answered = []
    with serve(engine, judge=served, gates=(GATE,)) as url, Client(url, gate=GATE) as client:
        for records, options in calls:
            for result in client.judge_batch(records, options=options):
                answered.append((result, client.gate_for(GATE, options)))
        with pytest.raises(ConfigError):
            client.judge_batch([record("deliver", 6)], options={"no_such_option": 1})
        text = httpx.get(f"{url}/metrics").text
    got = samples(text)

    def sample(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted({"gate": GATE, **labels}.items()))), 0.0)

    verdicts = [(result, gate) for result, gate in answered if result.verdict is not None]
    assert any(result.cached is not None for result, _ in verdicts)  # the hit reached the client
    assert sample("suffice_verdicts_total") == len(verdicts) == 7
    errors = Counter(result.error.type for result, _ in answered if result.error is not None)
    assert errors == {"InputError": 1}
    assert {t: sample("suffice_item_errors_total", type=t) for t in errors} == errors
    routes = Counter(gate.route(result.verdict).route for result, gate in verdicts)
    assert set(routes) == {"deliver", "abstain", "human_review", "retrieve_more"}
    for route in ("deliver", "abstain", "human_review", "retrieve_more"):
        assert sample("suffice_routed_verdicts_total", route=route) == routes[route], route
    assert sample("suffice_decision_overrides_total") == 1
    judged = [result for result, _ in answered if result.cached is None]  # a hit's tokens were counted when judged
    assert sample("suffice_prompt_tokens_total") == sum(result.tokens.prompt for result in judged) > 0
    assert sample("suffice_completion_tokens_total") == sum(result.tokens.completion for result in judged)
    assert sample("suffice_request_duration_seconds_count") == len(calls)  # one per request answered
    assert sample("suffice_requests_total", status="200") == len(calls)
    assert sample("suffice_requests_total", status="422") == 1
    assert got[("suffice_waiting_requests", ())] == 0


def test_results_the_route_does_not_answer_are_not_published():
    """A request given up (its cancel set: the route answered 504 or 499) is not counted as served."""
    config = ServeConfig(judge=JudgeConfig(gate=GATE), gates=(GATE,))
    service = GateService(config, ScriptedEngine(scripted))
    heard: list[Judged] = []

    class Seen:
        def on_judged(self, judged: Judged) -> None:
            heard.append(judged)

    service.results.subscribe(Seen())
    service.judge(GATE, [record("deliver", 0)], Options())
    given_up = threading.Event()
    original = service._defaults[GATE].judge_batch

    def judged_then_given_up(*args: object, **kwargs: object):  # the route's deadline passes as judging ends
        results = original(*args, **kwargs)  # type: ignore[arg-type]
        given_up.set()
        return results

    service._defaults[GATE].judge_batch = judged_then_given_up  # type: ignore[method-assign]
    service.judge(GATE, [record("deliver", 1)], Options(), given_up)
    assert [[r.id for r in judged.results] for judged in heard] == [["deliver0"]]
    assert heard[0].name == GATE and heard[0].gate is service._defaults[GATE].gate


def test_metrics_observe_the_results_of_a_service_that_started_after_the_app():
    """``suffice serve`` opens its port before the engine starts: the metrics subscribe when the service arrives."""
    from concurrent.futures import Future

    from fastapi.testclient import TestClient

    from suffice.server.app import create_app

    config = ServeConfig(judge=JudgeConfig(gate=GATE), gates=(GATE,))
    starting: Future[GateService] = Future()
    client = TestClient(create_app(starting, config), base_url="http://127.0.0.1")
    starting.set_result(GateService(config, ScriptedEngine(scripted)))
    assert client.post(f"/v1/judge/{GATE}", json=[record("deliver", 0), record("more", 1)]).status_code == 200
    assert 'suffice_verdicts_total{gate="adequacy"} 2.0' in client.get("/metrics").text
    (observer,) = starting.result().results.observers
    assert isinstance(observer, Metrics)
