"""The review page and ``/v1/reviews`` of ``suffice serve --audit-db``, on a scripted engine: reviewers' own keys,
sessions and CSRF, escaping, two reviewers, the OpenAPI contract and the override counts in ``/metrics``."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from suffice.audit import AuditLog, write_key_file
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates.adequacy.store import RubricStore
from suffice.results import MAX_ANSWER_CHARS, MAX_QUERIES, MAX_QUERY_CHARS
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.reviews import MAX_NOTE_CHARS, REVIEW_BODY_BYTES, load_reviewer_keys
from suffice.server.service import GateService
from tests.audit.test_routes_reach_a_person import adequacy
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine

CLIENT_TOKEN = b"c" * 32
XSS = '<script>alert("chunk")</script><img src=x onerror=alert(1)>'


def make_keys(folder: Path, *names: str) -> dict[str, str]:
    folder.mkdir(exist_ok=True)
    for name in names:
        write_key_file(folder / f"{name}.key")
    return {name: (folder / f"{name}.key").read_text().strip() for name in names}


@pytest.fixture
def served(tmp_path: Path):
    db = tmp_path / "audit.db"
    log = AuditLog(db)
    seq = log.record(item_id="q1", gate="sufficiency", decision="human_review", scores={"p_sufficient": 0.41})
    log.enqueue_review(
        item_id="q1",
        gate="sufficiency",
        reason="the model escalated",
        evaluation_seq=seq,
        payload={
            "question": "Who designed the bridge?",
            "chunks": [{"id": "d1", "text": XSS, "source": "evil.html", "score": 0.5}],
            "verdict": {"is_sufficient": True, "confidence": 0.62},
            "rule": "model_escalated",
            "settings": {"gate": "sufficiency", "prompt_version": "v1"},
        },
    )
    log.enqueue_review(
        item_id="q2",
        gate="adequacy",
        reason="HIGH risk",
        payload={"question": "Is clause 4 in force?", "chunks": [], "verdict": {"risk_level": "HIGH"}, "rule": "r"},
    )
    log.close()
    keys = make_keys(tmp_path / "reviewers", "alice", "bob")
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",), audit_db=db, reviewer_keys=tmp_path / "reviewers")
    service = GateService(config, ScriptedEngine(good))
    client = TestClient(create_app(service, config, CLIENT_TOKEN), base_url="http://127.0.0.1")
    yield client, keys, db
    client.close()
    service.close()


def login(client: TestClient, key: str) -> str:
    """Log in; the CSRF token of the session's forms."""
    response = client.post("/reviews/login", data={"key": key}, follow_redirects=False)
    assert response.status_code == 303, response.text
    page = client.get("/reviews/1").text
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_the_page_asks_for_a_key_and_refuses_a_wrong_one(served):
    client, _, _ = served
    page = client.get("/reviews")
    assert page.status_code == 200 and 'name="key"' in page.text
    assert "Who designed" not in page.text
    assert client.post("/reviews/login", data={"key": "00" * 32}).status_code == 401
    assert client.post("/reviews/login", data={"key": CLIENT_TOKEN.decode()}).status_code == 401


def test_a_review_shows_query_context_verdict_scores_and_rule_escaped(served):
    client, keys, _ = served
    login(client, keys["alice"])
    listed = client.get("/reviews").text
    assert 'href="/reviews/1"' in listed and "model_escalated" in listed
    page = client.get("/reviews/1")
    text = page.text
    assert "Who designed the bridge?" in text
    assert "evil.html" in text and "confidence" in text and "0.62" in text
    assert "p_sufficient" in text and "0.41" in text  # the evaluation row's scores
    assert "model_escalated" in text and "prompt_version" in text
    assert "&lt;script&gt;alert(&quot;chunk&quot;)&lt;/script&gt;" in text
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_a_decision_needs_the_session_csrf_token_and_records_who_decided(served):
    client, keys, db = served
    csrf = login(client, keys["alice"])
    form = {"decision": "refine_retrieval", "label": "sufficient", "note": "one source"}
    assert client.post("/reviews/1/decision", data=form, follow_redirects=False).status_code == 403
    assert client.post("/reviews/1/decision", data={**form, "csrf": "x" * 43}).status_code == 403
    assert AuditLog(db).review(1)["status"] == "open"
    done = client.post("/reviews/1/decision", data={**form, "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    assert "Resolved by alice" in client.get(done.headers["location"]).text
    row = AuditLog(db).review(1)
    assert (row["resolved_by"], row["decision"], row["label"], row["note"]) == (
        "alice",
        "refine_retrieval",
        "sufficient",
        "one source",
    )


def test_a_cookie_from_another_site_cannot_decide_without_the_token(served):
    client, keys, db = served
    login(client, keys["alice"])
    cookie = client.post("/reviews/1/decision", data={"decision": "answer"}, follow_redirects=False)
    assert cookie.status_code == 403
    assert AuditLog(db).review(1)["decisions"] == "[]"


def test_the_client_token_reads_no_review_and_a_reviewer_key_judges_nothing(served):
    client, keys, _ = served
    assert client.get("/v1/reviews", headers=bearer(CLIENT_TOKEN.decode())).status_code == 401
    assert client.get("/v1/reviews").status_code == 401
    item = {"id": "x", "question": "q?", "chunks": ["c"]}
    assert client.post("/v1/judge/sufficiency", json=item, headers=bearer(keys["alice"])).status_code == 401
    assert client.post("/v1/judge/sufficiency", json=item, headers=bearer(CLIENT_TOKEN.decode())).status_code == 200


def test_two_reviewers_over_json_disagree_then_agree(served):
    client, keys, db = served
    listed = client.get("/v1/reviews", headers=bearer(keys["alice"])).json()["reviews"]
    assert [(r["id"], r["reviewers"], r["state"]) for r in listed] == [(1, 1, "open"), (2, 2, "open")]
    first = client.post("/v1/reviews/2/decision", json={"decision": "answer"}, headers=bearer(keys["alice"]))
    assert first.status_code == 200 and first.json()["state"] == "awaiting"
    again = client.post("/v1/reviews/2/decision", json={"decision": "answer"}, headers=bearer(keys["alice"]))
    assert again.status_code == 409
    # bob does not see alice's decision before he decides: independent reviewers
    assert client.get("/v1/reviews/2", headers=bearer(keys["bob"])).json()["decisions"] == []
    second = client.post("/v1/reviews/2/decision", json={"decision": "unanswerable"}, headers=bearer(keys["bob"]))
    assert second.json()["state"] == "disputed" and not second.json()["resolved"]
    shown = client.get("/v1/reviews/2", headers=bearer(keys["bob"])).json()
    assert [d["by"] for d in shown["decisions"]] == ["alice", "bob"]
    assert AuditLog(db).review(2)["status"] == "open"
    assert (
        client.post("/v1/reviews/9/decision", json={"decision": "answer"}, headers=bearer(keys["bob"])).status_code
        == 404
    )
    bad = client.post("/v1/reviews/2/decision", json={"decision": "maybe"}, headers=bearer(keys["bob"]))
    assert bad.status_code == 422


def test_the_openapi_document_types_the_review_routes(served):
    client, _, _ = served
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    assert {"/v1/reviews", "/v1/reviews/{review_id}", "/v1/reviews/{review_id}/decision"} <= set(paths)
    assert "/reviews" not in paths
    decide = paths["/v1/reviews/{review_id}/decision"]["post"]
    assert decide["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/DecisionRequest")
    ok = decide["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok.endswith("/DecisionAnswer")
    schemas = spec["components"]["schemas"]
    assert schemas["DecisionRequest"]["properties"]["decision"]["enum"] == [
        "answer",
        "refine_retrieval",
        "unanswerable",
    ]
    assert "payload" in schemas["ReviewDetail"]["properties"]


def test_metrics_count_overrides_per_gate_and_rule(served):
    client, keys, _ = served
    # the machine said sufficient; alice says not: an override
    client.post("/v1/reviews/1/decision", json={"decision": "unanswerable"}, headers=bearer(keys["alice"]))
    text = client.get("/metrics", headers=bearer(CLIENT_TOKEN.decode())).text
    assert 'suffice_review_overrides_total{gate="sufficiency",rule="model_escalated"} 1.0' in text
    assert 'suffice_reviews{gate="adequacy",rule="r",status="open"} 1.0' in text


def test_a_key_file_others_may_read_or_a_missing_folder_is_refused_naming_the_setting(tmp_path: Path):
    make_keys(tmp_path / "keys", "ada")
    (tmp_path / "keys" / "ada.key").chmod(0o644)
    with pytest.raises(ConfigError, match="reviewer_keys") as caught:
        load_reviewer_keys(tmp_path / "keys")
    assert "mode 0644" in str(caught.value)
    with pytest.raises(ConfigError, match="reviewer_keys"):
        load_reviewer_keys(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"reviewer_keys.*needs audit_db"):
        ServeConfig(judge=JudgeConfig(), reviewer_keys=tmp_path / "keys")


# -- a decision's own fields: the answer to deliver, the queries to search ------------------------------------------
def test_the_page_offers_each_decision_its_field_and_records_only_the_chosen_ones(served):
    client, keys, db = served
    csrf = login(client, keys["alice"])
    page = client.get("/reviews/1").text
    assert '<textarea id="answer" name="answer"' in page and '<textarea id="queries" name="queries"' in page
    # Shown with their decision by CSS alone (no script runs): hidden, and each radio's :checked shows its own.
    assert ".for-answer,.for-refine{display:none}" in page
    assert "#decision-answer:checked~.for-answer{display:block}" in page
    assert "#decision-refine_retrieval:checked~.for-refine{display:block}" in page
    form = {
        "csrf": csrf,
        "decision": "refine_retrieval",
        "queries": "bridge designer\r\n\r\n  Bradfield 1932 \r\n",
        "answer": "left in the hidden answer field",
        "note": "one source only",
    }
    assert client.post("/reviews/1/decision", data=form, follow_redirects=False).status_code == 303
    [entry] = json.loads(AuditLog(db).review(1)["decisions"])
    assert entry["queries"] == ["bridge designer", "Bradfield 1932"] and "answer" not in entry
    assert entry["note"] == "one source only"
    assert "queries: bridge designer | Bradfield 1932" in client.get("/reviews/1").text
    # Review 2: too many queries are refused, naming the field, and nothing is written; an answer is kept.
    many = {"csrf": csrf, "decision": "refine_retrieval", "queries": "\n".join(f"q{i}" for i in range(MAX_QUERIES + 1))}
    refused = client.post("/reviews/2/decision", data=many, follow_redirects=False)
    assert refused.status_code == 422 and "queries" in refused.text and f"at most {MAX_QUERIES}" in refused.text
    assert AuditLog(db).review(2)["decisions"] == "[]"
    written = {"csrf": csrf, "decision": "answer", "answer": "Clause 4 is in force.\n", "queries": "ignored"}
    assert client.post("/reviews/2/decision", data=written, follow_redirects=False).status_code == 303
    [entry] = json.loads(AuditLog(db).review(2)["decisions"])
    assert entry["answer"] == "Clause 4 is in force." and "queries" not in entry


def test_over_json_an_answer_or_queries_for_another_decision_or_out_of_bounds_is_a_422_naming_it(served):
    client, keys, db = served
    for body, words in (
        ({"decision": "refine_retrieval", "answer": "Bradfield."}, "answer: only an 'answer' decision"),
        ({"decision": "answer", "queries": ["designer"]}, "queries: only a 'refine_retrieval' decision"),
        ({"decision": "refine_retrieval", "queries": ["q"] * (MAX_QUERIES + 1)}, "queries"),
        ({"decision": "refine_retrieval", "queries": ["y" * (MAX_QUERY_CHARS + 1)]}, "queries"),
        ({"decision": "refine_retrieval", "queries": ["two\nlines"]}, "one line each"),
        ({"decision": "answer", "answer": "x" * (MAX_ANSWER_CHARS + 1)}, "answer"),
    ):
        refused = client.post("/v1/reviews/1/decision", json=body, headers=bearer(keys["alice"]))
        assert refused.status_code == 422 and words in refused.text, (body, refused.text[:300])
    assert AuditLog(db).review(1)["decisions"] == "[]"
    done = client.post(
        "/v1/reviews/1/decision",
        json={"decision": "refine_retrieval", "queries": ["who designed the bridge"]},
        headers=bearer(keys["alice"]),
    )
    assert done.status_code == 200 and done.json()["resolved"]
    [shown] = client.get("/v1/reviews/1", headers=bearer(keys["alice"])).json()["decisions"]
    assert shown["queries"] == ["who designed the bridge"] and shown["answer"] is None
    schema = client.get("/openapi.json").json()["components"]["schemas"]["DecisionRequest"]["properties"]
    assert schema["queries"]["anyOf"][0]["maxItems"] == MAX_QUERIES
    assert schema["queries"]["anyOf"][0]["items"]["maxLength"] == MAX_QUERY_CHARS
    assert schema["answer"]["anyOf"][0]["maxLength"] == MAX_ANSWER_CHARS


def test_the_largest_decision_fits_the_review_body_limit(served):
    """A plain-text decision at every bound (a note, and the answer or every query) is read, not cut off as too
    large: the bounds fit the review routes' body limit."""
    client, keys, db = served
    csrf = login(client, keys["alice"])
    note = "n" * MAX_NOTE_CHARS
    form = {"csrf": csrf, "decision": "answer", "answer": "a " * (MAX_ANSWER_CHARS // 2), "note": note}
    assert len(urlencode(form)) < REVIEW_BODY_BYTES
    assert client.post("/reviews/2/decision", data=form, follow_redirects=False).status_code == 303
    queries = [f"{i:02d}" + "q" * (MAX_QUERY_CHARS - 2) for i in range(MAX_QUERIES)]
    body = {"decision": "refine_retrieval", "queries": queries, "note": note}
    assert len(json.dumps(body)) < REVIEW_BODY_BYTES
    assert client.post("/v1/reviews/2/decision", json=body, headers=bearer(keys["bob"])).status_code == 200
    answer, refine = json.loads(AuditLog(db).review(2)["decisions"])
    assert len(answer["answer"]) == MAX_ANSWER_CHARS - 1 and refine["queries"] == queries


def test_an_adequacy_review_shows_each_rubric_criterion_with_its_score_and_assessment(tmp_path: Path):
    """A record the adequacy gate sends to a person, served and queued as every entry point queues it: the page lists
    each criterion of the rubric in order, with the model's score and assessment, critical or not, met or not."""
    db = tmp_path / "audit.db"
    keys = make_keys(tmp_path / "reviewers", "alice")
    config = ServeConfig(
        judge=JudgeConfig(gate="adequacy"), gates=("adequacy",), audit_db=db, reviewer_keys=tmp_path / "reviewers"
    )
    scores = [0.9, 0.2, 0.8, 0.7]
    said = ["Guideline of 2025.", "No contraindication is named.", "Adults, as asked.", "<b>5 mg</b> daily."]
    output = json.loads(adequacy("ESCALATE_TO_HUMAN", rubric="clinical-guidance"))
    output["criteria"] = [
        {"criterion": n, "score": s, "assessment": a} for n, (s, a) in enumerate(zip(scores, said, strict=True), 1)
    ]
    service = GateService(config, ScriptedEngine(lambda request: json.dumps(output)))
    client = TestClient(create_app(service, config, CLIENT_TOKEN), base_url="http://127.0.0.1")
    try:
        record = {"id": "dose", "question": "What dose for adults?", "chunks": [{"id": 0, "text": "5 mg daily."}]}
        body = {"items": [record], "options": {"rubric": "clinical-guidance"}}
        judged = client.post("/v1/judge/adequacy", json=body, headers=bearer(CLIENT_TOKEN.decode()))
        assert judged.status_code == 200, judged.text
        login(client, keys["alice"])
        page = client.get("/reviews/1").text
    finally:
        client.close()
        service.close()
    rubric = RubricStore().get("clinical-guidance")
    section = page.split("<h2>Rubric criteria</h2>", 1)[1].split("</section>", 1)[0]
    rows = re.findall(r'<tr class="criterion">(.*?)</tr>', section)
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows]
    assert [(c[0], c[1]) for c in cells] == [
        (str(n), html.escape(r.text, quote=True)) for n, r in enumerate(rubric.criteria, 1)
    ]
    assert [c[2] for c in cells] == ["critical" if r.critical else "" for r in rubric.criteria]
    assert [c[3] for c in cells] == [str(s) for s in scores]
    assert [c[5] for c in cells] == ["met", "not met", "met", "met"]
    assert [c[6] for c in cells] == [html.escape(a, quote=True) for a in said]  # escaped as every value is
    assert "<b>5 mg" not in page
    # Shown once: not again among the verdict's flattened scores.
    assert "criteria[0]" not in page.split("<h2>Verdict and scores</h2>", 1)[1].split("</section>", 1)[0]
