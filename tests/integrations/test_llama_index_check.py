"""suffice.integrations.llama_index.ResponseCheck: a query engine's response checked against its own source nodes,
on a scripted recovery engine (see checks.py: the answer's segments labelled by the question), by itself and after
a real LlamaIndex query engine (a mock embedding, an LLM that always gives one answer: nothing is downloaded).

A delivered answer is the answer byte for byte with ``[CITATION:node_id]`` inline: the tests compare it whole, so an
answer handed on uncited fails them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.response.schema import Response, StreamingResponse
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from suffice import Client, ConfigError, GateFailedError, InputError, Judge, ServiceUnavailableError
from suffice.integrations.llama_index import CheckedAnswer, ResponseCheck
from tests.fakes import ScriptedEngine
from tests.integrations.checks import (
    ANSWER,
    MARKER,
    PARTLY,
    PARTLY_QUESTION,
    QUERIES,
    QUESTION,
    UNKNOWN,
    UNKNOWN_ANSWER,
    citations,
    cited,
    partly_cited,
    recovery_script,
    uncited,
)


def nodes() -> list[NodeWithScore]:
    """Three retrieved nodes, as a retriever returns them (own ids, scores, metadata)."""
    texts = [
        ("crew", "Apollo 11 launched from Florida on 16 July 1969.", 0.5),
        ("launch", "Apollo 11 launched on 16 July 1969.", 0.9),
        ("moon", "The Moon is far away.", 0.1),
    ]
    return [
        NodeWithScore(node=TextNode(id_=i, text=text, metadata={"page": n}), score=score)
        for n, (i, text, score) in enumerate(texts)
    ]


def response(answer: str = ANSWER) -> Response:
    return Response(answer, source_nodes=nodes())


@pytest.fixture
def judge() -> Iterator[Judge]:
    with Judge(ScriptedEngine(recovery_script), "recovery") as judge:
        yield judge


def check(judge: Any, question: str = QUESTION, answer: str = ANSWER, **settings: Any) -> CheckedAnswer:
    return ResponseCheck(judge, **settings).check(question, response(answer))


# -- a supported answer: delivered, cited ------------------------------------------------------------------------


def test_a_supported_answer_is_delivered(judge: Judge):
    assert check(judge).route == "deliver"


def test_a_delivered_answer_cites_the_source_nodes_inline(judge: Judge):
    assert check(judge).delivered == cited("crew", "launch")


def test_the_citations_name_the_node_ids_and_leave_the_answer_byte_for_byte(judge: Judge):
    delivered = check(judge).delivered
    assert delivered is not None and (citations(delivered), uncited(delivered)) == (["crew", "launch"], ANSWER)


def test_the_answer_as_given_is_kept_beside_the_cited_one(judge: Judge):
    checked = check(judge)
    assert (checked.answer, checked.cited_answer) == (ANSWER, cited("crew", "launch"))


def test_the_segments_carry_their_labels_and_sources(judge: Judge):
    assert [(s.text, s.label, s.sources) for s in check(judge).segments] == [(ANSWER, "supported", ["crew", "launch"])]


def test_nodes_and_an_answer_are_checked_as_a_response_is(judge: Judge):
    checked = ResponseCheck(judge).check(QueryBundle(QUESTION), nodes=nodes(), answer=ANSWER)
    assert checked.delivered == cited("crew", "launch")


# -- an unsupported answer: not delivered, the gap and the queries -------------------------------------------------


def test_an_unsupported_answer_is_not_delivered(judge: Judge):
    checked = check(judge, UNKNOWN, UNKNOWN_ANSWER)
    assert (checked.route, checked.delivered) == ("retrieve_more", None)


def test_an_unsupported_answer_carries_the_gap_and_the_queries(judge: Judge):
    checked = check(judge, UNKNOWN, UNKNOWN_ANSWER)
    assert (checked.gap, checked.queries) == ([UNKNOWN_ANSWER], QUERIES)


def test_an_unsupported_answers_segments_cite_nothing(judge: Judge):
    checked = check(judge, UNKNOWN, UNKNOWN_ANSWER)
    assert [(s.label, s.sources) for s in checked.segments] == [("unsupported", [])]
    assert checked.cited_answer == UNKNOWN_ANSWER


# -- a partial answer: to a person (strict), delivered marked (loose) ----------------------------------------------


def test_a_partial_answer_goes_to_a_person_under_the_default_threshold(judge: Judge):
    checked = check(judge, PARTLY_QUESTION, PARTLY)
    assert (checked.route, checked.delivered, checked.gap) == ("human_review", None, ["It launched in July."])


def test_a_partial_answer_is_delivered_marked_under_the_loose_threshold(judge: Judge):
    checked = check(judge, PARTLY_QUESTION, PARTLY, options={"threshold": "loose"})
    assert (checked.route, checked.delivered) == ("deliver", partly_cited("launch"))


def test_a_loose_partial_delivery_carries_its_caveats(judge: Judge):
    checked = check(judge, PARTLY_QUESTION, PARTLY, options={"threshold": "loose"})
    assert checked.caveats and [s.label for s in checked.segments] == ["supported", "unsupported"]
    assert checked.cited_answer is not None and MARKER not in checked.cited_answer


# -- the async path ----------------------------------------------------------------------------------------------


def test_acheck_gives_what_check_gives(judge: Judge):
    response_check = ResponseCheck(judge, options={"threshold": "loose"})
    awaited = asyncio.run(response_check.acheck(PARTLY_QUESTION, response(PARTLY)))
    blocking = response_check.check(PARTLY_QUESTION, response(PARTLY))
    assert (
        (awaited.route, awaited.delivered)
        == (blocking.route, blocking.delivered)
        == ("deliver", partly_cited("launch"))
    )


def test_acheck_never_runs_the_blocking_judge(judge: Judge, monkeypatch: pytest.MonkeyPatch):
    response_check = ResponseCheck(judge)

    def blocking(*args: Any) -> Any:
        raise AssertionError("the blocking judge ran")

    monkeypatch.setattr(response_check._gate, "judge", blocking)
    assert asyncio.run(response_check.acheck(QUESTION, response())).delivered == cited("crew", "launch")


# -- no verdict, no service, bad input ---------------------------------------------------------------------------


def test_no_verdict_raises_by_default():
    with Judge(ScriptedEngine(lambda request: "{}"), "recovery") as judge, pytest.raises(GateFailedError):
        check(judge)


def test_no_verdict_with_keep_delivers_the_answer_unchecked_and_uncited():
    with Judge(ScriptedEngine(lambda request: "{}"), "recovery") as judge:
        checked = check(judge, on_error="keep")
    assert (checked.route, checked.delivered, checked.checked, checked.segments) == ("deliver", ANSWER, False, [])


def test_a_service_that_is_down_raises_delivers_unchecked_or_abstains_as_asked(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        check(down_client)
    assert check(down_client, on_unavailable="keep").delivered == ANSWER
    assert check(down_client, on_unavailable="empty").route == "abstain"


def test_a_gate_that_checks_no_answer_is_a_config_error_naming_it(judge: Judge):
    with pytest.raises(ConfigError) as caught:
        ResponseCheck(judge, gate="sufficiency")
    assert caught.value.parameter == "gate" and "ResponseCheck" in str(caught.value)


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({}, "response"),
        ({"nodes": nodes()}, "answer"),
        ({"answer": ANSWER}, "nodes"),
        ({"response": response(), "answer": ANSWER}, "answer"),
        ({"response": Response(None, source_nodes=nodes())}, "response"),
        ({"response": StreamingResponse(iter([ANSWER]), source_nodes=nodes())}, "response"),
        ({"nodes": [TextNode(text="not scored")], "answer": ANSWER}, "nodes"),
    ],
)
def test_a_response_not_given_once_is_an_input_error_naming_it(judge: Judge, given: dict[str, Any], field: str):
    with pytest.raises(InputError) as caught:
        ResponseCheck(judge).check(QUESTION, **given)
    assert caught.value.field == field


# -- after a real query engine -------------------------------------------------------------------------------------

DOCUMENTS = [
    Document(text="Apollo 11 launched from Kennedy Space Center on 16 July 1969."),
    Document(text="Apollo 11 was launched on 16 July 1969 by a Saturn V."),
]


class OneAnswer(CustomLLM):
    """An LLM that gives ``answer`` whatever it is asked."""

    answer: str = ANSWER

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.answer)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield CompletionResponse(text=self.answer, delta=self.answer)


def engine_response(question: str, answer: str) -> Response:
    index = VectorStoreIndex.from_documents(DOCUMENTS, embed_model=MockEmbedding(embed_dim=8))
    engine = index.as_query_engine(llm=OneAnswer(answer=answer), similarity_top_k=2)
    found = engine.query(question)
    assert isinstance(found, Response)
    return found


def test_a_query_engines_response_is_delivered_citing_its_source_nodes(judge: Judge):
    found = engine_response(QUESTION, ANSWER)
    first, second = (scored.node.node_id for scored in found.source_nodes)
    assert ResponseCheck(judge).check(QUESTION, found).delivered == cited(first, second)


def test_a_query_engines_unsupported_response_is_not_delivered(judge: Judge):
    checked = ResponseCheck(judge).check(UNKNOWN, engine_response(UNKNOWN, UNKNOWN_ANSWER))
    assert (checked.route, checked.delivered, checked.queries) == ("retrieve_more", None, QUERIES)


def test_a_query_engines_response_is_checked_awaited(judge: Judge):
    async def main() -> tuple[Response, CheckedAnswer]:
        index = VectorStoreIndex.from_documents(DOCUMENTS, embed_model=MockEmbedding(embed_dim=8))
        engine = index.as_query_engine(llm=OneAnswer(answer=ANSWER), similarity_top_k=2)
        found = await engine.aquery(QUESTION)
        assert isinstance(found, Response)
        return found, await ResponseCheck(judge).acheck(QUESTION, found)

    found, checked = asyncio.run(main())
    first, second = (scored.node.node_id for scored in found.source_nodes)
    assert checked.delivered == cited(first, second)
