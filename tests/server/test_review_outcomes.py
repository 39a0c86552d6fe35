"""A person's decision reaches the application that sent the record: ``GET /v1/reviews/{id}/outcome`` and the long
poll ``GET /v1/reviews/events`` with the service's client key, ``Client``/``AsyncClient`` over them, and
``Pipeline.resume`` acting on a service's review.  A real uvicorn on loopback, a scripted engine."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from suffice import AsyncClient, Client
from suffice.audit import AuditLog
from suffice.audit.reviewing import APPLIED_RULE
from suffice.exceptions import AuthenticationError, ConfigError, ReviewNotFoundError, ServiceError
from suffice.harness.pipeline import Pipeline
from suffice.harness.retrieval import FunctionRetriever
from suffice.judge import Judge
from suffice.results import (
    MAX_ANSWER_CHARS,
    MAX_EVENTS,
    MAX_EVENTS_WAIT_S,
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    ReviewEvents,
)
from suffice.server import outcomes
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.server.live import live
from tests.server.test_reviews import make_keys

KEY = "client-key-0123456789abcdef"
RESPONSE = "John Bradfield designed it."
DOCS = Path(__file__).resolve().parents[2] / "docs"


class Served:
    """The service over an audit log with two reviews queued (the second needs two reviewers)."""

    def __init__(self, url: str, keys: dict[str, str], db: Path) -> None:
        self.url = url
        self.keys = keys
        self.db = db
        self.client = Client(url, api_key=KEY)

    def get(self, path: str, key: str | None = KEY, **params: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key is not None else {}
        return httpx.get(self.url + path, params=params, headers=headers, timeout=30, trust_env=False)

    def decide(self, review_id: int, reviewer: str, decision: str, note: str | None = None, **fields: Any) -> None:
        answer = httpx.post(
            f"{self.url}/v1/reviews/{review_id}/decision",
            json={"decision": decision, "note": note, **fields},
            headers={"authorization": f"Bearer {self.keys[reviewer]}"},
            timeout=30,
            trust_env=False,
        )
        assert answer.status_code == 200, answer.text


def queue(db: Path) -> None:
    log = AuditLog(db)
    log.enqueue_review(
        item_id="q1",
        gate="sufficiency",
        reason="model_escalated: the model escalated",
        run_id="req-1",
        payload={
            "question": "Who designed the bridge?",
            "response": RESPONSE,
            "chunks": [{"id": "d1", "text": "Bradfield designed the Sydney Harbour Bridge.", "source": "wiki"}],
            "gap": [],
            "rule": "model_escalated",
        },
    )
    log.enqueue_review(
        item_id="q2",
        gate="sufficiency",
        reason="r",
        payload={"question": "When did it open?", "chunks": [], "gap": ["the opening date"], "rule": "r"},
        reviewers=2,
    )
    log.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    db = tmp_path / "audit.db"
    queue(db)
    keys = make_keys(tmp_path / "reviewers", "alice", "bob")
    with live(ScriptedEngine(good), key=KEY, audit_db=db, reviewer_keys=tmp_path / "reviewers") as (_, port):
        served = Served(f"http://127.0.0.1:{port}", keys, db)
        yield served
        served.client.close()


def test_the_outcome_is_pending_until_the_reviewers_agree_then_says_who_and_what(served: Served) -> None:
    pending = served.client.review_outcome(1)
    assert (pending.decided, pending.state, pending.decision, pending.decided_by) == (False, "open", None, [])
    assert pending.record is None  # the open queue's records are the reviewers' to read, not the client key's
    assert (pending.item_id, pending.run_id, pending.rule) == ("q1", "req-1", "model_escalated")
    served.decide(1, "alice", "answer", "matches the source")
    decided = served.client.review_outcome(1)
    assert (decided.decided, decided.state, decided.decision) == (True, "resolved", "answer")
    assert decided.label == "sufficient"
    assert (decided.decided_by, decided.answer, decided.note) == (["alice"], RESPONSE, "matches the source")
    assert decided.answer_from == "response"  # no answer written: the response under review
    assert decided.decided_at and decided.log_id == pending.log_id
    # Two reviewers needed: one decision, or two that differ, decide nothing yet.
    served.decide(2, "alice", "refine_retrieval", "opening date 1932")
    assert (served.client.review_outcome(2).state, served.client.review_outcome(2).decided) == ("awaiting", False)
    served.decide(2, "bob", "unanswerable")
    disputed = served.client.review_outcome(2)
    assert (disputed.state, disputed.decided, disputed.decision, disputed.queries) == ("disputed", False, None, [])
    with pytest.raises(ReviewNotFoundError, match="999"):
        served.client.review_outcome(999)


def test_only_the_client_key_reads_outcomes_and_events(served: Served) -> None:
    for path in ("/v1/reviews/1/outcome", "/v1/reviews/events"):
        assert served.get(path).status_code == 200
        assert served.get(path, key=None).status_code == 401
        assert served.get(path, key="wrong-key-0123456789abcdef").status_code == 401
        assert served.get(path, key=served.keys["alice"]).status_code == 401  # a reviewer's key is not the client's
    with pytest.raises(AuthenticationError), Client(served.url, api_key="wrong-key-0123456789abcdef") as wrong:
        wrong.review_events()
    # The client key learns outcomes; it still reads no queue and decides nothing.
    assert served.get("/v1/reviews").status_code == 401
    refused = httpx.post(
        f"{served.url}/v1/reviews/1/decision", json={"decision": "answer"}, headers={"authorization": f"Bearer {KEY}"}
    )
    assert refused.status_code == 401
    assert served.get("/v1/reviews/x/outcome").status_code == 422
    assert served.get("/v1/reviews/999/outcome").status_code == 404


def test_events_follow_decisions_from_a_since_cursor(served: Served) -> None:
    start = served.client.review_events()
    assert start.events == [] and start.log_id == served.client.review_outcome(1).log_id
    served.decide(1, "alice", "answer")
    first = served.client.review_events(since=start.next)
    [event] = first.events
    assert (event.review_id, event.item_id, event.run_id, event.decision, event.decided_by) == (
        1,
        "q1",
        "req-1",
        "answer",
        ["alice"],
    )
    assert event.cursor > start.next and first.next == event.cursor
    assert served.client.review_events(since=first.next).events == []  # seen: not again
    served.decide(2, "alice", "refine_retrieval", "opening date\nSydney 1932")
    assert served.client.review_events(since=first.next).events == []  # one of two reviewers: not decided
    served.decide(2, "bob", "refine_retrieval", "opening date")
    [second] = served.client.review_events(since=first.next).events
    assert (second.review_id, second.decision, second.decided_by) == (2, "refine_retrieval", ["alice", "bob"])
    assert served.client.review_outcome(2).queries == ["opening date", "Sydney 1932"]
    assert served.client.review_outcome(2).queries_from == "notes"  # no queries field: the notes' lines
    # From the start again, a page at a time.
    page = served.client.review_events(since=0, limit=1)
    assert [e.review_id for e in page.events] == [1] and page.next == event.cursor
    assert [e.review_id for e in served.client.review_events(since=page.next, limit=1).events] == [2]
    assert [e.review_id for e in served.client.review_events(since=0).events] == [1, 2]


def test_the_outcome_hands_over_the_reviewers_answer_and_queries_and_says_where_each_came_from(
    served: Served,
) -> None:
    served.decide(1, "alice", "answer", "the date was wrong", answer="Bradfield designed it; it opened in 1932.")
    written = served.client.review_outcome(1)
    assert (written.answer, written.answer_from) == ("Bradfield designed it; it opened in 1932.", "reviewers")
    assert written.note == "the date was wrong" and written.queries == [] and written.queries_from is None
    # Two reviewers: the queries of both, each once; their notes are notes, not queries.
    served.decide(2, "alice", "refine_retrieval", "no date in the chunks", queries=["opening date", "Sydney 1932"])
    served.decide(2, "bob", "refine_retrieval", queries=["opening date"])
    refined = served.client.review_outcome(2)
    assert (refined.queries, refined.queries_from) == (["opening date", "Sydney 1932"], "reviewers")
    assert refined.answer is None
    assert served.client.review_events(since=0).events[-1].review_id == 2


def _waiting(client: Client, since: int, wait: float) -> tuple[threading.Thread, dict[str, Any]]:
    got: dict[str, Any] = {}

    def poll() -> None:
        began = time.monotonic()
        got["events"] = client.review_events(since=since, wait=wait)
        got["seconds"] = time.monotonic() - began

    thread = threading.Thread(target=poll)
    thread.start()
    return thread, got


def test_a_waiting_call_returns_as_soon_as_a_decision_is_recorded(served: Served) -> None:
    head = served.client.review_events().next
    began = time.monotonic()
    nothing = served.client.review_events(since=head, wait=0.6)
    assert nothing.events == [] and nothing.next == head and time.monotonic() - began >= 0.6
    # Decided on the page or over JSON: the waiting call is woken.
    thread, got = _waiting(served.client, head, 20)
    time.sleep(0.5)
    assert thread.is_alive()  # it waits: nothing decided yet
    served.decide(1, "alice", "unanswerable", "out of scope")
    thread.join(15)
    assert not thread.is_alive() and got["seconds"] < 10
    assert [e.review_id for e in got["events"].events] == [1]
    # Decided in another process (`suffice review decide` on the same log): seen within the poll interval.
    thread, got = _waiting(served.client, got["events"].next, 20)
    time.sleep(0.5)
    log = AuditLog(served.db)
    log.resolve_review(2, decision="answer", by="ada")
    log.resolve_review(2, decision="answer", by="cy")
    log.close()
    thread.join(15)
    assert not thread.is_alive() and got["seconds"] < 0.5 + outcomes.POLL_S + 5
    assert [(e.review_id, e.decided_by) for e in got["events"].events] == [(2, ["ada", "cy"])]


def test_the_wait_the_page_size_and_the_waiting_calls_are_bounded(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert served.get("/v1/reviews/events", wait=MAX_EVENTS_WAIT_S + 1).status_code == 422
    assert served.get("/v1/reviews/events", limit=MAX_EVENTS + 1).status_code == 422
    assert served.get("/v1/reviews/events", since=-1).status_code == 422
    for bad in ({"wait": MAX_EVENTS_WAIT_S + 1}, {"since": -1}, {"limit": 0}):
        with pytest.raises(ConfigError) as refused:
            served.client.review_events(**bad)
        assert refused.value.parameter == next(iter(bad))
    with pytest.raises(ConfigError, match="review_id"):
        served.client.review_outcome(0)
    monkeypatch.setattr(outcomes, "MAX_WAITERS", 1)
    thread, got = _waiting(served.client, served.client.review_events().next, 20)
    time.sleep(0.5)
    crowded = served.get("/v1/reviews/events", wait=5)
    assert crowded.status_code == 429 and crowded.headers["retry-after"] == str(outcomes.RETRY_AFTER_S)
    assert served.get("/v1/reviews/events").status_code == 200  # a call that does not wait still answers
    served.decide(1, "alice", "answer")
    thread.join(15)
    assert [e.review_id for e in got["events"].events] == [1]


def test_the_async_client_reads_the_same(served: Served) -> None:
    served.decide(1, "alice", "answer")

    async def main() -> tuple[Any, ReviewEvents, Any]:
        async with AsyncClient(served.url, api_key=KEY) as client:
            return await client.areview_outcome(1), await client.areview_events(since=0), client.review_outcome(1)

    outcome, events, blocking = asyncio.run(main())
    assert outcome == blocking == served.client.review_outcome(1) and outcome.decided_by == ["alice"]
    assert events == served.client.review_events(since=0)
    assert asyncio.run(served.client.areview_events(since=0)) == events


def test_the_openapi_document_types_the_outcome_routes_with_the_client_key(served: Served) -> None:
    spec = served.get("/openapi.json", key=None).json()
    outcome = spec["paths"]["/v1/reviews/{review_id}/outcome"]["get"]
    events = spec["paths"]["/v1/reviews/events"]["get"]
    assert (outcome["operationId"], events["operationId"]) == ("get_review_outcome", "review_events")
    assert outcome["security"] == events["security"] == [{"bearerAuth": []}]
    ok = "#/components/schemas/"
    assert outcome["responses"]["200"]["content"]["application/json"]["schema"]["$ref"] == ok + "ReviewOutcome"
    assert events["responses"]["200"]["content"]["application/json"]["schema"]["$ref"] == ok + "ReviewEvents"
    wait = next(p for p in events["parameters"] if p["name"] == "wait")["schema"]
    assert wait["maximum"] == MAX_EVENTS_WAIT_S
    assert {"404", "401"} <= set(outcome["responses"])


def test_a_record_the_service_sent_to_a_person_is_followed_and_resumed(tmp_path: Path) -> None:
    """The application judges through the service; both generations fail, so the record goes to a person; the
    application follows the decisions, finds its record's, and its pipeline acts on it, once."""
    db = tmp_path / "service.db"
    keys = make_keys(tmp_path / "reviewers", "alice")
    failing = ScriptedEngine(lambda request: "not json")  # both generations fail: the record goes to a person
    with live(failing, key=KEY, audit_db=db, reviewer_keys=tmp_path / "reviewers") as (_, port):
        url = f"http://127.0.0.1:{port}"
        sent = httpx.post(
            f"{url}/v1/judge/sufficiency",
            json={"id": "q7", "question": "Who designed the bridge?", "chunks": ["Bradfield designed it."]},
            headers={"authorization": f"Bearer {KEY}"},
            timeout=60,
        )
        assert sent.status_code == 200 and sent.json()["results"][0]["error"] is not None
        with Client(url, api_key=KEY) as client:
            head = client.review_events().next
            [queued] = httpx.get(
                f"{url}/v1/reviews", headers={"authorization": f"Bearer {keys['alice']}"}, timeout=30
            ).json()["reviews"]
            httpx.post(
                f"{url}/v1/reviews/{queued['id']}/decision",
                json={"decision": "unanswerable", "note": "no source names the designer's dates"},
                headers={"authorization": f"Bearer {keys['alice']}"},
                timeout=30,
            ).raise_for_status()
            [event] = client.review_events(since=head, wait=10).events
            assert (event.run_id, event.item_id) == (sent.headers["x-request-id"], "q7")  # the request it sent
            engine = ScriptedEngine(good)
            pipeline = Pipeline(
                Judge(engine, "sufficiency"), FunctionRetriever(lambda q, k: []), audit=tmp_path / "app.db"
            )
            outcome = pipeline.resume(event.review_id, source=client)
            assert (outcome.kind, outcome.id, outcome.decided_by) == ("abstained", "q7", ["alice"])
            assert "no source names the designer's dates" in outcome.reason
            assert pipeline.resume(event.review_id, source=client) == outcome
            rows = [r for r in pipeline.audit.export_rows() if r["rule"] == APPLIED_RULE]
            assert len(rows) == 1 and rows[0]["verdict"]["log_id"] == client.review_outcome(event.review_id).log_id
            assert engine.calls == []  # a person's decision: nothing judged again
            pipeline.audit.close()


def test_a_service_without_the_routes_is_not_a_missing_review(tmp_path: Path) -> None:
    with (
        live(ScriptedEngine(good), key=KEY) as (_, port),
        Client(f"http://127.0.0.1:{port}", api_key=KEY) as client,
        pytest.raises(ServiceError) as refused,
    ):
        client.review_outcome(1)
    assert not isinstance(refused.value, ReviewNotFoundError) and refused.value.status == 404


@pytest.mark.parametrize("doc", ["reviews.md", "security.md"])
def test_the_docs_state_the_bounds_of_the_events_route(doc: str) -> None:
    text = " ".join((DOCS / doc).read_text(encoding="utf-8").lower().split())
    for said in (
        f"at most {MAX_EVENTS_WAIT_S:g} s",
        f"once every {outcomes.POLL_S:g} s",
        f"at most {outcomes.MAX_WAITERS} calls wait",
    ):
        assert said in text, said
    assert doc != "reviews.md" or f"at most {MAX_EVENTS} events" in text


def test_the_docs_state_the_bounds_of_a_decisions_fields() -> None:
    text = " ".join((DOCS / "reviews.md").read_text(encoding="utf-8").lower().split())
    for said in (
        f"at most {MAX_ANSWER_CHARS:,} characters",
        f"from 1 to {MAX_QUERIES} queries",
        f"at most {MAX_QUERY_CHARS} characters each",
    ):
        assert said in text, said
