"""Issue 30 on the scripted engine: the recovery loop the seed's harness describes (regenerate after a
re-retrieval, abstain with the gap, log every attempt) and the adequacy gate run through the same pipeline.

The engine is scripted: these prove the harness's rules (what is delivered, where a question ends, what is
logged), not the model's judgement (see test_recovery_loop_engine.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from suffice.audit import AuditLog
from suffice.config import JudgeConfig
from suffice.exceptions import AuditError
from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate
from suffice.harness.pipeline import Pipeline, PipelineConfig
from suffice.harness.retrieval import FunctionRetriever, RetrievalRequest
from suffice.judge import Judge
from suffice.records.item import Chunk
from suffice.serving.base import GenerationRequest
from tests.adequacy import criteria
from tests.fakes import ScriptedEngine, recovery_reply

QUESTION = "Who wrote the notes, and when?"
FIRST = "Ada Lovelace wrote the notes."
REGENERATED = "Ada Lovelace wrote the notes in 1843  (see the translation).\n"
ADA = {"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt", "score": 0.9}
YEAR = {"id": "year", "text": "The notes were published in 1843 with the translation.", "source": "year.txt"}


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def INSUFFICIENT(request: GenerationRequest) -> str:
    """Every segment of the response unsupported: INSUFFICIENT (its gap: the response's sentences)."""
    return recovery_reply(
        request, "unsupported", notice="No passage gives the year.", queries=("Ada Lovelace notes year",)
    )


def SUFFICIENT(request: GenerationRequest) -> str:
    """Every segment of the response supported by both sources (0: ada.txt, 1: year.txt; both must be shown)."""
    return recovery_reply(request, lambda index, text: ("supported", [0, 1]))


#: The gap of an INSUFFICIENT verdict on ``FIRST``: its one sentence.
GAP = [FIRST]
#: How a delivered answer cites both sources: right after each sentence the verdict supports.
BOTH = "[CITATION:ada.txt][CITATION:year.txt]"
LOOSE_TWO = SufficiencyThreshold(min_passages=2)


def prompt(request: GenerationRequest) -> str:
    return request.messages[-1]["content"]


def sufficient_once_the_year_is_there(request: GenerationRequest) -> str:
    return SUFFICIENT(request) if YEAR["text"] in prompt(request) else INSUFFICIENT(request)


class Retrieved:
    """A retriever returning ``found`` for every query, keeping its requests."""

    def __init__(self, found: Sequence[dict[str, object]]) -> None:
        self.found = list(found)
        self.requests: list[RetrievalRequest] = []

    def __call__(self, query: str, k: int, request: RetrievalRequest) -> list[dict[str, object]]:
        self.requests.append(request)
        return list(self.found)


def pipeline(
    tmp_path: Path,
    script,
    found: Sequence[dict[str, object]] = (YEAR,),
    threshold: SufficiencyThreshold = LOOSE_TWO,
    config: PipelineConfig | None = None,
    generator=None,
) -> tuple[Pipeline, Retrieved]:
    retrieved = Retrieved(found)
    judge = Judge(ScriptedEngine(script), RecoveryGate(threshold))
    retriever = FunctionRetriever(retrieved, pass_request=True)
    extra = {} if generator is None else {"generator": generator}
    return Pipeline(judge, retriever, config, audit=tmp_path / "audit.db", **extra), retrieved


def ada(response: str | None = FIRST) -> dict[str, object]:
    record: dict[str, object] = {"id": "ada", "question": QUESTION, "chunks": [ADA]}
    if response is not None:
        record["response"] = response
    return record


class Generator:
    """``generator(question, chunks) -> answer``, keeping what it was given."""

    def __init__(self, answer: str = REGENERATED) -> None:
        self.answer = answer
        self.calls: list[tuple[str, list[object]]] = []

    def __call__(self, question: str, chunks: Sequence[Chunk]) -> str:
        self.calls.append((question, [c.id for c in chunks]))
        return self.answer


# -- regenerate after re-retrieval -----------------------------------------------------------------------------------
def test_after_a_re_retrieval_the_answer_is_regenerated_and_the_new_one_is_checked_and_delivered(tmp_path):
    seen: list[str] = []

    def script(request: GenerationRequest) -> str:
        seen.append(prompt(request))
        return sufficient_once_the_year_is_there(request)

    generator = Generator()
    run, _ = pipeline(tmp_path, script, generator=generator)
    [outcome] = run.run([ada()])
    assert outcome.kind == "delivered" and outcome.rounds == 2
    assert generator.calls == [(QUESTION, [0, "year"])]  # once, after round 1's re-retrieval, on all the evidence
    assert FIRST in seen[0] and "in 1843  (see the translation)" in seen[1]  # round 2 checked the new answer
    # As generated, byte for byte, with its citations inline.
    assert outcome.answer == REGENERATED.rstrip("\n") + BOTH + "\n"
    assert strip_markers(outcome.answer) == REGENERATED
    assert outcome.citations == ["ada.txt", "year.txt"]
    assert [t.route for t in outcome.trace] == ["retrieve_more", "retrieval", "generation", "deliver"]


def test_without_a_generator_the_given_answer_is_checked_again_and_delivered_as_given(tmp_path):
    run, _ = pipeline(tmp_path, sufficient_once_the_year_is_there)
    [outcome] = run.run([ada()])
    assert outcome.kind == "delivered" and outcome.rounds == 2
    assert outcome.answer == FIRST + BOTH
    assert "generation" not in [t.route for t in outcome.trace]


def test_a_record_without_an_answer_gets_its_first_one_from_the_generator(tmp_path):
    generator = Generator()
    run, _ = pipeline(tmp_path, sufficient_once_the_year_is_there, generator=generator)
    [outcome] = run.run([{"id": "ada", "question": QUESTION, "chunks": [ADA, YEAR]}])
    assert outcome.kind == "delivered" and outcome.rounds == 1
    assert strip_markers(outcome.answer) == REGENERATED
    assert generator.calls == [(QUESTION, [0, "year"])]


def test_a_failing_generator_sends_only_its_own_question_to_review(tmp_path):
    def generator(question: str, chunks: Sequence[Chunk]) -> str:
        if question.startswith("Who"):
            raise RuntimeError("generator down")
        return REGENERATED

    run, _ = pipeline(tmp_path, sufficient_once_the_year_is_there, generator=generator)
    other = {**ada(), "id": "other", "question": "And when were the notes written?"}
    failed, fine = run.run([ada(), other])
    assert failed.kind == "review" and failed.failure is not None and failed.failure.step == "generation"
    assert "generator down" in failed.reason
    assert fine.kind == "delivered" and strip_markers(fine.answer) == REGENERATED


# -- the checked answer as it is; abstention a user sees
def test_a_sufficient_verdict_delivers_the_response_byte_for_byte_not_the_judge_s_answer(tmp_path):
    response = "  Ada Lovelace — the notes, 1843.\n\nSee *Sketch*. "
    run, _ = pipeline(tmp_path, SUFFICIENT, threshold=SufficiencyThreshold(min_passages=1))
    [outcome] = run.run([{**ada(response), "chunks": [ADA, YEAR]}])
    assert outcome.kind == "delivered"
    # The response itself, each of its two sentences cited where it ends; nothing the judge wrote.
    assert outcome.answer == f"  Ada Lovelace — the notes, 1843.{BOTH}\n\nSee *Sketch*.{BOTH} "
    assert strip_markers(outcome.answer) == response
    assert outcome.citations == ["ada.txt", "year.txt"]


def test_a_spent_budget_abstains_with_the_gap_and_the_queries(tmp_path):
    found = iter(range(100))

    class Fresh(Retrieved):
        def __call__(self, query, k, request):
            self.requests.append(request)
            return [{"id": f"n{next(found)}", "text": f"An unrelated passage {next(found)}.", "source": "x"}]

    def spend(threshold, folder):
        judge = Judge(ScriptedEngine(INSUFFICIENT), RecoveryGate(threshold))
        run = Pipeline(
            judge,
            FunctionRetriever(Fresh([]), pass_request=True),
            PipelineConfig(max_rounds=2),
            audit=tmp_path / folder / "audit.db",
        )
        [outcome] = run.run([ada()])
        assert outcome.rounds == 2 and "budget of 2 rounds" in outcome.reason
        assert outcome.gap == GAP
        assert outcome.queries == ["Ada Lovelace notes year"]
        return run, outcome

    run, outcome = spend(SufficiencyThreshold.loose(), "loose")
    assert outcome.kind == "abstained" and run.audit.reviews() == []
    # High stakes (strict): the seed's "human review gate when ... the retry budget is exhausted".
    run, outcome = spend(SufficiencyThreshold.strict(), "strict")
    assert (outcome.kind, outcome.rule) == ("review", "budget_spent_high_stakes")
    [review] = run.audit.reviews()
    assert review["reason"].startswith("budget_spent_high_stakes: retrieval budget of 2 rounds spent")
    payload = json.loads(review["payload"])
    assert payload["rule"] == "budget_spent_high_stakes"
    assert payload["queries"] == ["Ada Lovelace notes year"] and payload["verdict"]["classification"] == "INSUFFICIENT"
    assert payload["settings"]["pipeline"]["max_rounds"] == 2


def test_retrieval_that_finds_nothing_new_abstains_with_the_gap_and_the_queries(tmp_path):
    run, _ = pipeline(tmp_path, INSUFFICIENT, found=[ADA], threshold=SufficiencyThreshold.loose())
    [outcome] = run.run([ada()])
    assert outcome.kind == "abstained" and "nothing new" in outcome.reason
    assert outcome.gap == GAP and outcome.queries == ["Ada Lovelace notes year"]
    assert run.audit.reviews() == []


def test_a_high_stakes_abstention_goes_to_a_person(tmp_path):
    strict = SufficiencyThreshold.strict()
    run, _ = pipeline(tmp_path, INSUFFICIENT, found=[ADA], threshold=strict)
    [outcome] = run.run([ada()])
    assert (outcome.kind, outcome.rule) == ("review", "abstained_high_stakes") and "nothing new" in outcome.reason
    assert outcome.gap == GAP and outcome.queries == ["Ada Lovelace notes year"]
    [review] = run.audit.reviews()
    assert review["id"] == outcome.review_id and review["reason"].startswith("abstained_high_stakes: ")


def test_a_strict_partial_verdict_still_goes_to_review(tmp_path):
    def partial(request: GenerationRequest) -> str:
        return recovery_reply(request, "partial", notice="No passage gives the year.")

    run, _ = pipeline(tmp_path, partial, threshold=SufficiencyThreshold.strict())
    [outcome] = run.run([ada()])
    assert outcome.kind == "review"


# -- every attempt in the audit log
def test_every_retrieval_attempt_is_in_the_audit_log_with_round_queries_width_and_chunk_ids(tmp_path):
    run, _ = pipeline(tmp_path, sufficient_once_the_year_is_there, config=PipelineConfig(base_width=3))
    [outcome] = run.run([ada()])
    attempts = run.audit.retrievals()
    assert len(attempts) == 1
    [attempt] = attempts
    assert attempt["item_id"] == "ada" and attempt["gate"] == "recovery" and attempt["round"] == 2
    assert attempt["queries"] == ["Ada Lovelace notes year"]
    assert attempt["width"] == 6
    assert attempt["chunk_ids"] == ["year"] and attempt["new_chunks"] == 1 and attempt["error"] is None
    retrieval = next(t for t in outcome.trace if t.route == "retrieval")
    assert retrieval.audit_seq == attempt["seq"] and retrieval.width == 6 and retrieval.chunk_ids == ["year"]
    report = run.audit.verify()
    assert report.ok


def test_a_question_alone_logs_its_first_retrieval_too(tmp_path):
    run, _ = pipeline(tmp_path, sufficient_once_the_year_is_there, found=[ADA, YEAR])
    [outcome] = run.run([{"id": "ada", "question": QUESTION, "response": FIRST}])
    assert outcome.kind == "delivered"
    [attempt] = run.audit.retrievals()
    assert attempt["round"] == 1 and attempt["queries"] == [QUESTION] and attempt["chunk_ids"] == [0, "year"]


def test_a_failed_retrieval_attempt_is_logged_with_its_error(tmp_path):
    def broken(query: str, k: int) -> list[dict[str, object]]:
        raise RuntimeError("index offline")

    judge = Judge(ScriptedEngine(INSUFFICIENT), RecoveryGate(LOOSE_TWO))
    run = Pipeline(judge, FunctionRetriever(broken), audit=tmp_path / "audit.db")
    [outcome] = run.run([ada()])
    assert outcome.kind == "review"
    [attempt] = run.audit.retrievals()
    assert attempt["round"] == 2 and attempt["error"]["step"] == "retrieval"
    assert "index offline" in attempt["error"]["message"]


def test_altering_a_logged_retrieval_attempt_is_detected(tmp_path):
    run, _ = pipeline(tmp_path, sufficient_once_the_year_is_there)
    run.run([ada()])
    run.audit.close()
    with sqlite3.connect(tmp_path / "audit.db") as db:
        db.execute("""UPDATE retrievals SET chunk_ids = '["forged"]' WHERE seq = 1""")
    report = AuditLog(tmp_path / "audit.db").verify()
    assert not report.ok and report.part == "retrievals"


def test_an_audit_log_of_the_previous_format_is_refused_clearly(tmp_path):
    path = tmp_path / "old.db"
    AuditLog(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 'suffice-audit/2' WHERE key = 'format'")
    with pytest.raises(AuditError, match=r"earlier suffice.*retrieval attempts were not logged"):
        AuditLog(path)


# -- the adequacy gate end to end
def adequacy_json(passed: bool) -> str:
    score = 0.95 if passed else 0.1
    dimensions = {
        name: {"score": score, "assessment": "ok" if passed else "thin"}
        for name in (
            "factual_coverage",
            "temporal_relevance",
            "source_authority",
            "entity_completeness",
            "rubric_alignment",
        )
    }
    return compact(
        {
            "adequacy_decision": "PASS" if passed else "FAIL",
            "adequacy_score": score,
            "criteria": criteria("customer-support", score),
            "dimensions": dimensions,
            "missing_information": [] if passed else ["the refund window"],
            "recommendation": "PROCEED_WITH_ANSWER" if passed else "RETRIEVE_MORE",
            "rationale": "r",
        }
    )


def test_the_adequacy_gate_runs_the_loop_end_to_end(tmp_path):
    refund = {"id": "refund", "text": "Refunds are accepted within 30 days of purchase.", "source": "policy.txt"}
    engine = ScriptedEngine(lambda request: adequacy_json("30 days" in prompt(request)))
    judge = Judge(engine, config=JudgeConfig(gate="adequacy", options={"rubric": "customer-support"}))
    retrieved = Retrieved([refund])
    run = Pipeline(judge, FunctionRetriever(retrieved, pass_request=True), audit=tmp_path / "audit.db")
    record = {
        "id": "r1",
        "question": "How long do I have to ask for a refund?",
        "chunks": [{"id": 0, "text": "Refunds go to the original card.", "source": "faq.txt"}],
    }
    [outcome] = run.run([record])
    assert outcome.kind == "delivered" and outcome.rounds == 2
    assert [t.route for t in outcome.trace] == ["retrieve_more", "retrieval", "deliver"]
    assert retrieved.requests[0].queries == ("the refund window",)
    assert outcome.chunk_ids == [0, "refund"]
    assert outcome.answer is None  # a pre-generation gate delivers evidence, not an answer
    rows = list(run.audit.rows())
    assert [r["gate"] for r in rows] == ["adequacy", "adequacy"]
    assert [r["decision"] for r in rows] == ["retrieve_more", "deliver"]
    assert run.audit.retrievals()[0]["gate"] == "adequacy"
    assert run.audit.verify().ok


def test_the_adequacy_gate_abstains_when_the_budget_is_spent(tmp_path):
    fresh = iter(range(100))

    def retriever(query: str, k: int) -> list[dict[str, object]]:
        n = next(fresh)
        return [{"id": f"c{n}", "text": f"Unrelated passage number {n}.", "source": "x"}]

    judge = Judge(
        ScriptedEngine(lambda request: adequacy_json(False)),
        config=JudgeConfig(gate="adequacy", options={"rubric": "customer-support"}),
    )
    run = Pipeline(judge, FunctionRetriever(retriever), PipelineConfig(max_rounds=2), audit=tmp_path / "audit.db")
    [outcome] = run.run([{"id": "r1", "question": "How long do I have to ask for a refund?"}])
    # The seed: "Set a maximum of 2-3 retrieval rounds before escalating": the last round has no retrieval left.
    assert (outcome.kind, outcome.rule, outcome.rounds) == ("review", "adequacy_rounds_exhausted", 2)
    assert outcome.gap == ["the refund window"] and outcome.queries == ["the refund window"]
    assert [a["round"] for a in run.audit.retrievals()] == [1, 2]
    [review] = run.audit.reviews()
    payload = json.loads(review["payload"])
    # What the seed's review interface displays: the query, the retrieved context and the dimension scores.
    assert payload["question"] == "How long do I have to ask for a refund?"
    assert [c["id"] for c in payload["chunks"]] == ["c0", "c1"]
    assert set(payload["verdict"]["dimensions"]) >= {"factual_coverage"}
