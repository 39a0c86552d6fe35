"""Loop logic on a scripted engine; one run of the loop on the real engine."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from suffice.audit import AuditLog
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError, EngineError, InputError
from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate
from suffice.harness.pipeline import Outcome, Pipeline, PipelineConfig, StepFailure
from suffice.harness.retrieval import FunctionRetriever, RawChunk, RetrievalRequest, Retriever, merge_chunks
from suffice.harness.rewrite import QueryRewriter, RewriteRequest
from suffice.judge import Judge
from suffice.records.item import Chunk
from suffice.serving.base import GenerationRequest
from suffice.serving.engine_config import EngineConfig
from tests.fakes import Script, ScriptedEngine, recovery_reply
from tests.harness.hotpot import hotpot_retriever, load_pairs, questions


def sufficiency_json(sufficient: bool, n: int) -> str:
    return json.dumps(
        {
            "required_entities": [{"entity": "x", "covered": sufficient}],
            "contradictions": [],
            "reasoning": "r",
            "is_sufficient": sufficient,
            "missing_information": [] if sufficient else ["the second paragraph"],
            "confidence": 0.9,
            "useful_chunk_ids": [0],
        },
        separators=(",", ":"),
    )


def labels(request) -> int:
    return len(re.findall(r"^<<chunk [0-9]+ ", request.messages[-1]["content"], flags=re.MULTILINE))


def complete_when_all_ten(request) -> str:
    n = labels(request)
    return sufficiency_json(n >= 10, n)


def run(tmp_path, script, config=None, records=None):
    pairs = load_pairs()
    calls: list[RetrievalRequest] = []
    engine = ScriptedEngine(script, max_model_len=32768)
    pipeline = Pipeline(
        Judge(engine, "sufficiency"), hotpot_retriever(pairs, calls), config, audit=tmp_path / "audit.db"
    )
    outcomes = pipeline.run(records if records is not None else questions(pairs))
    return pairs, calls, engine, pipeline, outcomes


def test_drop_then_widened_retrieval_delivers_in_round_two(tmp_path):
    pairs, calls, engine, pipeline, outcomes = run(tmp_path, complete_when_all_ten)
    assert len(outcomes) == len(pairs)
    assert all(o.kind == "delivered" and o.rounds == 2 for o in outcomes)
    assert engine.calls == [len(pairs), len(pairs)]  # one engine call per round, all questions together
    assert [c.width for c in calls[: len(pairs)]] == [5] * len(pairs)
    for outcome in outcomes:
        # merged and de-duplicated: the 9 paragraphs plus the missing one
        assert len(outcome.chunk_ids) == len(set(outcome.chunk_ids)) == 10
        routes = [t.route for t in outcome.trace]
        assert routes == ["retrieval", "retrieve_more", "retrieval", "deliver"]
        assert outcome.trace[2].new_chunks == 1
    log = pipeline.audit
    assert log.verify().ok and log.verify().rows == 2 * len(pairs)
    rows = list(log.rows())
    assert {r["round"] for r in rows} == {1, 2}
    assert all(r["query_hash"] and json.loads(r["chunks"])[0]["sha256"] for r in rows)


def test_budget_spent_abstains_with_the_gap_never_silent(tmp_path):
    _, _, engine, pipeline, outcomes = run(
        tmp_path, lambda r: sufficiency_json(False, labels(r)), PipelineConfig(max_rounds=3, base_width=1)
    )
    # width 1 → drop set, judged; width 2 → the drop set again: nothing new, abstained at once.
    assert all(o.kind == "abstained" and "nothing new" in o.reason and o.rounds == 1 for o in outcomes)
    assert all(o.gap and o.queries for o in outcomes)  # what is missing, and what was searched for it
    assert engine.calls == [6]
    _, _, engine, pipeline, outcomes = run(
        tmp_path / "second", lambda r: sufficiency_json(False, labels(r)), PipelineConfig(max_rounds=2)
    )
    assert all(o.kind == "abstained" and "budget of 2 rounds" in o.reason and o.rounds == 2 for o in outcomes)
    assert all(o.gap == ["the second paragraph"] and o.queries for o in outcomes)
    assert all(o.verdict is not None and o.verdict["is_sufficient"] is False for o in outcomes)
    assert pipeline.audit.reviews() == []  # abstention is the user's exit, not the review queue
    # Under high stakes a spent budget goes to a person (the seed: "a human review gate when the system abstains
    # on high-stakes queries or when the retry budget is exhausted").
    _, _, engine, pipeline, outcomes = run(
        tmp_path / "third",
        lambda r: sufficiency_json(False, labels(r)),
        PipelineConfig(max_rounds=2, high_stakes=True),
    )
    assert all(o.kind == "review" and o.rule == "budget_spent_high_stakes" and o.rounds == 2 for o in outcomes)
    queued = pipeline.audit.reviews()
    assert [r["id"] for r in queued] == [o.review_id for o in outcomes]
    assert all(json.loads(r["payload"])["rule"] == "budget_spent_high_stakes" for r in queued)
    assert all("budget of 2 rounds" in r["reason"] for r in queued)


def test_bad_records_and_engine_failures_end_in_review(tmp_path):
    records = [*questions(load_pairs())[:2], {"question": "no id"}]
    *_, outcomes = run(tmp_path, complete_when_all_ten, records=records)
    assert [o.kind for o in outcomes] == ["delivered", "delivered", "review"]
    assert "input error" in outcomes[2].reason


def test_altering_an_audit_row_is_detected(tmp_path):
    _, _, _, pipeline, _ = run(tmp_path, complete_when_all_ten)
    pipeline.audit.close()
    with sqlite3.connect(tmp_path / "audit.db") as db:
        db.execute("UPDATE evaluations SET decision = 'deliver' WHERE seq = 3")
    assert AuditLog(tmp_path / "audit.db").verify().first_broken == 3


def test_merge_dedupes_by_source_and_content():
    existing = [Chunk(0, "Alpha  text", "A"), Chunk(1, "Beta", "B")]
    merged, added = merge_chunks(
        existing, [{"id": 0, "text": "Alpha text", "source": "A"}, {"id": 1, "text": "Gamma", "source": "C"}], 2
    )
    assert added == 1 and [c.id for c in merged] == [0, 1, "r2-1"]


def test_config_errors_name_the_parameter():
    with pytest.raises(ConfigError) as info:
        PipelineConfig(max_rounds=0)
    assert info.value.parameter == "max_rounds"


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [({"max_rounds": 2.5}, "max_rounds"), ({"max_rounds": "3"}, "max_rounds"), ({"base_width": None}, "base_width")],
)
def test_a_budget_that_is_not_a_whole_number_is_a_config_error_naming_it(settings, parameter):
    with pytest.raises(ConfigError) as info:
        PipelineConfig(**settings)
    assert info.value.parameter == parameter


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_a_retrieval_timeout_that_is_not_positive_seconds_is_a_config_error_naming_it(seconds):
    with pytest.raises(ConfigError) as info:
        PipelineConfig(retrieval_timeout_s=seconds)
    assert info.value.parameter == "retrieval_timeout_s"


def test_no_retrieval_timeout_is_the_default():
    assert PipelineConfig().retrieval_timeout_s is None


# -- one question's retrieval or rewriting fails: it alone goes to review ----------------


def breaking_for(
    pairs: dict[str, dict[str, dict]], target: str, round: int, breaking: Callable[[list[Any]], list[Any]]
) -> FunctionRetriever:
    """The HotpotQA retriever, except that ``breaking`` replaces (or raises instead of)
    the target question's chunks in one round; every other call is untouched."""
    search = hotpot_retriever(pairs, []).fn

    def broken(query: str, k: int, request: RetrievalRequest) -> list[Any]:
        found = list(search(query, k, request))
        return breaking(found) if request.item_id == target and request.round == round else found

    return FunctionRetriever(broken, pass_request=True)


def run_with(
    tmp_path, script: Script, retriever: Retriever, config: PipelineConfig | None = None
) -> tuple[Pipeline, dict[str | None, Outcome]]:
    pipeline = Pipeline(
        Judge(ScriptedEngine(script, max_model_len=32768), "sufficiency"),
        retriever,
        config,
        audit=tmp_path / "audit.db",
    )
    outcomes = pipeline.run(questions(load_pairs()))
    return pipeline, {o.id: o for o in outcomes}


def others(outcomes: dict[str | None, Outcome], target: str) -> list[Outcome]:
    return [o for key, o in outcomes.items() if key != target]


TARGET = next(iter(load_pairs()))


def offline(found: list[dict]) -> list[dict]:
    raise ConnectionError("index offline")


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-limit", "limit"])
@pytest.mark.parametrize("round", [1, 2])
def test_a_retriever_that_raises_for_one_question_sends_only_it_to_review(tmp_path, round, timeout):
    # With a time limit the retriever runs in a thread: what it raises must still reach
    # the split that confines it to its question.
    config = PipelineConfig(retrieval_timeout_s=timeout)
    retriever = breaking_for(load_pairs(), TARGET, round, offline)
    pipeline, outcomes = run_with(tmp_path, complete_when_all_ten, retriever, config)
    assert outcomes[TARGET].kind == "review"
    assert outcomes[TARGET].reason == f"retrieval failed in round {round}: ConnectionError: index offline"
    assert outcomes[TARGET].failure == StepFailure(
        step="retrieval", round=round, message="ConnectionError: index offline"
    )
    assert outcomes[TARGET].rounds == round - 1
    assert [r["item_id"] for r in pipeline.audit.reviews()] == [TARGET]
    assert [o.kind for o in others(outcomes, TARGET)] == ["delivered"] * 5


def test_the_review_entry_of_a_failed_retrieval_keeps_the_step_and_the_error(tmp_path):
    pipeline, _ = run_with(tmp_path, complete_when_all_ten, breaking_for(load_pairs(), TARGET, 2, offline))
    review = pipeline.audit.reviews()[0]
    assert review["reason"] == "step_failed: retrieval failed in round 2: ConnectionError: index offline"
    assert json.loads(review["payload"])["failure"] == {
        "step": "retrieval",
        "round": 2,
        "message": "ConnectionError: index offline",
    }


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"id": 0, "text": None}, "malformed chunk: chunks[0].text: must be a string, got NoneType"),
        ("just a string", "malformed chunk: chunks[0]: must be an object, got str"),
        (
            {"id": 0, "text": "t", "score": "high"},
            "malformed chunk: chunks[0].score: must be a finite number, got 'high'",
        ),
    ],
)
def test_a_malformed_chunk_for_one_question_sends_only_it_to_review(tmp_path, bad, message):
    retriever = breaking_for(load_pairs(), TARGET, 2, lambda found: [bad, *found])
    _, outcomes = run_with(tmp_path, complete_when_all_ten, retriever)
    assert outcomes[TARGET].kind == "review"
    assert outcomes[TARGET].reason == f"retrieval failed in round 2: {message}"
    assert outcomes[TARGET].failure == StepFailure(step="retrieval", round=2, message=message)
    assert [o.kind for o in others(outcomes, TARGET)] == ["delivered"] * 5


class MiscountingRetriever:
    """A batched retriever with a bug: in round 2 it returns ``copies`` results (0: drops
    it, 2: doubles it) for the target question, so the batch has the wrong length."""

    def __init__(self, pairs: dict[str, dict[str, dict]], copies: int) -> None:
        self.inner = hotpot_retriever(pairs, [])
        self.copies = copies
        self.batches: list[int] = []

    def retrieve(self, requests: Sequence[RetrievalRequest]) -> list[list[RawChunk]]:
        self.batches.append(len(requests))
        out: list[list[RawChunk]] = []
        for request, found in zip(requests, self.inner.retrieve(requests), strict=True):
            out += [found] * (self.copies if request.item_id == TARGET and request.round == 2 else 1)
        return out


class HangingRetriever:
    """The HotpotQA retriever, except that a round-2 call holding the target question
    never answers (until ``release`` is set: at most 30 s, so a pipeline without a
    time limit ends this test instead of hanging it)."""

    def __init__(self, pairs: dict[str, dict[str, dict]]) -> None:
        self.inner = hotpot_retriever(pairs, [])
        self.release = threading.Event()

    def retrieve(self, requests: Sequence[RetrievalRequest]) -> list[list[RawChunk]]:
        if any(r.item_id == TARGET and r.round == 2 for r in requests):
            self.release.wait(30)
        return self.inner.retrieve(requests)


@pytest.fixture
def hanging() -> Iterator[HangingRetriever]:
    retriever = HangingRetriever(load_pairs())
    yield retriever
    retriever.release.set()


def test_a_retriever_that_never_answers_sends_its_call_to_review_after_the_limit(tmp_path, hanging):
    config = PipelineConfig(retrieval_timeout_s=0.25)
    _, outcomes = run_with(tmp_path, complete_when_all_ten, hanging, config)
    assert outcomes[TARGET].reason == (
        "retrieval failed in round 2: no answer within 1.5 s for 6 requests (the step's time limit)"
    )


def test_a_retriever_that_never_answers_is_not_split_into_more_waits(tmp_path, hanging):
    config = PipelineConfig(retrieval_timeout_s=0.25)
    _, outcomes = run_with(tmp_path, complete_when_all_ten, hanging, config)
    assert [o.kind for o in outcomes.values()] == ["review"] * 6


@pytest.mark.parametrize(
    ("copies", "message"), [(0, "returned 0 results for 1 request"), (2, "returned 2 results for 1 request")]
)
def test_a_wrong_number_of_results_sends_only_the_question_at_fault_to_review(tmp_path, copies, message):
    _, outcomes = run_with(tmp_path, complete_when_all_ten, MiscountingRetriever(load_pairs(), copies))
    assert outcomes[TARGET].kind == "review"
    assert outcomes[TARGET].reason == f"retrieval failed in round 2: {message}"
    assert [o.kind for o in others(outcomes, TARGET)] == ["delivered"] * 5
    # No result of the misaligned batch was given to the wrong question: each has its 10 paragraphs.
    assert [len(o.chunk_ids) for o in others(outcomes, TARGET)] == [10] * 5


def test_a_wrong_number_of_results_is_retried_in_halves_not_one_by_one(tmp_path):
    retriever = MiscountingRetriever(load_pairs(), 0)
    run_with(tmp_path, complete_when_all_ten, retriever)
    # Round 1: all 6 at once.  Round 2: 6 (short by one, the target is first) → its half
    # of 3 (short) → the target alone (short) and the 2 after it → the other half of 3.
    assert retriever.batches == [6, 6, 3, 1, 2, 3]


def rewriter_failing_for(question: str) -> Script:
    """Judge requests as in the other tests; rewrite requests return one query, except
    for ``question``, whose rewrite makes the engine raise (failing the whole batch)."""

    def script(request: GenerationRequest) -> str:
        if request.constraint.key != "rewrite":
            return complete_when_all_ten(request)
        if question in request.messages[-1]["content"]:
            raise EngineError("rewriter offline")
        return '["the second paragraph, rewritten"]'

    return script


def test_a_rewriter_that_raises_for_one_question_sends_only_it_to_review(tmp_path):
    question = next(q["question"] for q in questions(load_pairs()) if q["id"] == TARGET)
    _, outcomes = run_with(
        tmp_path,
        rewriter_failing_for(question),
        hotpot_retriever(load_pairs(), []),
        PipelineConfig(rewrite_queries=True),
    )
    assert outcomes[TARGET].kind == "review"
    assert outcomes[TARGET].reason == "rewrite failed in round 2: EngineError: rewriter offline"
    assert outcomes[TARGET].failure == StepFailure(step="rewrite", round=2, message="EngineError: rewriter offline")
    assert [o.kind for o in others(outcomes, TARGET)] == ["delivered"] * 5
    # The others were retrieved with their rewritten queries.
    assert [o.trace[2].queries for o in others(outcomes, TARGET)] == [["the second paragraph, rewritten"]] * 5


def test_a_failed_step_is_traced_but_not_counted_as_an_evaluation(tmp_path):
    _, outcomes = run_with(tmp_path, complete_when_all_ten, breaking_for(load_pairs(), TARGET, 2, offline))
    assert [t.route for t in outcomes[TARGET].trace] == ["retrieval", "retrieve_more", "retrieval"]
    assert outcomes[TARGET].rounds == 1


@pytest.mark.parametrize(
    ("existing", "found"),
    [
        ([Chunk("a", "first"), Chunk("r2-1", "second")], [{"id": "x", "text": "zero"}, {"id": "a", "text": "one"}]),
        ([Chunk("r2-0", "the caller's")], [{"text": "retrieved, no id"}]),
        ([Chunk(1, "int id")], [{"id": "1", "text": "same id as text"}]),
    ],
    ids=["renamed-onto-taken", "default-onto-taken", "int-and-text"],
)
def test_merged_chunks_never_share_an_id(existing, found):
    merged, _ = merge_chunks(existing, found, 2)
    ids = [str(c.id) for c in merged]
    assert len(set(ids)) == len(ids)


def test_merge_rejects_a_result_that_is_not_a_list_of_chunks():
    with pytest.raises(InputError) as info:
        merge_chunks([], {"id": 0, "text": "a chunk, not a list"}, 2)  # type: ignore[arg-type]
    assert info.value.field == "chunks"


def test_merge_checks_a_chunk_object_like_a_mapping():
    with pytest.raises(InputError) as info:
        merge_chunks([], [Chunk(0, None)], 2)  # type: ignore[arg-type]
    assert info.value.field == "chunks[0].text"


# -- partial support under the loose and strict presets ------------------------------------

RESPONSE = "Ada Lovelace wrote the notes. The notes are from 1843."


def PARTIAL(request: GenerationRequest) -> str:
    """The author supported, the year not: PARTIALLY_SUFFICIENT, support ratio 0.5 (the loose preset's minimum)."""
    return recovery_reply(
        request,
        lambda index, text: "unsupported" if "1843" in text else "supported",
        notice="No passage gives the year.",
        queries=("Ada Lovelace notes year",),
    )


ADA = {
    "id": "ada",
    "question": "Who wrote the notes, and when?",
    "response": RESPONSE,
    "chunks": [{"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"}],
}


def partial_outcome(tmp_path, threshold: SufficiencyThreshold) -> Outcome:
    judge = Judge(ScriptedEngine(PARTIAL), RecoveryGate(threshold))
    pipeline = Pipeline(judge, FunctionRetriever(lambda query, k: []), audit=tmp_path / "audit.db")
    return pipeline.run([ADA])[0]


def test_loose_preset_delivers_a_partial_answer(tmp_path):
    assert partial_outcome(tmp_path, SufficiencyThreshold.loose()).kind == "delivered"


def test_loose_preset_delivers_the_checked_answer(tmp_path):
    # The response itself, cited, with its unsupported sentence marked in the text.
    answer = partial_outcome(tmp_path, SufficiencyThreshold.loose()).answer
    assert answer == "Ada Lovelace wrote the notes.[CITATION:ada.txt] The notes are from 1843.[UNSUPPORTED]"
    assert strip_markers(answer, "[UNSUPPORTED]") == RESPONSE


def test_loose_preset_delivers_the_unsupported_claims_and_the_gap_as_caveats(tmp_path):
    caveats = partial_outcome(tmp_path, SufficiencyThreshold.loose()).caveats
    assert caveats == ["The notes are from 1843.", "No passage gives the year."]


def test_strict_preset_sends_a_partial_answer_to_review(tmp_path):
    assert partial_outcome(tmp_path, SufficiencyThreshold.strict()).kind == "review"


def test_strict_preset_delivers_no_partial_answer(tmp_path):
    assert partial_outcome(tmp_path, SufficiencyThreshold.strict()).answer is None


def test_strict_preset_gives_no_caveats(tmp_path):
    assert partial_outcome(tmp_path, SufficiencyThreshold.strict()).caveats == []


@pytest.fixture
def xgrammar_engine(engine):
    """The session's engine on the default backend (xgrammar): both pipeline tests are
    marked ``any_backend``, so they run once, on the engine the matrix has open (an
    engine start is a minute here)."""
    assert engine.backend == "xgrammar"
    return engine


@pytest.mark.engine
@pytest.mark.any_backend
def test_loop_on_the_real_engine(tmp_path, xgrammar_engine):
    pairs = load_pairs()
    calls: list = []
    judge = Judge(xgrammar_engine, config=JudgeConfig(engine=EngineConfig(backend="xgrammar")))
    pipeline = Pipeline(
        judge, hotpot_retriever(pairs, calls), PipelineConfig(rewrite_queries=True), audit=tmp_path / "a.db"
    )
    outcomes = pipeline.run(questions(pairs)[:3])
    assert len(outcomes) == 3
    assert {o.kind for o in outcomes} <= {"delivered", "abstained", "review"}
    evaluations = sum(o.rounds for o in outcomes)
    report = pipeline.audit.verify()
    assert report.ok
    assert report.rows == evaluations
    rows = pipeline.audit.rows()
    assert all(r["model_id"].startswith("SmolLM2") for r in rows)
    assert all(r["weights_hash"] for r in rows)


class RecordingRewriter(QueryRewriter):
    """The pipeline's query rewriter, keeping what it was asked (proof that rewriting ran)."""

    def __init__(self, rewriter: QueryRewriter) -> None:
        super().__init__(rewriter.engine)
        self.requests: list[RewriteRequest] = []

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[list[str]]:
        self.requests.extend(requests)
        return super().rewrite(requests)


@pytest.mark.engine
@pytest.mark.any_backend
def test_a_failing_retrieval_after_rewriting_on_the_real_engine(tmp_path, xgrammar_engine):
    """Forced past round 1 (no verdict can reach a cumulative relevance score of 1000: the twins'
    10 paragraphs come without scores, which count 0), through query rewriting, into a round-2 retrieval that fails for
    one question: that question goes to review with the reason, the others finish."""
    pairs = load_pairs()
    records = [
        {"id": base, "question": twins["full"]["question"], "response": twins["full"]["answer"]}
        for base, twins in pairs.items()
    ][:3]  # the one whose retrieval fails and two others: about 25 s a record here
    # A cumulative score, not min_passages: a verdict may cite every source shown.
    unreachable = SufficiencyThreshold(min_cumulative_score=1000.0)
    judge = Judge(
        xgrammar_engine,
        RecoveryGate(unreachable),
        JudgeConfig(gate="recovery", engine=EngineConfig(backend="xgrammar")),
    )
    pipeline = Pipeline(
        judge,
        breaking_for(pairs, TARGET, 2, offline),
        PipelineConfig(max_rounds=2, rewrite_queries=True),
        audit=tmp_path / "audit.db",
    )
    assert pipeline.rewriter is not None
    rewriter = RecordingRewriter(pipeline.rewriter)
    pipeline.rewriter = rewriter
    outcomes = {o.id: o for o in pipeline.run(records)}
    rest = others(outcomes, TARGET)
    assert outcomes[TARGET].kind == "review"
    assert outcomes[TARGET].reason == "retrieval failed in round 2: ConnectionError: index offline"
    assert outcomes[TARGET].failure == StepFailure(step="retrieval", round=2, message="ConnectionError: index offline")
    assert records[0]["question"] in [r.question for r in rewriter.requests]  # rewritten before it failed
    assert [o.failure for o in rest] == [None, None]
    assert [o.rounds for o in rest] == [2, 2]  # past round 1, to the end of the budget
    assert [o.reason.startswith("retrieval budget of 2 rounds spent") for o in rest] == [True, True]
    assert pipeline.audit.verify().rows == 1 + 2 * 2


def test_a_dead_engine_is_not_one_questions_failure():
    from suffice.exceptions import EngineDeadError, RewriteError
    from suffice.serving.isolation import step_outcomes

    def dead(requests):
        raise EngineDeadError("the engine process 1 exited")

    with pytest.raises(EngineDeadError):
        step_outcomes(dead, ["a", "b"], RewriteError)


def test_an_empty_first_retrieval_searches_the_question_again_not_the_gates_note(tmp_path):
    seen: list[str] = []

    def search(query: str, k: int) -> list[dict[str, str]]:
        seen.append(query)
        return [] if len(seen) == 1 else [{"id": "hit", "text": f"about {query}", "source": "idx"}]

    pipeline = Pipeline(
        Judge(ScriptedEngine(lambda r: sufficiency_json(True, labels(r)), max_model_len=32768), "sufficiency"),
        FunctionRetriever(search),
        PipelineConfig(max_rounds=3),
        audit=tmp_path / "audit.db",
    )
    pipeline.run([{"id": "q1", "question": "Who founded the Hanseatic League?"}])
    assert seen[1] == "Who founded the Hanseatic League?"


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ('["a", "a", "A "]', ["g"]),  # only what was tried: the gap instead
        ('["b", "b", "a", "c"]', ["b", "c"]),  # repeats and the tried query dropped
    ],
)
def test_the_rewriter_sends_no_query_twice_nor_one_already_tried(written, expected):
    rewriter = QueryRewriter(ScriptedEngine(lambda request: written))
    [queries] = rewriter.rewrite([RewriteRequest(question="Q?", gaps=("g",), tried=("a",))])
    assert queries == expected


def test_a_time_limit_past_what_a_thread_can_wait_still_judges_every_question(tmp_path):
    # join() raised OverflowError past threading.TIMEOUT_MAX: every question failed.
    _, outcomes = run_with(
        tmp_path, complete_when_all_ten, hotpot_retriever(load_pairs(), []), PipelineConfig(retrieval_timeout_s=1e10)
    )
    assert [o.kind for o in outcomes.values()] == ["delivered"] * 6
