"""``deliver`` is earned, in every mode and entry point (issue 48): each gate x detail (full, decision, auto) x forced
outcome on the scripted engine, through the Python ``Judge``, ``suffice judge`` and ``suffice serve`` (routes read
from the audit log each writes) and the integrations.  Each case names the route ``main`` gave before
``Routing.deliver`` owned the deliver route (``before``): the table fails there wherever ``before`` differs.  The
real engine's case per mode is in ``tests/decisions/test_delivery_engine.py``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from suffice.audit import AuditLog
from suffice.batch.summary import RunSummary
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.gates.sufficiency.calibration import GateConfig
from suffice.grammars.routes import Routing
from suffice.integrations.gating import DocumentGate, Evidence
from suffice.judge import Judge
from suffice.serving.base import Generation, GenerationRequest
from tests.adequacy import criteria
from tests.fakes import ScriptedEngine, recovery_reply


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


QUESTION = "Who wrote the notes on the Analytical Engine?"
RESPONSE = "Ada Lovelace wrote the notes."
CHUNKS = [
    {"id": "a", "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"},
    {"id": "b", "text": "The notes on the Analytical Engine are by Ada Lovelace.", "source": "notes.txt"},
]
SUFFICIENCY = compact(
    {
        "required_entities": [{"entity": "the author", "covered": True}],
        "contradictions": [],
        "reasoning": "Chunk 0 answers.",
        "is_sufficient": True,
        "missing_information": [],
        "confidence": 0.9,
        "useful_chunk_ids": [0],
    }
)


def RECOVERY(request: GenerationRequest) -> str:
    """Every segment of the response supported by source 0: SUFFICIENT (each window of a long response alike)."""
    return recovery_reply(request, "supported")


def RECOVERY_PARTIAL(request: GenerationRequest) -> str:
    """The response's one segment partly supported: PARTIALLY_SUFFICIENT."""
    return recovery_reply(request, "partial", notice="No passage gives the year.", queries=("Ada Lovelace notes year",))


def adequacy(recommendation: str = "PROCEED_WITH_ANSWER", score: float = 0.95, rubric: str = "customer-support") -> str:
    names = ("factual_coverage", "temporal_relevance", "source_authority", "entity_completeness", "rubric_alignment")
    return compact(
        {
            "adequacy_decision": "PASS",
            "adequacy_score": score,
            "criteria": criteria(rubric, score, "covered"),
            "dimensions": {n: {"score": score, "assessment": "covered"} for n in names},
            "missing_information": [],
            "recommendation": recommendation,
            "rationale": "The chunks cover it.",
        }
    )


#: Each gate's decision token: its key and the positive value, as the constraint writes them.
DECISION = {
    "sufficiency": ("is_sufficient", "true", "false"),
    "recovery": ("classification", '"SUFFICIENT"', '"INSUFFICIENT"'),
    "adequacy": ("adequacy_decision", '"PASS"', '"FAIL"'),
}


@dataclass
class Case:
    gate: str
    detail: str
    full: str | Callable[[GenerationRequest], str]  # the full verdict the model writes (recovery: for its window)
    route: str  # the route it must take now
    before: str  # the route main took before this change
    rule: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    positive: bool = True  # the decision pass's value
    p: float = 0.97  # its probability

    @property
    def name(self) -> str:
        return f"{self.gate}-{self.detail}-{self.route}-{self.rule or 'none'}"


STRICT_ONE = {"threshold": "min_passages=1"}
LONG_RESPONSE = " ".join(["Ada Lovelace wrote the notes."] * 400)  # 2,000 words: past max_response_tokens=64
LONG_QUESTION = "Who wrote " + " ".join(["the notes"] * 300) + "?"
CLINICAL = {"rubric": "clinical-guidance"}
SUPPORT = {"rubric": "customer-support"}

CASES = [
    # sufficiency: its rule is the model's boolean, so the decision alone may deliver; a cut question never does.
    Case("sufficiency", "full", SUFFICIENCY, "deliver", "deliver"),
    Case("sufficiency", "decision", SUFFICIENCY, "deliver", "deliver"),
    Case("sufficiency", "auto", SUFFICIENCY, "deliver", "deliver"),
    Case(
        "sufficiency",
        "full",
        SUFFICIENCY,
        "human_review",
        "deliver",
        "question_not_fully_checked",
        record={"question": LONG_QUESTION},
        config={"max_question_tokens": 32},
    ),
    Case(
        "sufficiency",
        "decision",
        SUFFICIENCY,
        "human_review",
        "deliver",
        "question_not_fully_checked",
        record={"question": LONG_QUESTION},
        config={"max_question_tokens": 32},
    ),
    # recovery: threshold and citations are read from the full verdict; a long response is judged whole, in windows.
    Case("recovery", "full", RECOVERY, "deliver", "deliver", options=STRICT_ONE),
    Case("recovery", "decision", RECOVERY, "human_review", "deliver", "decision_only", options=STRICT_ONE),
    Case("recovery", "auto", RECOVERY, "deliver", "deliver", options=STRICT_ONE),  # earned from the full verdict
    Case(
        "recovery",
        "decision",
        RECOVERY,
        "human_review",
        "deliver",
        "decision_only",
        options=STRICT_ONE,
        record={"response": LONG_RESPONSE},
        config={"max_response_tokens": 64},
    ),
    Case(
        "recovery",
        "auto",
        RECOVERY,
        "deliver",
        "deliver",
        options=STRICT_ONE,
        record={"response": LONG_RESPONSE},
        config={"max_response_tokens": 64},
    ),
    Case(
        "recovery",
        "decision",
        RECOVERY_PARTIAL,
        "human_review",
        "retrieve_more",
        "decision_only_high_stakes",
        options=STRICT_ONE,
        positive=False,
        p=0.1,
    ),
    Case(
        "recovery",
        "auto",
        RECOVERY_PARTIAL,
        "human_review",
        "human_review",
        "partial_under_high_stakes",
        options=STRICT_ONE,
        positive=False,
        p=0.1,
    ),
    # adequacy: the composite, the critical floors and the recommendation are read from the full verdict.
    Case("adequacy", "full", adequacy(), "deliver", "deliver", options=SUPPORT),
    Case(
        "adequacy",
        "decision",
        adequacy(rubric=CLINICAL["rubric"]),
        "human_review",
        "deliver",
        "decision_only",
        options=CLINICAL,
    ),
    Case(
        "adequacy",
        "auto",
        adequacy("ESCALATE_TO_HUMAN", rubric=CLINICAL["rubric"]),
        "human_review",
        "deliver",
        "model_escalated",
        options=CLINICAL,
    ),
    Case(
        "adequacy",
        "full",
        adequacy(),
        "human_review",
        "deliver",
        "question_not_fully_checked",
        options=SUPPORT,
        record={"question": LONG_QUESTION},
        config={"max_question_tokens": 32},
    ),
]


def script(case: Case):
    key, yes, no = DECISION[case.gate]
    value = yes if case.positive else no
    other = no if case.positive else yes

    def answer(request: GenerationRequest) -> str | Generation:
        full = full_verdict(case, request)
        if full is not None:
            return full
        text = "{" + json.dumps(key) + ":" + value + "}"
        top = ({}, {value: math.log(case.p if case.positive else 1 - case.p), other: math.log(0.03)}, {})
        return Generation(text, "stop", 10, 3, tokens=("{" + json.dumps(key) + ":", value, "}"), top_logprobs=top)

    return answer


def full_verdict(case: Case, request: GenerationRequest) -> str | None:
    """The full verdict for a request that asks for one, else None (the decision pass)."""
    if callable(case.full):
        return None if request.constraint.key.startswith("decision/") else case.full(request)
    return case.full if request.constraint.matches(case.full) else None


def the_record(case: Case, rid: str = "q1") -> dict[str, Any]:
    record: dict[str, Any] = {"id": rid, "question": QUESTION, "chunks": CHUNKS}
    if case.gate == "recovery":
        record["response"] = RESPONSE
    return {**record, **case.record}


def judge_config(case: Case) -> JudgeConfig:
    return JudgeConfig(gate=case.gate, detail=case.detail, options=case.options, cache=False, **case.config)


def routed(case: Case, judge: Judge, result) -> Routing:
    assert result.verdict is not None, result.error
    return judge.gate.route(result.verdict)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_python_judge_routes_each_case(case: Case):
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    [result] = judge.judge_batch([the_record(case)])
    routing = routed(case, judge, result)
    assert (routing.route, routing.rule) == (case.route, case.rule)
    if case.route != "deliver":
        assert routing.checked is None


def test_the_table_differs_from_main_where_issue_48_says_it_broke():
    # The cases whose route changed: decision-only and auto deliveries that were not checked, cut questions.  (A
    # long response judged in auto mode was a person's under recovery v3, checked only up to the cut; v4 judges it
    # whole, in windows, and delivers it as main did.)
    changed = [c.name for c in CASES if c.before != c.route]
    assert len(changed) == 8 and all(c.route == "human_review" for c in CASES if c.before != c.route)


# max_question_tokens and max_response_tokens are per-request settings with no flag (the service and Python set them).
@pytest.mark.parametrize("case", [c for c in CASES if not c.config], ids=lambda c: c.name)
def test_suffice_judge_writes_the_same_route_to_its_audit_log(case: Case, tmp_path: Path, monkeypatch):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(the_record(case)) + "\n")
    engine = ScriptedEngine(script(case))
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(engine, config=config)))
    args = ["--gate", case.gate, "--detail", case.detail]
    for key, value in case.options.items():
        args += ["--gate-option", f"{key}={value}"]
    db = tmp_path / "audit.db"
    main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress", "--audit-db", str(db), *args])
    log = AuditLog(db)
    try:
        [row] = log.rows()
        reviews = log.reviews()
    finally:
        log.close()
    assert row["decision"] == case.route and row["rule"] == case.rule
    if case.rule is not None:
        [review] = reviews
        assert review["reason"].startswith(f"{case.rule}: ")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suffice_serve_writes_the_same_route_to_its_audit_log(case: Case, tmp_path: Path):
    from suffice.server.app import create_app
    from suffice.server.config import ServeConfig
    from suffice.server.service import GateService

    db = tmp_path / "audit.db"
    config = ServeConfig(judge=judge_config(case), gates=(case.gate,), options=case.options, audit_db=db)
    service = GateService(config, ScriptedEngine(script(case)))
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    body = client.post(f"/v1/judge/{case.gate}", json=[the_record(case)]).json()
    service.close()
    assert body["results"][0]["verdict"] is not None
    log = AuditLog(db)
    try:
        [row] = log.rows()
    finally:
        log.close()
    assert (row["decision"], row["rule"]) == (case.route, case.rule)


@pytest.mark.parametrize("case", [c for c in CASES if c.detail == "full"], ids=lambda c: c.name)
def test_an_integration_keeps_documents_only_on_delivery(case: Case):
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    gate = DocumentGate(judge, on_insufficient="keep")
    record = the_record(case)
    evidence = [Evidence(c["text"], id=c["id"], source=c["source"]) for c in record["chunks"]]
    kept, outcome = gate.select(record["question"], evidence, record.get("response"))
    assert outcome is not None and outcome.routing.route == case.route and outcome.positive == (case.route == "deliver")
    if case.route == "human_review":
        # on_insufficient="keep" is not "keep and generate" for a record a person must see.
        assert kept == [] and outcome.dropped == [0, 1] and outcome.policy == "human_review: on_review='empty'"


def test_a_model_escalation_keeps_no_document_unless_asked_for_by_name():
    case = Case("adequacy", "full", adequacy("ESCALATE_TO_HUMAN"), "human_review", "deliver", options=SUPPORT)
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    evidence = [Evidence(c["text"], id=c["id"]) for c in CHUNKS]
    kept, outcome = DocumentGate(judge, on_insufficient="keep").select(QUESTION, evidence)
    assert kept == [] and outcome is not None and outcome.routing.rule == "model_escalated"
    kept, outcome = DocumentGate(judge, on_insufficient="keep", on_review="keep").select(QUESTION, evidence)
    assert kept == [0, 1] and outcome is not None and outcome.policy == "human_review: on_review='keep'"
    assert outcome.metadata()["positive"] is False


def test_the_summary_counts_an_escalated_pass_as_not_sufficient():
    case = Case("adequacy", "full", adequacy("ESCALATE_TO_HUMAN"), "human_review", "deliver", options=SUPPORT)
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    records = [the_record(case, "q1"), the_record(case, "q2")]
    results = judge.judge_batch(records)
    summary = RunSummary(gate="adequacy", positive=judge.gate.is_positive, route=lambda v: judge.gate.route(v).route)
    summary.add(records, results)
    assert (summary.sufficient, summary.routes) == (0, {"human_review": 2})


def test_a_deliver_route_cannot_be_built_by_hand():
    with pytest.raises(TypeError, match=r"Routing\.deliver"):
        Routing("deliver", "the model said so")
    from suffice.grammars.routes import Checked

    with pytest.raises(TypeError, match="never by hand"):
        Checked(object(), "sufficiency")


# -- a calibrated threshold that overrides the model ---------------------------------------------------------
def calibrated(tmp_path: Path, threshold: float, full: str, p: float) -> tuple[Judge, Any]:
    path = tmp_path / "gate.json"
    GateConfig(gate="sufficiency", score="p_sufficient", threshold=threshold).save(path)
    value = json.loads(full)["is_sufficient"]
    token = "true" if value else "false"

    def answer(request: GenerationRequest) -> Generation:
        logprobs: dict[str, float] = {"true": math.log(p), "false": math.log(1 - p)}
        marker = full.index('"is_sufficient":') + len('"is_sufficient":')
        tokens = (full[:marker], token, full[marker + len(token) :])
        return Generation(full, "stop", 10, 3, tokens=tokens, top_logprobs=({}, logprobs, {}))

    judge = Judge(
        ScriptedEngine(answer), config=JudgeConfig(gate="sufficiency", options={"gate_config": str(path)}, cache=False)
    )
    [result] = judge.judge_batch([{"id": "q1", "question": QUESTION, "chunks": CHUNKS}])
    return judge, result.verdict


def test_a_flip_to_insufficient_carries_a_gap_and_queries_from_the_verdict(tmp_path: Path):
    from suffice.formats.verdicts import export

    judge, verdict = calibrated(tmp_path, 0.9, SUFFICIENCY, p=0.6)
    assert verdict.is_sufficient is True and verdict.decision.sufficient is False
    routing = judge.gate.route(verdict)
    assert routing.route == "retrieve_more"
    assert routing.gap == ["evidence for the author"] and routing.queries == ["the author"]
    seed = export(judge.gate, verdict, "ragflow")["verdict"]
    assert seed["is_sufficient"] is False and seed["missing_information"] == ["evidence for the author"]


def test_a_flip_to_sufficient_clears_what_contradicts_it(tmp_path: Path):
    from suffice.formats.verdicts import export

    insufficient = compact(
        {
            "required_entities": [{"entity": "the author", "covered": True}],
            "contradictions": [],
            "reasoning": "Not sure.",
            "is_sufficient": False,
            "missing_information": ["the date"],
            "confidence": 0.4,
            "useful_chunk_ids": [0],
        }
    )
    judge, verdict = calibrated(tmp_path, 0.2, insufficient, p=0.4)
    assert verdict.is_sufficient is False and verdict.decision.sufficient is True
    routing = judge.gate.route(verdict)
    assert (routing.route, routing.gap, routing.queries) == ("deliver", [], [])
    seed = export(judge.gate, verdict, "ragflow")["verdict"]
    assert seed["is_sufficient"] is True and seed["missing_information"] == []


# -- the Pipeline, the pytest helpers, Ray: the same routes ---------------------------------------------------
@pytest.mark.parametrize("case", [c for c in CASES if c.route in ("deliver", "human_review")], ids=lambda c: c.name)
def test_the_pipeline_delivers_or_sends_to_a_person_as_the_table_says(case: Case, tmp_path: Path):
    from suffice.harness.pipeline import Pipeline, PipelineConfig
    from suffice.harness.retrieval import FunctionRetriever

    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    run = Pipeline(judge, FunctionRetriever(lambda q, k: []), PipelineConfig(), audit=tmp_path / "audit.db")
    [outcome] = run.run([the_record(case)])
    if case.route == "deliver":
        assert outcome.kind == "delivered"
    else:
        assert (outcome.kind, outcome.rule) == ("review", case.rule)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_pytest_helper_passes_only_what_delivers(case: Case):
    from suffice.testing import assert_passes

    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    if case.route == "deliver":
        assert_passes(judge, the_record(case))
    else:
        with pytest.raises(AssertionError):
            assert_passes(judge, the_record(case))


# -- each framework, and a Client through a live service: a route to a person never "keeps and generates" ------
def escalating() -> Judge:
    case = Case("adequacy", "full", adequacy("ESCALATE_TO_HUMAN"), "human_review", "deliver", options=SUPPORT)
    return Judge(ScriptedEngine(script(case)), config=judge_config(case))


def test_langchain_keeps_no_document_of_a_model_escalation():
    from langchain_core.documents import Document

    from suffice.integrations.langchain import SufficiencyCompressor

    docs = [Document(page_content=c["text"], id=c["id"]) for c in CHUNKS]
    assert SufficiencyCompressor(escalating(), on_insufficient="keep").compress_documents(docs, QUESTION) == []
    kept = SufficiencyCompressor(escalating(), on_insufficient="keep", on_review="keep").compress_documents(
        docs, QUESTION
    )
    assert [d.id for d in kept] == ["a", "b"]


def test_llama_index_keeps_no_node_of_a_model_escalation():
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from suffice.integrations.llama_index import SufficiencyPostprocessor

    nodes = [NodeWithScore(node=TextNode(id_=c["id"], text=c["text"]), score=1.0) for c in CHUNKS]
    post = SufficiencyPostprocessor(escalating(), on_insufficient="keep")
    assert post.postprocess_nodes(nodes, QueryBundle(QUESTION)) == []


def test_haystack_routes_a_model_escalation_away_from_generation():
    import haystack

    from suffice.integrations.haystack import SufficiencyRouter

    docs = [haystack.Document(id=c["id"], content=c["text"]) for c in CHUNKS]
    out = SufficiencyRouter(escalating()).run(QUESTION, docs)
    assert "documents" not in out and "insufficient" in out
    out = SufficiencyRouter(escalating(), on_insufficient="keep").run(QUESTION, docs)
    assert out["documents"] == []


@pytest.mark.parametrize("case", [c for c in CASES if c.detail == "decision"], ids=lambda c: c.name)
def test_a_client_of_a_live_service_routes_as_the_table_says(case: Case):
    from suffice import Client
    from tests.server.live import live

    with (
        live(ScriptedEngine(script(case)), judge=judge_config(case), gates=(case.gate,), options=case.options) as (
            _,
            port,
        ),
        Client(f"http://127.0.0.1:{port}") as client,
    ):
        evidence = [Evidence(c["text"], id=c["id"], source=c["source"]) for c in CHUNKS]
        record = the_record(case)
        gate = DocumentGate(client, gate=case.gate, on_insufficient="keep")
        kept, outcome = gate.select(record["question"], evidence, record.get("response"))
    assert outcome is not None and (outcome.routing.route, outcome.routing.rule) == (case.route, case.rule)
    assert kept == ([0, 1] if case.route == "deliver" else [])


# -- what the verdict itself records agrees with the route ----------------------------------------------------
def test_a_cut_question_is_recorded_as_a_persons_in_the_verdict_and_its_exports():
    from suffice.formats.verdicts import export

    case = next(c for c in CASES if c.gate == "adequacy" and c.rule == "question_not_fully_checked")
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    [result] = judge.judge_batch([the_record(case)])
    assert (result.verdict.decision.route, result.verdict.decision.rule) == ("human_review", case.rule)
    recovery = Case(
        "recovery", "full", RECOVERY, "human_review", "deliver", options=STRICT_ONE, config={"max_question_tokens": 32}
    )
    judge = Judge(ScriptedEngine(script(recovery)), config=judge_config(recovery))
    [result] = judge.judge_batch([the_record(recovery, rid="q2") | {"question": LONG_QUESTION}])
    assert (result.verdict.decision.route, result.verdict.decision.rule) == ("human_review", case.rule)
    assert result.verdict.delivered_answer is None
    assert export(judge.gate, result.verdict, "seed")["decision"]["route"] == "human_review"
    sufficiency = Case(
        "sufficiency", "full", SUFFICIENCY, "human_review", "deliver", config={"max_question_tokens": 32}
    )
    judge = Judge(ScriptedEngine(script(sufficiency)), config=judge_config(sufficiency))
    [result] = judge.judge_batch([the_record(sufficiency) | {"question": LONG_QUESTION}])
    assert export(judge.gate, result.verdict, "ragflow")["verdict"]["Sufficient Context"] is False


def test_auto_on_a_gate_whose_decision_cannot_deliver_judges_in_full_in_one_pass():
    case = next(c for c in CASES if c.gate == "recovery" and c.detail == "auto")
    engine = ScriptedEngine(script(case))
    judge = Judge(engine, config=judge_config(case))
    results = judge.judge_batch([the_record(case, "q1"), the_record(case, "q2")])
    assert engine.calls == [2]  # no decision pass: it would only add its prefill
    assert all(
        r.cascade is not None and (r.cascade.detail, r.cascade.reason) == ("full", "decision_only") for r in results
    )


def test_a_long_response_under_auto_is_judged_whole_in_windows_and_delivered_cited():
    # What replaced response_not_fully_checked (recovery v3): no part of the response goes unchecked, so its
    # length never sends it to a person.
    from suffice.gates.recovery.citing import strip_markers

    case = next(c for c in CASES if c.gate == "recovery" and c.detail == "auto" and "response" in c.record)
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    [result] = judge.judge_batch([the_record(case)])
    verdict = result.verdict
    assert verdict.windows > 1 and [s.index for s in verdict.segments] == list(range(400))
    assert not verdict.response_truncated and {s.label for s in verdict.segments} == {"supported"}
    routing = judge.gate.route(verdict)
    assert routing.route == "deliver" and routing.citations == ["ada.txt"]
    assert strip_markers(routing.answer) == LONG_RESPONSE and routing.answer.count("[CITATION:ada.txt]") == 400


def test_a_decision_only_record_with_no_evidence_is_not_sent_to_a_person():
    case = next(c for c in CASES if c.rule == "decision_only_high_stakes")
    judge = Judge(ScriptedEngine(script(case)), config=judge_config(case))
    [result] = judge.judge_batch([the_record(case) | {"chunks": []}])
    assert result.verdict.model_called is False and judge.gate.route(result.verdict).route == "retrieve_more"
