"""The review page in a real headless Chromium: log in with a reviewer's key, open a review, decide it, and find
the decision in the audit log under the reviewer's name.

Once over a uvicorn server on the scripted engine (fast), and twice end to end on the real engine: a real
``suffice serve`` process over the audit log, a verdict it judged queued for review, decided on the page and over
JSON, exported as labels and calibrated on by ``suffice calibrate``; and a record the service sent to two people,
who ask on the page to refine retrieval with their query, which the application's ``Pipeline.resume`` searches and
judges, the audit export showing each step.  Set ``SUFFICE_UPDATE_SCREENSHOT=1`` to write the page as
docs/review-page.png (the README shows it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from suffice.audit import AuditLog, write_key_file
from suffice.exceptions import EXIT_OK
from tests.batch.test_runner import good
from tests.browser import Page, browser
from tests.fakes import ScriptedEngine
from tests.test_client import serve

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "review-page.png"
#: A chunk that would run script and set a flag if the page let it.
XSS = '<script>window.__owned = 1</script><img src=x onerror="window.__owned = 2">'


def reviewers(folder: Path, *names: str) -> dict[str, str]:
    folder.mkdir(exist_ok=True)
    for name in names:
        write_key_file(folder / f"{name}.key")
    return {name: (folder / f"{name}.key").read_text().strip() for name in names}


def log_in(page: Page, base: str, key: str) -> None:
    page.goto(f"{base}/reviews")
    assert page.evaluate("!!document.querySelector('#key')"), page.text()
    page.fill("#key", key)
    page.click("form[action='/reviews/login'] button[type=submit]")


def shown(page: Page, selector: str) -> bool:
    """Whether the element is laid out (its own or an ancestor's ``display: none`` hides it)."""
    return bool(page.evaluate(f"document.querySelector({json.dumps(selector)}).getClientRects().length > 0"))


def choose(page: Page, decision: str) -> None:
    """Click the decision's radio button, as a reviewer does (its field appears by CSS alone)."""
    page.evaluate(f"document.querySelector('input[name=decision][value={decision}]').click()")


def decide(page: Page, decision: str, label: str, note: str, queries: str = "", answer: str = "") -> None:
    choose(page, decision)
    page.evaluate(f"document.querySelector('#label').value = {json.dumps(label)}")
    page.fill("#note", note)
    if queries:
        assert shown(page, "#queries"), "the queries field shows for refine retrieval"
        page.fill("#queries", queries)
    if answer:
        assert shown(page, "#answer"), "the answer field shows for answer"
        page.fill("#answer", answer)
    page.click("form[action$='/decision'] button[type=submit]")


def keep_screenshot(shot: Path) -> None:
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("SUFFICE_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, SCREENSHOT)


def test_a_reviewer_decides_a_review_in_a_headless_browser(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    log = AuditLog(db)
    seq = log.record(item_id="q-7", gate="sufficiency", decision="human_review", scores={"p_sufficient": 0.47})
    log.enqueue_review(
        item_id="q-7",
        gate="sufficiency",
        reason="the model said sufficient with low confidence",
        evaluation_seq=seq,
        payload={
            "question": "Who designed the Sydney Harbour Bridge?",
            "chunks": [
                {"id": "d1", "text": "The bridge opened in 1932.", "source": "bridge.txt", "score": 0.82},
                {"id": "d2", "text": XSS, "source": "forum-post.html", "score": 0.31},
            ],
            "verdict": {
                "is_sufficient": True,
                "confidence": 0.55,
                "required_entities": ["designer"],
                "missing_information": ["who designed it"],
            },
            "rule": "model_escalated",
            "settings": {"gate": "sufficiency", "prompt_version": "v1", "model": "Qwen2.5-7B-Instruct"},
        },
    )
    log.close()
    keys = reviewers(tmp_path / "reviewers", "alice")
    with (
        serve(ScriptedEngine(good), audit_db=db, reviewer_keys=tmp_path / "reviewers") as base,
        browser(tmp_path / "profile") as page,
    ):
        log_in(page, base, keys["alice"])
        assert "Open reviews (1)" in page.text()
        page.click("a[href='/reviews/1']")
        text = page.text()
        assert "Who designed the Sydney Harbour Bridge?" in text
        assert "<script>window.__owned = 1</script>" in text  # shown as text ...
        assert page.evaluate("window.__owned === undefined")  # ... and never run
        assert page.evaluate("document.scripts.length") == 0
        assert "model_escalated" in text and "p_sufficient" in text
        # Each decision's field shows once it is chosen, with no script: CSS on the checked radio button.
        assert not shown(page, "#answer") and not shown(page, "#queries")
        choose(page, "answer")
        assert shown(page, "#answer") and not shown(page, "#queries")
        choose(page, "refine_retrieval")
        assert shown(page, "#queries") and not shown(page, "#answer")
        page.fill("#queries", "Sydney Harbour Bridge designer")  # as the docs' picture shows it
        shot = tmp_path / "review-page.png"
        page.screenshot(shot)
        keep_screenshot(shot)
        query = "Sydney Harbour Bridge designer"
        decide(page, "refine_retrieval", "insufficient", "No chunk names the designer.", queries=query)
        assert "Recorded. Resolved by alice." in page.text()
    row = AuditLog(db).review(1)
    assert (row["status"], row["resolved_by"], row["decision"], row["label"]) == (
        "resolved",
        "alice",
        "refine_retrieval",
        "insufficient",
    )
    assert row["note"] == "No chunk names the designer."
    assert json.loads(row["decisions"])[0]["queries"] == ["Sydney Harbour Bridge designer"]
    assert AuditLog(db).verify().ok


@pytest.mark.engine
def test_a_served_verdict_reviewed_in_the_browser_becomes_a_label_calibrate_takes(
    tmp_path: Path, vllm_server: str
) -> None:
    from tests.conftest import load_records
    from tests.vllm_server import SERVE_KEY, running_suffice_serve, through

    db = tmp_path / "audit.db"
    keys = reviewers(tmp_path / "reviewers", "alice", "bob")
    records = load_records("squad2.jsonl", 2)
    extra = ("--audit-db", str(db), "--reviewer-keys", str(tmp_path / "reviewers"), "--gate", "sufficiency")
    with running_suffice_serve(tmp_path, vllm_server, *extra) as base:
        judged = httpx.post(
            f"{base}/v1/judge/sufficiency",
            json=records,
            headers={"Authorization": f"Bearer {SERVE_KEY}"},
            timeout=600,
        )
        assert judged.status_code == 200, judged.text
        rows = {row["item_id"]: row for row in AuditLog(db).rows()}
        log = AuditLog(db)
        for record, result in zip(records, judged.json()["results"], strict=True):
            log.enqueue_review(
                item_id=str(record["id"]),
                gate="sufficiency",
                reason="queued by the test",
                evaluation_seq=rows[str(record["id"])]["seq"],
                payload={**record, "verdict": result["verdict"], "rule": "model_escalated"},
            )
        log.close()
        with browser(tmp_path / "profile") as page:
            log_in(page, base, keys["alice"])
            page.click("a[href='/reviews/1']")
            assert str(records[0]["question"]) in page.text()
            decide(page, "answer", "sufficient", "checked by hand")
            assert "Resolved by alice" in page.text()
        over_json = httpx.post(
            f"{base}/v1/reviews/2/decision",
            json={"decision": "unanswerable", "label": "insufficient"},
            headers={"Authorization": f"Bearer {keys['bob']}"},
            timeout=30,
        )
        assert over_json.status_code == 200 and over_json.json()["agreed_by"] == ["bob"]
    decided = AuditLog(db).reviews("resolved")
    assert [(r["id"], r["resolved_by"]) for r in decided] == [(1, "alice"), (2, "bob")]

    def suffice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "suffice.cli.main", *args], capture_output=True, text=True, timeout=1200
        )

    labels = tmp_path / "labels.jsonl"
    exported = suffice("review", "export", "--labels", str(labels), "--gate", "sufficiency", "--audit-db", str(db))
    assert exported.returncode == EXIT_OK, exported.stderr
    assert "2 labeled records written" in exported.stderr
    calibrated = suffice(
        "calibrate", str(labels), "--gate", "sufficiency", "-o", str(tmp_path / "calib"), *through(vllm_server),
        "--no-progress",
    )  # fmt: skip
    assert calibrated.returncode == EXIT_OK, calibrated.stderr[-3000:]
    report = json.loads((tmp_path / "calib" / "report.json").read_text())
    assert report["scores"]["decision"]["n"] == 2
    assert report["scores"]["decision"]["positives"] == 1


# -- a person's "refine retrieval" takes effect, end to end on the real engine ----------------------------------------
QUESTION = "When were Ada Lovelace's notes published?"
NOTES = {"id": "notes", "text": "Ada Lovelace wrote notes on Babbage's Analytical Engine.", "source": "notes.txt"}
YEAR = {"id": "year", "text": "Lovelace's notes were published in 1843.", "source": "year.txt"}
REVIEWERS_QUERY = "Lovelace notes publication year"


@pytest.mark.engine
def test_a_served_record_refined_on_the_page_is_resumed_by_the_application_and_the_export_shows_every_step(
    tmp_path: Path, vllm_server: str
) -> None:
    """The application judges one record through ``suffice serve`` with no retrieval left, under the recovery
    gate's strict (high-stakes) threshold: whatever the model says, the record goes to two people.  Both decide
    "refine retrieval" on the page in Chromium, typing the query to search; the application learns it from the
    events stream and its ``Pipeline.resume`` searches that query (its retriever finds a chunk for it alone), judges
    the wider evidence once on the same vLLM server, and delivers or abstains as that verdict routes (a loose
    threshold: no second person); ``suffice audit export`` of the service's log shows each step in order."""
    from suffice import Client, Judge
    from suffice.audit.reviewing import APPLIED_RULE
    from suffice.cli.main import main
    from suffice.config import JudgeConfig
    from suffice.harness.pipeline import Outcome, Pipeline, PipelineConfig
    from suffice.harness.retrieval import FunctionRetriever
    from suffice.serving.engine_config import EngineConfig
    from suffice.serving.openai.engine import OpenAIEngine
    from tests.vllm_server import SERVE_KEY, running_suffice_serve

    db, app_db = tmp_path / "audit.db", tmp_path / "application.db"
    keys = reviewers(tmp_path / "reviewers", "alice", "bob")
    record = {"id": "lovelace", "question": QUESTION, "response": "They were published in 1843.", "chunks": [NOTES]}
    extra = ("--audit-db", str(db), "--reviewer-keys", str(tmp_path / "reviewers"), "--gate", "recovery")
    with (
        running_suffice_serve(tmp_path, vllm_server, *extra) as base,
        Client(base, api_key=SERVE_KEY, gate="recovery") as client,
    ):
        head = client.review_events().next
        judged = client.judge(record, options={"retrieval_exhausted": True})
        # Strict and no retrieval left: every verdict goes to a person (two failed generations too), by this rule.
        rule = "two_failed_generations"
        if judged.verdict is not None:
            rule = str(client.gate_for(options={"retrieval_exhausted": True}).route(judged.verdict).rule)
        reader = AuditLog(db)
        [queued] = reader.reviews()
        reader.close()
        assert (queued["item_id"], queued["rule"], queued["reviewers"]) == ("lovelace", rule, 2)

        with browser(tmp_path / "profile") as page:
            for name, note in (("alice", "no chunk dates the notes"), ("bob", "")):
                log_in(page, base, keys[name])
                page.click(f"a[href='/reviews/{queued['id']}']")
                assert QUESTION in page.text()
                decide(page, "refine_retrieval", "insufficient", note, queries=REVIEWERS_QUERY)
                page.click("form[action='/reviews/logout'] button[type=submit]")
            page.goto(f"{base}/reviews")  # logged out: the login form again
            assert page.evaluate("!!document.querySelector('#key')")

        [event] = client.review_events(since=head, wait=10).events
        assert (event.item_id, event.decision, event.decided_by) == ("lovelace", "refine_retrieval", ["alice", "bob"])
        decided = client.review_outcome(event.review_id)
        assert (decided.queries, decided.queries_from) == ([REVIEWERS_QUERY], "reviewers")  # not alice's note

        searched: list[str] = []

        def search(query: str, k: int) -> list[dict[str, str]]:
            searched.append(query)
            return [YEAR] if query == REVIEWERS_QUERY else []

        engine = OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server))
        judge = Judge(engine, config=JudgeConfig(gate="recovery", options={"threshold": "loose"}))
        # The application keeps its own log: one SQLite audit log has one writing process (several services on
        # one store are issue 54's); the service's export holds the judging and the decisions, the application's
        # the resume.
        pipeline = Pipeline(judge, FunctionRetriever(search), PipelineConfig(max_rounds=1), audit=app_db)
        try:
            outcome = pipeline.resume(event.review_id, source=client)
            assert pipeline.resume(event.review_id, source=client) == outcome  # applied once
        finally:
            pipeline.audit.close()
            engine.close()

    assert searched == [REVIEWERS_QUERY]
    assert (outcome.resumed_from, outcome.decided_by, outcome.id) == (event.review_id, ["alice", "bob"], "lovelace")
    assert outcome.chunk_ids == ["notes", "year"]  # the reviewers' chunk, added to the ones they saw
    retrieval, judged_again = outcome.trace
    assert (retrieval.route, retrieval.queries, retrieval.new_chunks) == ("retrieval", [REVIEWERS_QUERY], 1)
    # Delivered or abstained as the verdict on the wider evidence routes (no retrieval left, no second person).
    assert outcome.kind == {"deliver": "delivered", "abstain": "abstained"}[judged_again.route]

    def exported(log_path: Path) -> list[dict]:
        out = log_path.with_suffix(".jsonl")
        assert main(["audit", "export", str(log_path), "--output", str(out)]) == EXIT_OK
        return [json.loads(line) for line in out.read_text().splitlines()]

    first = next(r for r in exported(db) if r["run_id"] == event.run_id)
    resumed = exported(app_db)
    again = next(r for r in resumed if r["seq"] == judged_again.audit_seq)
    [applied] = [r for r in resumed if r["rule"] == APPLIED_RULE]
    assert again["seq"] < applied["seq"]
    # The original row: judged, sent to a person, and the two decisions with the query, in order.
    assert (first["item_id"], first["decision"], first["rule"]) == ("lovelace", "human_review", rule)
    [review] = first["reviews"]
    decided_event, resolved_event = review["events"]
    assert (decided_event["event"], resolved_event["event"]) == ("decided", "resolved")
    assert [d["by"] for d in resolved_event["decisions"]] == ["alice", "bob"]
    assert [d["queries"] for d in resolved_event["decisions"]] == [[REVIEWERS_QUERY]] * 2
    assert resolved_event["queries"] == [REVIEWERS_QUERY]
    assert first["ts"] <= decided_event["ts"] <= resolved_event["ts"] <= applied["ts"]
    # The new chunk judged, then the decision applied with what it gave.
    assert [c["id"] for c in again["chunks"]] == ["notes", "year"] and again["decision"] == judged_again.route
    assert (applied["run_id"], applied["decision"]) == (again["run_id"], "retrieve_more")  # the decision's route
    assert Outcome.model_validate_json(applied["raw_output"]) == outcome  # and the outcome it gave
    assert (applied["verdict"]["review_id"], applied["verdict"]["decided_by"]) == (event.review_id, ["alice", "bob"])
    assert (applied["verdict"]["queries"], applied["verdict"]["queries_from"]) == ([REVIEWERS_QUERY], "reviewers")
    for path in (db, app_db):
        log = AuditLog(path)
        assert log.verify().ok
        if path == app_db:
            assert log.retrievals()[-1]["queries"] == [REVIEWERS_QUERY]
        log.close()


def test_a_recovery_review_colours_each_segment_by_its_label_in_the_browser(tmp_path: Path) -> None:
    """Issue 49: a reviewer sees which sentence failed: each segment one row, its colour its label's, its sources
    beside it, and a sentence that would run script shown as text."""
    db = tmp_path / "audit.db"
    log = AuditLog(db)
    seq = log.record(item_id="ada", gate="recovery", decision="human_review", scores={"support_ratio": 0.5})
    segments = [
        {"index": 0, "start": 0, "end": 20, "kind": "sentence", "text": "Ada wrote the notes.", "label": "supported"},
        {"index": 1, "start": 21, "end": 40, "kind": "sentence", "text": XSS, "label": "unsupported"},
        {"index": 2, "start": 41, "end": 60, "kind": "sentence", "text": "They cover loops.", "label": "partial"},
    ]
    segments[0]["sources"], segments[1]["sources"], segments[2]["sources"] = ["ada.txt"], [], ["loops.txt"]
    log.enqueue_review(
        item_id="ada",
        gate="recovery",
        reason="PARTIALLY_SUFFICIENT in high-stakes use goes to human review",
        evaluation_seq=seq,
        payload={
            "question": "Who wrote the notes?",
            "response": "...",
            "chunks": [{"id": 0, "text": "Ada wrote the notes.", "source": "ada.txt"}],
            "verdict": {"classification": "PARTIALLY_SUFFICIENT", "segments": segments},
            "rule": "partial_under_high_stakes",
        },
    )
    log.close()
    keys = reviewers(tmp_path / "reviewers", "alice")
    with (
        serve(ScriptedEngine(good), audit_db=db, reviewer_keys=tmp_path / "reviewers") as base,
        browser(tmp_path / "profile") as page,
    ):
        log_in(page, base, keys["alice"])
        page.goto(f"{base}/reviews/1")
        rows = page.evaluate(
            "[...document.querySelectorAll('tr.segment')].map(r => [r.className, getComputedStyle(r).backgroundColor,"
            " getComputedStyle(r.cells[0]).borderLeftColor, r.cells[1].innerText, r.cells[2].innerText,"
            " r.cells[3].innerText])"
        )
        assert page.evaluate("window.__owned === undefined") and page.evaluate("document.scripts.length") == 0
    assert [(r[0], r[3], r[4], r[5]) for r in rows] == [
        ("segment seg-supported", "Ada wrote the notes.", "supported", "ada.txt"),
        ("segment seg-unsupported", XSS, "NOT supported", "—"),
        ("segment seg-partial", "They cover loops.", "partly supported", "loops.txt"),
    ]
    # Three labels, three colours: the failed sentence stands out from the supported one.
    assert len({r[2] for r in rows}) == 3 and rows[1][1] != rows[0][1]
