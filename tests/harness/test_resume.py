"""``Pipeline.resume``: a person's decision takes effect, once.  On a scripted engine: the harness's rules (what each
decision does, what is written, that a replay writes nothing), not the model's judgement.

A high-stakes question whose budget is spent goes to two reviewers; once they agree, ``answer`` delivers the answer
they approved, ``refine_retrieval`` runs the loop again from their query, ``unanswerable`` abstains with their note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from suffice.audit import AuditLog
from suffice.audit.reviewing import APPLIED_RULE, review_log_id
from suffice.exceptions import ReviewNotFoundError
from suffice.harness.pipeline import Outcome, Pipeline, PipelineConfig
from suffice.harness.retrieval import FunctionRetriever
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine

QUESTION = "Who wrote the notes, and when?"
RESPONSE = "Ada Lovelace wrote them, in 1843."
ADA = {"id": "ada", "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"}
YEAR = {"id": "year", "text": "The notes were published in 1843 with the translation.", "source": "year.txt"}
GAP = "the year the notes were published"


def verdict(sufficient: bool) -> str:
    return json.dumps(
        {
            "required_entities": [{"entity": "year", "covered": sufficient}],
            "contradictions": [],
            "reasoning": "r",
            "is_sufficient": sufficient,
            "missing_information": [] if sufficient else [GAP],
            "confidence": 0.9,
            "useful_chunk_ids": [0],
        },
        separators=(",", ":"),
    )


def sufficient_with_the_year(request: GenerationRequest) -> str:
    return verdict("1843" in request.messages[-1]["content"])


class Setup:
    """A pipeline whose one question went to two reviewers, the retriever's queries and the engine."""

    def __init__(self, tmp_path: Path) -> None:
        self.queries: list[str] = []
        self.engine = ScriptedEngine(sufficient_with_the_year)
        self.pipeline = Pipeline(
            Judge(self.engine, "sufficiency"),
            FunctionRetriever(self.search),
            PipelineConfig(max_rounds=1, high_stakes=True),
            audit=tmp_path / "audit.db",
        )
        [queued] = self.pipeline.run([{"id": "q1", "question": QUESTION, "response": RESPONSE, "chunks": [ADA]}])
        assert queued.kind == "review" and queued.rule == "budget_spent_high_stakes"
        assert queued.review_id is not None
        self.review_id = queued.review_id
        self.log = self.pipeline.audit
        assert self.log.review(self.review_id)["reviewers"] == 2

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        self.queries.append(query)
        return [YEAR] if "1843" in query or "year" in query else [ADA]

    def decide(self, decision: str, *notes: str | None, **fields: Any) -> None:
        """Both reviewers decide ``decision``, each with their note and the same decision ``fields``."""
        for by, note in zip(("ada", "cy"), notes or (None, None), strict=True):
            self.log.resolve_review(self.review_id, decision=decision, by=by, note=note, **fields)

    def written(self) -> tuple[int, int, int, int, int]:
        """Rows, retrieval attempts and review events in the log; engine and retriever calls."""
        report = self.log.verify()
        assert report.ok, report.reason
        return report.rows, len(self.log.retrievals()), report.review_events, len(self.engine.calls), len(self.queries)

    def applied_rows(self) -> list[dict[str, Any]]:
        return [row for row in self.log.export_rows() if row["rule"] == APPLIED_RULE]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def test_before_the_reviewers_agree_resume_applies_nothing(setup: Setup) -> None:
    before = setup.written()
    pending = setup.pipeline.resume(setup.review_id)
    assert (pending.kind, pending.review_id, pending.resumed_from) == ("review", setup.review_id, None)
    assert "open" in pending.reason and pending.rule == "budget_spent_high_stakes" and pending.gap == [GAP]
    setup.log.resolve_review(setup.review_id, decision="answer", by="ada")  # one of the two it needs
    awaiting = setup.pipeline.resume(setup.review_id)
    assert awaiting.kind == "review" and "awaiting" in awaiting.reason
    assert setup.written()[:2] == before[:2] and setup.applied_rows() == []


def test_answer_delivers_the_answer_the_reviewers_approved_and_the_row_says_who(setup: Setup) -> None:
    setup.decide("answer", "checked against the 1843 edition", None)
    outcome = setup.pipeline.resume(setup.review_id)
    assert (outcome.kind, outcome.answer, outcome.id) == ("delivered", RESPONSE, "q1")
    assert (outcome.resumed_from, outcome.decided_by) == (setup.review_id, ["ada", "cy"])
    assert outcome.chunk_ids == ["ada"] and "ada, cy" in outcome.reason
    [row] = setup.applied_rows()
    assert (row["decision"], row["item_id"], row["gate"]) == ("deliver", "q1", "sufficiency")
    assert row["verdict"]["decided_by"] == ["ada", "cy"] and row["verdict"]["decision"] == "answer"
    assert row["verdict"]["review_id"] == setup.review_id
    assert row["verdict"]["log_id"] == review_log_id(setup.log.db_id)
    assert Outcome.model_validate_json(row["raw_output"]) == outcome


def test_refine_retrieval_runs_the_loop_again_from_the_reviewers_query(setup: Setup) -> None:
    setup.decide("refine_retrieval", "notes published 1843", "notes published 1843")
    asked = len(setup.queries)
    outcome = setup.pipeline.resume(setup.review_id)
    assert setup.queries[asked:] == ["notes published 1843"]  # the reviewers' query, and only it
    assert outcome.kind == "delivered" and outcome.chunk_ids == ["ada", "year"]  # added to the chunks they saw
    assert [t.route for t in outcome.trace] == ["retrieval", "deliver"]
    assert outcome.trace[0].queries == ["notes published 1843"] and outcome.decided_by == ["ada", "cy"]
    [row] = setup.applied_rows()
    assert row["decision"] == "retrieve_more" and row["verdict"]["queries"] == ["notes published 1843"]
    # The loop's own rows are the same run as the row that records the decision applied.
    ran = [r for r in setup.log.export_rows() if r["run_id"] == row["run_id"]]
    assert [r["decision"] for r in ran] == ["deliver", "retrieve_more"]
    assert setup.log.retrievals()[-1]["run_id"] == row["run_id"]


def test_answer_delivers_the_answer_the_reviewers_wrote_not_the_response(setup: Setup) -> None:
    written = "Ada Lovelace wrote them; they were published in 1843."
    setup.decide("answer", None, "corrected the date", answer=written)
    outcome = setup.pipeline.resume(setup.review_id)
    assert (outcome.kind, outcome.answer) == ("delivered", written)
    assert "a person wrote the answer" in outcome.reason and outcome.chunk_ids == ["ada"]
    [row] = setup.applied_rows()
    assert (row["verdict"]["answer"], row["verdict"]["answer_from"]) == (written, "reviewers")
    assert Outcome.model_validate_json(row["raw_output"]) == outcome


def test_refine_retrieval_searches_the_reviewers_queries_not_their_notes(setup: Setup) -> None:
    setup.decide("refine_retrieval", "the year is missing", "see the 1843 edition", queries=["notes published 1843"])
    asked = len(setup.queries)
    outcome = setup.pipeline.resume(setup.review_id)
    assert setup.queries[asked:] == ["notes published 1843"]  # the field's query; no line of either note
    assert outcome.kind == "delivered" and outcome.chunk_ids == ["ada", "year"]
    [row] = setup.applied_rows()
    assert row["verdict"]["queries"] == ["notes published 1843"] and row["verdict"]["queries_from"] == "reviewers"


def test_refine_retrieval_without_a_query_searches_the_gap_queued(setup: Setup) -> None:
    setup.decide("refine_retrieval")
    asked = len(setup.queries)
    outcome = setup.pipeline.resume(setup.review_id)
    assert setup.queries[asked:] == [GAP] and outcome.kind == "delivered"


def test_refine_retrieval_that_finds_nothing_new_goes_back_to_a_person_under_high_stakes(setup: Setup) -> None:
    setup.decide("refine_retrieval", "Analytical Engine", "Analytical Engine")
    outcome = setup.pipeline.resume(setup.review_id)
    assert outcome.kind == "review" and outcome.review_id not in (None, setup.review_id)
    assert "found nothing new" in outcome.reason and outcome.resumed_from == setup.review_id


def test_unanswerable_returns_the_abstention_with_the_reviewers_note(setup: Setup) -> None:
    setup.decide("unanswerable", "no source dates the notes", "no source dates the notes")
    outcome = setup.pipeline.resume(setup.review_id)
    assert outcome.kind == "abstained" and outcome.answer is None
    assert "no source dates the notes" in outcome.reason and "no source dates the notes" in str(outcome.note)
    assert outcome.gap == [GAP] and outcome.decided_by == ["ada", "cy"]
    [row] = setup.applied_rows()
    assert row["decision"] == "abstain" and "no source dates the notes" in row["verdict"]["note"]


@pytest.mark.parametrize(
    "decision, note",
    [("answer", None), ("refine_retrieval", "notes published 1843"), ("unanswerable", "none will do")],
)
def test_a_decision_is_applied_once_replaying_it_changes_nothing(setup: Setup, decision: str, note: str | None) -> None:
    setup.decide(decision, note, note)
    first = setup.pipeline.resume(setup.review_id)
    after = setup.written()
    for _ in range(2):
        assert setup.pipeline.resume(setup.review_id) == first
    assert setup.written() == after  # no row, no retrieval, no engine call
    assert len(setup.applied_rows()) == 1
    # A pipeline opened afresh on the same log (a restarted application) finds it applied too.
    setup.log.close()
    again = Pipeline(Judge(setup.engine, "sufficiency"), FunctionRetriever(setup.search), audit=setup.log.path)
    assert again.resume(setup.review_id) == first
    assert len([r for r in again.audit.export_rows() if r["rule"] == APPLIED_RULE]) == 1


def test_the_same_review_number_of_another_queue_is_another_decision(setup: Setup, tmp_path: Path) -> None:
    other = AuditLog(tmp_path / "service.db")
    assert other.enqueue_review(item_id="s1", gate="sufficiency", reason="r", payload={"question": "Q?"}) == 1
    other.resolve_review(1, decision="unanswerable", by="bo", note="out of scope")
    setup.decide("answer")
    mine = setup.pipeline.resume(setup.review_id)
    theirs = setup.pipeline.resume(1, source=other)
    assert (mine.kind, theirs.kind, theirs.id, theirs.decided_by) == ("delivered", "abstained", "s1", ["bo"])
    assert len(setup.applied_rows()) == 2
    assert setup.pipeline.resume(1, source=other) == theirs and len(setup.applied_rows()) == 2


def test_an_unknown_review_is_refused(setup: Setup) -> None:
    with pytest.raises(ReviewNotFoundError):
        setup.pipeline.resume(999)
