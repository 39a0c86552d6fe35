"""suffice.integrations.haystack.AnswerCheck: the generated answer checked against its documents, in real Haystack
pipelines, on a scripted recovery engine (see checks.py: the answer's segments labelled by the question).

A delivered answer is the answer byte for byte with ``[CITATION:document_id]`` inline: the tests compare it whole,
so an answer handed on uncited fails them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.core.errors import DeserializationError
from haystack.core.serialization import DeserializationCallbacks
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore

from suffice import Client, ConfigError, GateFailedError, InputError, Judge, ServiceUnavailableError
from suffice.integrations.haystack import AnswerCheck
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

ROUTES = ("answer", "retrieve_more", "abstain", "human_review")


def documents() -> list[Document]:
    return [
        Document(id="crew", content="Apollo 11 launched from Florida on 16 July 1969.", meta={"page": 3}),
        Document(id="launch", content="Apollo 11 launched on 16 July 1969.", score=0.9),
        Document(id="moon", content="The Moon is far away."),
    ]


@pytest.fixture
def judge() -> Iterator[Judge]:
    with Judge(ScriptedEngine(recovery_script), "recovery") as judge:
        yield judge


def check(judge: Any, question: str = QUESTION, answer: str = ANSWER, **settings: Any) -> dict[str, Any]:
    return AnswerCheck(judge, **settings).run(query=question, documents=documents(), answer=answer)


def routes(outputs: dict[str, Any]) -> list[str]:
    """The route outputs a run emitted (``checked`` comes with each)."""
    assert "checked" in outputs, outputs
    return [name for name in outputs if name != "checked"]


# -- a supported answer: delivered, cited ------------------------------------------------------------------------


def test_a_supported_answer_is_delivered_on_answer_only(judge: Judge):
    assert routes(check(judge)) == ["answer"]


def test_a_delivered_answer_cites_the_documents_inline(judge: Judge):
    assert check(judge)["answer"] == cited("crew", "launch")


def test_the_citations_name_the_documents_ids_and_leave_the_answer_byte_for_byte(judge: Judge):
    delivered = check(judge)["answer"]
    assert (citations(delivered), uncited(delivered)) == (["crew", "launch"], ANSWER)


def test_a_document_made_without_an_id_is_cited_by_its_content_hash(judge: Judge):
    docs = [Document(content="Apollo 11 launched in 1969."), Document(content="It launched on 16 July.")]
    delivered = AnswerCheck(judge).run(query=QUESTION, documents=docs, answer=ANSWER)["answer"]
    assert delivered == cited(docs[0].id, docs[1].id)


def test_the_checked_output_carries_the_segments_with_their_sources(judge: Judge):
    checked = check(judge)["checked"]
    assert [(s["text"], s["label"], s["sources"]) for s in checked["segments"]] == [
        (ANSWER, "supported", ["crew", "launch"])
    ]
    assert (checked["delivered"], checked["cited_answer"], checked["answer"]) == (
        cited("crew", "launch"),
        cited("crew", "launch"),
        ANSWER,
    )


def test_the_checked_output_is_json(judge: Judge):
    checked = check(judge)["checked"]
    assert json.loads(json.dumps(checked)) == checked


def test_a_generators_replies_are_checked(judge: Judge):
    outputs = AnswerCheck(judge).run(query=QUESTION, documents=documents(), replies=[ANSWER])
    assert outputs["answer"] == cited("crew", "launch")


def test_a_chat_generators_reply_is_read_as_its_text(judge: Judge):
    reply = ChatMessage.from_assistant(ANSWER)
    outputs = AnswerCheck(judge).run(query=QUESTION, documents=documents(), replies=[reply])
    assert (outputs["answer"], outputs["checked"]["answer"]) == (cited("crew", "launch"), ANSWER)


# -- an unsupported answer: not delivered, the gap and the queries -------------------------------------------------


def test_an_unsupported_answer_is_not_delivered(judge: Judge):
    assert routes(check(judge, UNKNOWN, UNKNOWN_ANSWER)) == ["retrieve_more"]


def test_an_unsupported_answer_carries_the_gap_and_the_queries(judge: Judge):
    routed = check(judge, UNKNOWN, UNKNOWN_ANSWER)["retrieve_more"]
    assert (routed["missing"], routed["queries"], routed["delivered"]) == ([UNKNOWN_ANSWER], QUERIES, None)


def test_an_unsupported_answers_segments_cite_nothing(judge: Judge):
    routed = check(judge, UNKNOWN, UNKNOWN_ANSWER)["retrieve_more"]
    assert [(s["label"], s["sources"]) for s in routed["segments"]] == [("unsupported", [])]


# -- a partial answer: to a person (strict), delivered marked (loose) ----------------------------------------------


def test_a_partial_answer_goes_to_a_person_under_the_default_threshold(judge: Judge):
    outputs = check(judge, PARTLY_QUESTION, PARTLY)
    assert routes(outputs) == ["human_review"]
    assert outputs["human_review"]["missing"] == ["It launched in July."]


def test_a_partial_answer_is_delivered_marked_under_the_loose_threshold(judge: Judge):
    outputs = check(judge, PARTLY_QUESTION, PARTLY, options={"threshold": "loose"})
    assert (routes(outputs), outputs["answer"]) == (["answer"], partly_cited("launch"))


def test_a_loose_partial_delivery_carries_its_caveats(judge: Judge):
    checked = check(judge, PARTLY_QUESTION, PARTLY, options={"threshold": "loose"})["checked"]
    assert checked["caveats"] and uncited(checked["delivered"]) == PARTLY
    assert [s["label"] for s in checked["segments"]] == ["supported", "unsupported"]
    assert MARKER not in checked["cited_answer"]


# -- the async path ----------------------------------------------------------------------------------------------


def test_run_async_gives_what_run_gives(judge: Judge):
    component_ = AnswerCheck(judge, options={"threshold": "loose"})
    awaited = asyncio.run(component_.run_async(query=PARTLY_QUESTION, documents=documents(), answer=PARTLY))
    assert awaited == component_.run(query=PARTLY_QUESTION, documents=documents(), answer=PARTLY)
    assert awaited["answer"] == partly_cited("launch")


def test_run_async_never_runs_the_blocking_judge(judge: Judge, monkeypatch: pytest.MonkeyPatch):
    component_ = AnswerCheck(judge)

    def blocking(*args: Any) -> Any:
        raise AssertionError("the blocking judge ran")

    monkeypatch.setattr(component_._gate, "judge", blocking)
    awaited = asyncio.run(component_.run_async(query=QUESTION, documents=documents(), answer=ANSWER))
    assert awaited["answer"] == cited("crew", "launch")


# -- no verdict, no service, bad input ---------------------------------------------------------------------------


def test_no_verdict_raises_by_default():
    with Judge(ScriptedEngine(lambda request: "{}"), "recovery") as judge, pytest.raises(GateFailedError):
        check(judge)


def test_no_verdict_with_keep_delivers_the_answer_unchecked_and_uncited():
    with Judge(ScriptedEngine(lambda request: "{}"), "recovery") as judge:
        outputs = check(judge, on_error="keep")
    assert (outputs["answer"], outputs["checked"]["checked"], outputs["checked"]["segments"]) == (ANSWER, False, [])


def test_a_service_that_is_down_raises_delivers_unchecked_or_abstains_as_asked(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        check(down_client)
    assert check(down_client, on_unavailable="keep")["answer"] == ANSWER
    assert routes(check(down_client, on_unavailable="empty")) == ["abstain"]


def test_a_gate_that_checks_no_answer_is_a_config_error_naming_it(judge: Judge):
    with pytest.raises(ConfigError) as caught:
        AnswerCheck(judge, gate="sufficiency")
    assert caught.value.parameter == "gate" and "AnswerCheck" in str(caught.value)


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({}, "answer"),
        ({"answer": ANSWER, "replies": [ANSWER]}, "replies"),
        ({"replies": [ANSWER, ANSWER]}, "replies"),
        ({"replies": []}, "replies"),
        ({"replies": [ChatMessage.from_assistant(None)]}, "replies"),
    ],
)
def test_an_answer_not_given_once_is_an_input_error_naming_it(judge: Judge, given: dict[str, Any], field: str):
    with pytest.raises(InputError) as caught:
        AnswerCheck(judge).run(query=QUESTION, documents=documents(), **given)
    assert caught.value.field == field


# -- in a Haystack pipeline ----------------------------------------------------------------------------------------

STORE = [
    "Apollo 11 launched from Kennedy Space Center on 16 July 1969.",
    "Apollo 11 was launched on 16 July 1969 by a Saturn V.",
    "Neil Armstrong and Buzz Aldrin walked on the Moon.",
]


@component
class Generator:
    """A chat generator that always answers ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    @component.output_types(replies=list[ChatMessage])
    def run(self, documents: list[Document]) -> dict[str, list[ChatMessage]]:
        return {"replies": [ChatMessage.from_assistant(self.text)]}


@component
class Show:
    """The delivery branch: what it was given."""

    def __init__(self) -> None:
        self.received: list[str] = []

    @component.output_types(shown=str)
    def run(self, answer: str) -> dict[str, str]:
        self.received.append(answer)
        return {"shown": answer}


@component
class Retrieve:
    """The retrieve-more branch: what it was given."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    @component.output_types(queries=list[str])
    def run(self, routed: dict[str, Any]) -> dict[str, list[str]]:
        self.received.append(routed)
        return {"queries": routed["queries"]}


def rag_pipeline(check: AnswerCheck, answer: str) -> tuple[Pipeline, Show, Retrieve]:
    """InMemoryBM25Retriever -> a chat generator -> the check -> one component on ``answer``, one on
    ``retrieve_more``."""
    store = InMemoryDocumentStore()
    store.write_documents([Document(content=text) for text in STORE])
    pipeline = Pipeline()
    show, retrieve = Show(), Retrieve()
    pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=2))
    pipeline.add_component("generator", Generator(answer))
    pipeline.add_component("check", check)
    pipeline.add_component("show", show)
    pipeline.add_component("retrieve", retrieve)
    pipeline.connect("retriever.documents", "generator.documents")
    pipeline.connect("retriever.documents", "check.documents")
    pipeline.connect("generator.replies", "check.replies")
    pipeline.connect("check.answer", "show.answer")
    pipeline.connect("check.retrieve_more", "retrieve.routed")
    return pipeline, show, retrieve


def test_a_pipeline_shows_the_cited_answer_naming_the_retrieved_documents(judge: Judge):
    pipeline, show, retrieve = rag_pipeline(AnswerCheck(judge), ANSWER)
    result = pipeline.run({"query": QUESTION}, include_outputs_from={"retriever"})
    retrieved = result["retriever"]["documents"]
    assert (show.received, retrieve.received) == ([cited(retrieved[0].id, retrieved[1].id)], [])


def test_a_pipeline_hands_an_unsupported_answers_gap_and_queries_on(judge: Judge):
    pipeline, show, retrieve = rag_pipeline(AnswerCheck(judge), UNKNOWN_ANSWER)
    result = pipeline.run({"query": UNKNOWN})
    assert (show.received, retrieve.received[0]["missing"], result["retrieve"]["queries"]) == (
        [],
        [UNKNOWN_ANSWER],
        QUERIES,
    )


def test_an_async_pipeline_shows_the_cited_answer(judge: Judge):
    pipeline, show, _ = rag_pipeline(AnswerCheck(judge), ANSWER)
    asyncio.run(pipeline.run_async({"query": QUESTION}))
    assert len(show.received) == 1 and citations(show.received[0]) and uncited(show.received[0]) == ANSWER


# -- saved pipelines -----------------------------------------------------------------------------------------------


def test_to_dict_keeps_the_checks_settings_and_describes_the_judge(judge: Judge):
    check_ = AnswerCheck(judge, options={"threshold": "loose"}, on_error="keep", metadata_keys=["page"], timeout=None)
    parameters = rag_pipeline(check_, ANSWER)[0].to_dict()["components"]["check"]["init_parameters"]
    assert parameters == {
        "judge": {"kind": "Judge", "gate": "recovery"},
        "gate": "recovery",
        "options": {"threshold": "loose"},
        "on_error": "keep",
        "on_unavailable": "raise",
        "timeout": None,
        "metadata_keys": ["page"],
    }


def load(saved: dict[str, Any], judge: Judge | None) -> Pipeline:
    def give_judge(name: str, cls: type, init_params: dict[str, Any]) -> None:
        if judge is not None and cls is AnswerCheck:
            init_params["judge"] = judge

    return Pipeline.from_dict(
        saved,
        callbacks=DeserializationCallbacks(component_pre_init=give_judge),
        allowed_modules=["suffice.integrations.haystack", __name__],
    )


def test_a_saved_pipeline_loads_with_its_judge_given_back(judge: Judge):
    saved = rag_pipeline(AnswerCheck(judge, options={"threshold": "loose"}), PARTLY)[0].to_dict()
    loaded = load(saved, judge)
    result = loaded.run({"query": PARTLY_QUESTION}, include_outputs_from={"retriever"})
    retrieved = result["retriever"]["documents"]
    assert result["show"]["shown"] == partly_cited(retrieved[1].id)


def test_a_saved_pipeline_without_its_judge_fails_on_a_config_error_naming_it(judge: Judge):
    saved = rag_pipeline(AnswerCheck(judge), ANSWER)[0].to_dict()
    with pytest.raises(DeserializationError) as caught:
        load(saved, None)
    assert getattr(caught.value.__cause__, "parameter", None) == "judge"
