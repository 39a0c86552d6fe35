"""A review's decisions: the label a reviewer may correct, who decided, two independent reviewers for HIGH risk
(disagreement stays open, agreement is reported), the machine's label and overrides, and every decision chained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice.audit import AuditLog
from suffice.audit.reviewing import machine_label, review_outcome, reviewers_for, state_of
from suffice.exceptions import AuditError
from suffice.results import MAX_ANSWER_CHARS, MAX_QUERIES, MAX_QUERY_CHARS
from tests.audit.test_audit import KEY, sql

SUFFICIENT = {"is_sufficient": True, "confidence": 0.9}
HIGH_RISK = {"decision": {"decision": "FAIL", "composite_score": 0.4}, "risk_level": "HIGH", "rubric": "legal"}


@pytest.fixture(params=[None, KEY], ids=["unkeyed", "keyed"])
def log(request: pytest.FixtureRequest, tmp_path: Path):
    opened = AuditLog(tmp_path / "a.db", key=request.param)
    yield opened
    opened.close()


def queue(log: AuditLog, verdict: dict | None = None, **extra) -> int:
    payload = {"question": "q?", "chunks": [], "verdict": verdict, "rule": "partial_under_high_stakes", **extra}
    return log.enqueue_review(item_id="q1", gate="sufficiency", reason="a person decides", payload=payload)


def test_one_reviewer_resolves_with_a_corrected_label_and_is_recorded(log):
    rid = queue(log, SUFFICIENT)
    done = log.resolve_review(rid, decision="refine_retrieval", by="ada", note="one source only", label=True)
    assert done.resolved and done.agreed_by == ("ada",)
    row = log.review(rid)
    assert (row["status"], row["decision"], row["label"], row["resolved_by"]) == (
        "resolved",
        "refine_retrieval",
        "sufficient",
        "ada",
    )
    assert row["rule"] == "partial_under_high_stakes"
    assert [d["by"] for d in json.loads(row["decisions"])] == ["ada"]
    assert log.verify().ok


def test_without_a_correction_the_decision_implies_the_label(log):
    rid = queue(log, SUFFICIENT)
    log.resolve_review(rid, decision="unanswerable", by="ada")
    assert log.review(rid)["label"] == "insufficient"


def test_a_high_risk_review_needs_two_reviewers_and_disagreement_stays_open(log):
    rid = queue(log, HIGH_RISK)
    assert log.review(rid)["reviewers"] == 2
    first = log.resolve_review(rid, decision="answer", by="ada")
    assert not first.resolved and not first.disputed
    assert state_of(log.review(rid)) == "awaiting"
    with pytest.raises(AuditError, match="ada decided it already"):
        log.resolve_review(rid, decision="answer", by="ada")
    second = log.resolve_review(rid, decision="unanswerable", by="bob")
    assert second.disputed and "disagree" in second.summary()
    assert log.review(rid)["status"] == "open"
    assert state_of(log.review(rid)) == "disputed"
    third = log.resolve_review(rid, decision="answer", by="cy", note="checked the clause")
    assert third.resolved and third.agreed_by == ("ada", "cy")
    assert "2 reviewers agree (ada, cy)" in third.summary()
    row = log.review(rid)
    assert (row["status"], row["decision"], row["resolved_by"]) == ("resolved", "answer", "ada, cy")
    assert row["note"] == "cy: checked the clause"
    report = log.verify()
    assert report.ok and report.review_events == 4  # enqueued, decided, decided, resolved


def test_two_reviewers_agreeing_on_the_decision_but_not_the_label_do_not_agree(log):
    rid = queue(log, HIGH_RISK)
    log.resolve_review(rid, decision="answer", by="ada", label=False)
    assert not log.resolve_review(rid, decision="answer", by="bob").resolved


def test_a_payload_or_its_settings_may_set_the_reviewers_and_the_enqueuer_overrides(log):
    assert reviewers_for({"settings": {"reviewers": "3"}}) == 3
    assert reviewers_for({"settings": {"high_stakes": True}}) == 2
    assert reviewers_for({"verdict": SUFFICIENT}) == 1
    rid = log.enqueue_review(item_id="x", gate="adequacy", reason="r", payload={"verdict": HIGH_RISK}, reviewers=1)
    assert log.resolve_review(rid, decision="answer", by="ada").resolved
    with pytest.raises(AuditError, match="reviewers=0"):
        log.enqueue_review(item_id="x", gate="adequacy", reason="r", payload={}, reviewers=0)


def test_the_machine_label_and_overrides_are_counted_per_gate_and_rule(log):
    assert machine_label("adequacy", {"verdict": HIGH_RISK}) == "insufficient"
    assert machine_label("recovery", {"verdict": {"classification": "SUFFICIENT"}}) == "sufficient"
    assert machine_label("sufficiency", {"verdict": {"is_sufficient": True, "forced_by": "x"}}) == "insufficient"
    assert machine_label("sufficiency", {"raw_output": "{"}) is None
    kept = queue(log, SUFFICIENT)
    overridden = queue(log, SUFFICIENT)
    queue(log, SUFFICIENT)
    log.resolve_review(kept, decision="answer", by="ada")
    log.resolve_review(overridden, decision="unanswerable", by="ada")
    counts = {(c["gate"], c["rule"], c["status"]): (c["count"], c["overrides"]) for c in log.review_counts()}
    assert counts == {
        ("sufficiency", "partial_under_high_stakes", "open"): (1, 0),
        ("sufficiency", "partial_under_high_stakes", "resolved"): (2, 1),
    }


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("UPDATE reviews SET label = 'insufficient' WHERE id = 1", "review 1 was altered (label"),
        ("UPDATE reviews SET decisions = '[]' WHERE id = 2", "review 2 was altered (decisions"),
        ("UPDATE reviews SET reviewers = 1 WHERE id = 2", "review 2 was altered (reviewers"),
        ("UPDATE reviews SET machine_label = 'insufficient' WHERE id = 1", "machine_label"),
        ("UPDATE review_events SET data = replace(data, 'bob', 'eve') WHERE seq = 4", "review event 4"),
    ],
    ids=["label", "decisions", "reviewers", "machine-label", "decided-event"],
)
def test_tampering_with_decisions_is_detected(tmp_path, statement, words):
    path = tmp_path / "a.db"
    log = AuditLog(path, key=KEY)
    one = queue(log, SUFFICIENT)
    two = queue(log, HIGH_RISK)
    log.resolve_review(one, decision="answer", by="ada", label=True)
    log.resolve_review(two, decision="answer", by="bob")
    assert log.verify().ok
    sql(path, statement)
    report = log.verify()
    log.close()
    assert not report.ok
    assert words in str(report.reason)


# -- a decision's own fields: the answer to deliver, the queries to search ------------------------------------------
def test_queries_and_an_answer_are_kept_in_the_chained_decision_and_handed_over(tmp_path):
    path = tmp_path / "a.db"
    log = AuditLog(path, key=KEY)
    seq = log.record(item_id="q1", gate="sufficiency", decision="human_review")
    payload = {"question": "q?", "chunks": [], "verdict": SUFFICIENT, "rule": "r"}
    refine = log.enqueue_review(item_id="q1", gate="sufficiency", reason="r", payload=payload, evaluation_seq=seq)
    answer = queue(log, SUFFICIENT)
    done = log.resolve_review(
        refine, decision="refine_retrieval", by="ada", note="the year is missing", queries=[" year 1843 ", "notes"]
    )
    assert done.resolved and done.queries == ("year 1843", "notes")  # stripped, in order
    written = log.resolve_review(answer, decision="answer", by="ada", answer="  Ada wrote them in 1843.\n")
    assert written.answer == "Ada wrote them in 1843."
    [entry] = json.loads(log.review(refine)["decisions"])
    assert entry["queries"] == ["year 1843", "notes"] and "answer" not in entry
    [entry] = json.loads(log.review(answer)["decisions"])
    assert entry["answer"] == "Ada wrote them in 1843." and "queries" not in entry
    outcome = review_outcome(log.review(refine), "q")
    assert (outcome.queries, outcome.queries_from) == (["year 1843", "notes"], "reviewers")  # not the note's line
    outcome = review_outcome(log.review(answer), "q")
    assert (outcome.answer, outcome.answer_from) == ("Ada wrote them in 1843.", "reviewers")
    # The resolution carries them in its chained event, which the export shows under the row.
    [row] = log.export_rows()
    [resolved] = row["reviews"][0]["events"]
    assert resolved["event"] == "resolved" and resolved["queries"] == ["year 1843", "notes"]
    assert resolved["decisions"][0]["queries"] == ["year 1843", "notes"] and "answer" not in resolved
    assert log.verify().ok
    log.close()
    # The entry is chained: a query changed in the table is found.
    sql(path, f"UPDATE reviews SET decisions = replace(decisions, 'year 1843', 'year 1999') WHERE id = {refine}")
    report = AuditLog(path, key=KEY).verify()
    assert not report.ok and f"review {refine} was altered (decisions" in str(report.reason)


@pytest.mark.parametrize(
    ("decision", "fields", "words"),
    [
        ("refine_retrieval", {"answer": "Ada."}, "answer: only an 'answer' decision"),
        ("unanswerable", {"answer": "Ada."}, "answer: only an 'answer' decision"),
        ("answer", {"queries": ["year"]}, "queries: only a 'refine_retrieval' decision"),
        ("unanswerable", {"queries": ["year"]}, "queries: only a 'refine_retrieval' decision"),
        ("answer", {"answer": "  "}, "answer: is blank"),
        ("answer", {"answer": 42}, "answer: must be text"),
        ("answer", {"answer": "x" * (MAX_ANSWER_CHARS + 1)}, f"at most {MAX_ANSWER_CHARS}"),
        ("refine_retrieval", {"queries": "year 1843"}, "queries: must be a list"),
        ("refine_retrieval", {"queries": []}, f"from 1 to {MAX_QUERIES}"),
        ("refine_retrieval", {"queries": ["q"] * (MAX_QUERIES + 1)}, f"from 1 to {MAX_QUERIES}"),
        ("refine_retrieval", {"queries": ["year", " "]}, r"queries\[1\]: is blank"),
        ("refine_retrieval", {"queries": [7]}, r"queries\[0\]: must be text"),
        ("refine_retrieval", {"queries": ["year\n1843"]}, r"queries\[0\]: one line each"),
        ("refine_retrieval", {"queries": ["y" * (MAX_QUERY_CHARS + 1)]}, f"at most {MAX_QUERY_CHARS}"),
    ],
    ids=[
        "answer-for-refine",
        "answer-for-unanswerable",
        "queries-for-answer",
        "queries-for-unanswerable",
        "blank-answer",
        "answer-not-text",
        "long-answer",
        "queries-a-string",
        "no-queries",
        "too-many-queries",
        "blank-query",
        "query-not-text",
        "two-line-query",
        "long-query",
    ],
)
def test_a_field_for_another_decision_or_out_of_bounds_is_refused_naming_it(log, decision, fields, words):
    rid = queue(log, SUFFICIENT)
    with pytest.raises(AuditError, match=words):
        log.resolve_review(rid, decision=decision, by="ada", **fields)
    assert log.review(rid)["decisions"] == "[]"  # nothing written
    assert log.verify().ok


def test_two_reviewers_agree_on_an_answer_only_when_it_is_the_same_answer(log):
    rid = queue(log, HIGH_RISK)
    log.resolve_review(rid, decision="answer", by="ada", answer="Clause 4 is in force.")
    differs = log.resolve_review(rid, decision="answer", by="bob")  # approves the response as it is: not the same
    assert differs.disputed
    settled = log.resolve_review(rid, decision="answer", by="cy", answer="Clause 4 is in force.  ")
    assert settled.resolved and settled.agreed_by == ("ada", "cy") and settled.answer == "Clause 4 is in force."
    outcome = review_outcome(log.review(rid), "q")
    assert (outcome.answer, outcome.answer_from, outcome.decided_by) == (
        "Clause 4 is in force.",
        "reviewers",
        ["ada", "cy"],
    )


def test_queries_given_by_one_reviewer_replace_every_note_and_none_fall_back_to_the_notes(log):
    given = queue(log, HIGH_RISK)
    log.resolve_review(given, decision="refine_retrieval", by="ada", note="a remark, not a query")
    log.resolve_review(given, decision="refine_retrieval", by="bob", queries=["clause 4 amendments", "clause 4"])
    outcome = review_outcome(log.review(given), "q")
    assert (outcome.queries, outcome.queries_from) == (["clause 4 amendments", "clause 4"], "reviewers")
    noted = queue(log, SUFFICIENT)
    log.resolve_review(noted, decision="refine_retrieval", by="ada", note="clause 4\n\nits amendments")
    outcome = review_outcome(log.review(noted), "q")
    assert (outcome.queries, outcome.queries_from) == (["clause 4", "its amendments"], "notes")
