"""Issue 40's real queries: ``max_retrieval_queries`` adds a bounded ``retrieval_queries`` list to the sufficiency
verdict's constraint, and the route's ``queries`` (an error's, a router's) are the verdict's.  Off, the prompt, the
constraint and the verdict's JSON are what they were before the option existed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from suffice import InsufficientContextError, Judge, JudgeConfig
from suffice.gates.decision_mode import DecisionGate
from suffice.gates.sufficiency.gate import SufficiencyGate, SufficiencyOptions
from suffice.gates.sufficiency.grammar import SufficiencyBounds, SufficiencyOutput, sufficiency_constraint
from suffice.integrations.gating import DocumentGate, Evidence
from suffice.records.item import Chunk, Item
from suffice.serving.base import GenerationRequest
from suffice.settings import per_request
from tests.conftest import load_records
from tests.fakes import ScriptedEngine
from tests.gates.test_sufficiency_gate import fitted

B = SufficiencyBounds

RECORD = {
    "id": "q1",
    "question": "When was the treaty of Paris signed?",
    "chunks": [{"id": "c0", "text": "Paris is a city."}, {"id": "c1", "text": "Treaties are signed."}],
}
QUERIES = ["treaty of Paris signing date", "Paris treaty 1783"]


def insufficient(queries: list[str] | None = None) -> str:
    verdict: dict[str, Any] = {
        "required_entities": [{"entity": "Paris", "covered": False}],
        "contradictions": [],
        "reasoning": "Chunk 0 does not name the year.",
        "is_sufficient": False,
        "missing_information": ["the year of the treaty"],
    }
    if queries is not None:
        verdict["retrieval_queries"] = queries
    verdict |= {"confidence": 0.8, "useful_chunk_ids": [0]}
    return json.dumps(verdict, separators=(",", ":"))


def sufficient(queries: list[str] | None = None) -> str:
    verdict: dict[str, Any] = {
        "required_entities": [{"entity": "Paris", "covered": True}],
        "contradictions": [],
        "reasoning": "Chunk 0 names it.",
        "is_sufficient": True,
        "missing_information": [],
    }
    if queries is not None:
        verdict["retrieval_queries"] = queries
    verdict |= {"confidence": 0.9, "useful_chunk_ids": [0]}
    return json.dumps(verdict, separators=(",", ":"))


class Recording:
    """A script answering ``answer`` (checked against the request's constraint), keeping the requests."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[GenerationRequest] = []

    def __call__(self, request: GenerationRequest) -> str:
        self.requests.append(request)
        assert request.constraint.matches(self.answer), self.answer
        return self.answer


def judged(answer: str, options: dict[str, Any] | None = None) -> tuple[Any, Recording]:
    script = Recording(answer)
    config = JudgeConfig(gate="sufficiency", options=options or {})
    with Judge(ScriptedEngine(script, max_model_len=32768), config=config) as judge:
        (result,) = judge.judge_batch([RECORD])
    return result, script


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- off: byte for byte what main wrote before the option (computed once on main at b24d0f1) -------------------------

#: Digests of the rendered system prompt and of the constraint's patterns for RECORD, and the verdict's JSON.
#: A deliberate change to the template or the grammar changes them: recompute them then.
GOLDEN_OFF = {
    "system": "fd888791927be04bba65414ed8a4e6f121355fc7290968590fd821cf09ac15a2",
    "pattern": "20d2820d0601f18a579272691234c2f963dab99207c980ab210357fe793ffec5",
    "head": "a61fdc2fda8d03b87f7123a56c26dbec98785f67ff73e7f097dd08f8766e025b",
    "coarse": "105add26e0fc52a3dd40c5e77388f792026855abf1037846275b9d3619d30f45",
    "key": "sufficiency/2",
    "max_bytes": 2471,
    "bound": 2435,
    "verdict": (
        '{"is_sufficient":false,"required_entities":["Paris"],"coverage":{"Paris":false},'
        '"missing_information":["the year of the treaty"],"contradictions":[],"confidence":0.8,'
        '"reasoning":"Chunk 0 does not name the year.","useful_chunk_ids":["c0"],"prompt_version":"sufficiency/v6",'
        '"truncated_chunk_ids":[],"omitted_chunk_ids":[],"question_truncated":false,"model_called":true,'
        '"p_sufficient":null,"decision":null,"forced_by":"uncovered_entity","at_limit":[]}'
    ),
}


@pytest.mark.parametrize("options", [None, {"max_retrieval_queries": 0}])
def test_off_the_prompt_constraint_and_verdict_are_byte_for_byte_as_before(options):
    result, script = judged(insufficient(), options)
    (request,) = script.requests
    c = request.constraint
    assert c.head is not None and c.coarse_head is not None
    seen = {
        "system": sha(request.messages[0]["content"]),
        "pattern": sha(c.pattern),
        "head": sha(c.head.pattern),
        "coarse": sha(c.coarse_head.pattern),
        "key": c.key,
        "max_bytes": c.max_bytes,
        "bound": c.completion_bound,
        "verdict": result.verdict.model_dump_json(),
    }
    assert seen == GOLDEN_OFF
    assert "retrieval_queries" not in request.messages[0]["content"]
    assert result.verdict.retrieval_queries is None
    assert "retrieval_queries" not in result.model_dump(mode="json")["verdict"]


def test_off_an_output_with_queries_is_refused_by_the_constraint():
    assert not sufficiency_constraint(2).matches(insufficient(QUERIES))


def test_the_decision_only_constraint_is_the_same_with_the_option_on():
    chunks = [Chunk(id="c0", text="t")]
    off = DecisionGate(SufficiencyGate()).constraint_for(chunks)
    on = DecisionGate(SufficiencyGate(bounds=SufficiencyBounds(queries_max=3))).constraint_for(chunks)
    assert (on.pattern, on.key) == (off.pattern, off.key)


# -- on: the constraint, the prompt, the verdict ----------------------------------------------------------------------


def test_on_the_prompt_asks_for_queries_and_the_verdict_holds_them():
    result, script = judged(insufficient(QUERIES), {"max_retrieval_queries": 2})
    system = script.requests[0].messages[0]["content"]
    assert '"retrieval_queries": [<a search query for a missing fact>]' in system
    assert "retrieval_queries lists 1 to 2 short search queries (at most 64 characters each)" in system
    assert script.requests[0].constraint.key == "sufficiency/2/q2"
    assert result.verdict.retrieval_queries == QUERIES
    assert result.verdict.at_limit == ["retrieval_queries"]
    assert json.loads(result.verdict.model_dump_json())["retrieval_queries"] == QUERIES


@pytest.mark.parametrize("most", [1, 3, B.QUERIES_RANGE[1]])
def test_the_constraint_admits_one_to_the_bound_and_refuses_more(most):
    c = sufficiency_constraint(2, SufficiencyBounds(queries_max=most))
    queries = [f"query number {i}" for i in range(most + 1)]
    for n in range(1, most + 1):
        assert c.matches(insufficient(queries[:n]))
    assert not c.matches(insufficient(queries))  # one too many
    assert not c.matches(insufficient([]))  # an insufficient verdict names at least one
    assert not c.matches(insufficient())  # the list is not optional when on


def test_the_constraint_refuses_a_query_too_long_or_naming_nothing():
    c = sufficiency_constraint(2, SufficiencyBounds(queries_max=2))
    assert c.matches(insufficient(["x" * B.QUERY_CHARS]))
    assert not c.matches(insufficient(["x" * (B.QUERY_CHARS + 1)]))
    assert not c.matches(insufficient(["--"]))


def test_a_sufficient_verdict_has_an_empty_list_when_on():
    c = sufficiency_constraint(2, SufficiencyBounds(queries_max=2))
    assert c.matches(sufficient([]))
    assert not c.matches(sufficient(["more about Paris"]))
    assert not c.matches(sufficient())
    result, _ = judged(sufficient([]), {"max_retrieval_queries": 2})
    assert result.verdict.retrieval_queries == []


def test_what_the_constraint_refuses_the_output_model_refuses_too():
    bounds = SufficiencyBounds(queries_max=2)

    def valid(text: str) -> bool:
        try:
            SufficiencyOutput.model_validate(json.loads(text), context={"bounds": bounds})
        except ValueError:
            return False
        return True

    assert valid(insufficient(QUERIES))
    for text in (insufficient([*QUERIES, "a third"]), insufficient(["x" * 65]), insufficient([]), insufficient()):
        assert not valid(text)
    assert not valid(sufficient(["x"]))
    with pytest.raises(ValueError, match="max_retrieval_queries is 0"):
        SufficiencyOutput.model_validate(json.loads(insufficient(QUERIES)))


def test_the_segments_and_the_coarse_head_are_keyed_by_the_bound():
    on = sufficiency_constraint(3, SufficiencyBounds(queries_max=2))
    off = sufficiency_constraint(3)
    assert on.coarse_head is not None and off.coarse_head is not None
    assert on.coarse_head.key == off.coarse_head.key + "/q2"
    assert on.head is not None and off.head is not None and on.head.key == off.head.key  # the head is the same
    assert on.completion_bound is not None and off.completion_bound is not None
    assert on.completion_bound > off.completion_bound


# -- the option: range, settings, per request --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, B.QUERIES_RANGE[1] + 1])
def test_out_of_range_is_named(value):
    from suffice.exceptions import ConfigError

    with pytest.raises(ConfigError, match="max_retrieval_queries"):
        SufficiencyOptions.parse("sufficiency", {"max_retrieval_queries": value})


def test_the_option_shows_in_the_settings_only_when_on():
    on = SufficiencyGate.from_options(SufficiencyOptions(max_retrieval_queries=2))
    assert on.settings()["max_retrieval_queries"] == "2"
    assert "max_retrieval_queries" not in SufficiencyGate().settings()
    assert "max_retrieval_queries" in {d.name for d in per_request(SufficiencyOptions)}


# -- the route and what callers get ----------------------------------------------------------------------------------


def test_the_routes_queries_are_the_verdicts():
    g = SufficiencyGate(bounds=SufficiencyBounds(queries_max=2))
    verdict = g.parse(
        insufficient(QUERIES), fitted(g, 2), Item(id="q", question="q?", chunks=(Chunk(id="c0", text="t"),))
    )
    routing = g.route(verdict)
    assert (routing.route, routing.queries, routing.gap) == ("retrieve_more", QUERIES, ["the year of the treaty"])
    assert g.seed_extras(verdict)["retrieval_queries"] == QUERIES


def test_with_nothing_retrieved_the_question_is_the_query():
    g = SufficiencyGate(bounds=SufficiencyBounds(queries_max=2))
    verdict = g.shortcut(Item(id="q", question="When was it signed?", chunks=()))
    assert verdict is not None and g.route(verdict).queries == ["When was it signed?"]
    off = SufficiencyGate().shortcut(Item(id="q", question="When was it signed?", chunks=()))
    assert off is not None and off.retrieval_queries is None and SufficiencyGate().route(off).queries == []


@pytest.fixture
def querying_judge() -> Iterator[Judge]:
    def script(request: GenerationRequest) -> str:
        answer = insufficient(QUERIES)
        assert request.constraint.matches(answer)
        return answer

    config = JudgeConfig(gate="sufficiency", options={"max_retrieval_queries": 3})
    with Judge(ScriptedEngine(script), config=config) as judge:
        yield judge


def test_an_integrations_error_carries_the_verdicts_queries(querying_judge: Judge):
    docs = [Evidence("Paris is a city.", id="a"), Evidence("Treaties are signed.", id="b")]
    with pytest.raises(InsufficientContextError) as caught:
        DocumentGate(querying_judge).select("When was the treaty of Paris signed?", docs)
    assert caught.value.queries == QUERIES
    assert caught.value.missing == ["the year of the treaty"]


def test_a_request_to_the_service_sets_the_option():
    from suffice import Client
    from tests.test_client import serve

    def script(request: GenerationRequest) -> str:
        on = '"retrieval_queries"' in request.constraint.pattern
        return insufficient(QUERIES if on else None)

    with serve(ScriptedEngine(script), judge=JudgeConfig()) as url, Client(url) as client:
        (on,) = client.judge_batch([RECORD], options={"max_retrieval_queries": 2})
        (off,) = client.judge_batch([RECORD])
    assert on.verdict is not None and on.verdict.retrieval_queries == QUERIES
    assert off.verdict is not None and off.verdict.retrieval_queries is None


# -- the real model ----------------------------------------------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.any_backend
def test_the_models_insufficient_verdict_holds_queries_within_the_bounds(engine):
    # A labeled insufficient one (no answer in its chunks) and two made up; a small model calls some of them
    # sufficient.  Few records: each full verdict is tens of seconds of CI on two cores.
    unanswerable = [r for r in load_records("squad2.jsonl", 12) if r.get("sufficient") is False][:1]
    records = [
        *unanswerable,
        {**RECORD, "id": "unknown-year"},
        {
            "id": "no-answer",
            "question": "What is the population of the city where the Eiffel Tower stands, in 1850?",
            "chunks": [{"id": 0, "text": "The Eiffel Tower is made of wrought iron."}],
        },
    ]
    most = 2
    judge = Judge(engine, config=JudgeConfig(gate="sufficiency", options={"max_retrieval_queries": most}))
    results = judge.judge_batch(records)
    for result in results:
        verdict = result.verdict
        assert verdict is not None, result.error
        queries = verdict.retrieval_queries
        assert queries is not None
        assert len(queries) <= most and all(1 <= len(q) <= B.QUERY_CHARS for q in queries)
        routing = judge.gate.route(verdict)
        if not judge.gate.is_positive(verdict):
            assert len(queries) >= 1 and routing.queries == queries
        else:
            assert queries == []
    assert any(r.verdict is not None and r.verdict.retrieval_queries for r in results)


def test_the_docs_state_the_query_bounds_the_code_has():
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "gates.md").read_text(encoding="utf-8").split())
    assert f"1 to N search queries of at most {B.QUERY_CHARS} characters each" in text
    assert f"`max_retrieval_queries` N > 0 (default {B.QUERIES_MAX}: off)" in text
    assert f"its question (cut to {B.QUERY_CHARS} characters)" in text
    assert "`sufficiency/20/q3`" in text and sufficiency_constraint(20, SufficiencyBounds(queries_max=3)).key == (
        "sufficiency/20/q3"
    )


@pytest.mark.parametrize("most", [0, 2])
def test_a_parquet_row_reads_back_as_its_json_row(tmp_path, most):
    from tests.rows.test_tables import result, row_of, shortcut_verdict, write_rows

    g = SufficiencyGate(bounds=SufficiencyBounds(queries_max=most))
    row = row_of(result(g, shortcut_verdict(g)), g, 1)
    assert ("retrieval_queries" in row["verdict"]) == bool(most)
    (back,) = write_rows(tmp_path / "out.parquet", g, [row])
    assert back["verdict"] == row["verdict"]
