"""The LangChain integration: SufficiencyCompressor and RecoveryCheck with the real langchain-core
(and langchain-classic's ContextualCompressionRetriever over a real InMemoryVectorStore).

The fast tests run on the scripted judge (harness logic: which documents come back, in what
form, what is raised); the two engine tests run the same pipeline on the real engine, once in
process and once through the session's ``suffice serve``, asserting what the code guarantees
(the 135M model's judgement is not).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from suffice import (
    AsyncClient,
    Client,
    ConfigError,
    GateFailedError,
    InputError,
    InsufficientContextError,
    Judge,
    JudgeConfig,
    ServiceUnavailableError,
)
from suffice.gates.recovery.citing import strip_markers
from suffice.integrations import gating
from suffice.integrations.langchain import CheckedAnswer, RecoveryCheck, SufficiencyCompressor
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine, recovery_reply
from tests.integrations.conftest import MISSING, verdict_for
from tests.setup_or_fail import need
from tests.test_client import serve
from tests.test_no_network import STRACE, off_machine
from tests.test_no_network import strace_works as _strace_works

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "When did Apollo 11 launch?"
UNKNOWN = "When did the unknown probe launch?"
ANSWER = "Apollo 11 launched on 16 July 1969."


def documents() -> list[Document]:
    return [
        Document("Apollo 11 was a crewed mission.", id="a", metadata={"page": 3, "path": "/srv/a.txt"}),
        Document("Apollo 11 launched on 16 July 1969.", id="b", metadata={"relevance_score": 0.75}),
        Document("The Moon is far away.", id="c", metadata={"score": 0.5}),
    ]


# -- a scripted engine for both gates: the recovery verdict by the question, the sufficiency one as conftest's ----
#: Two claims, the first supported, the second not: what the "partly" case checks.
PARTLY = "Apollo 11 launched. It launched in July."
PARTLY_QUESTION = "When did Apollo 11 partly launch?"


def recovery_verdict(request: GenerationRequest) -> str:
    """The recovery window's output by the question: every segment supported by sources 0 and 1 (the default,
    strict threshold wants two supporting passages to deliver); every segment unsupported for the unknown probe;
    the first segment supported and the rest unsupported for the "partly" question."""
    prompt = request.messages[-1]["content"]
    if "unknown" in prompt:
        return recovery_reply(
            request, "unsupported", notice="No passage gives the date.", queries=["unknown probe launch date"]
        )
    if "partly" in prompt:
        return recovery_reply(
            request,
            lambda index, text: ("supported", [1]) if index == 0 else "unsupported",
            notice="No passage gives the month.",
            queries=["Apollo 11 launch month"],
        )
    return recovery_reply(request, lambda index, text: ("supported", [0, 1]))


def both_gates(request: GenerationRequest) -> str:
    """A recovery verdict where the request's constraint is the recovery gate's, else conftest's sufficiency one."""
    if request.constraint.key.startswith("recovery/"):
        return recovery_verdict(request)
    return verdict_for(request)


@pytest.fixture
def judge() -> Iterator[Judge]:
    with Judge(ScriptedEngine(both_gates), "sufficiency") as judge:
        yield judge


@pytest.fixture
def service() -> Iterator[str]:
    """A real uvicorn service over the scripted engine, serving both gates."""
    with serve(ScriptedEngine(both_gates), judge=JudgeConfig(), gates=("sufficiency", "recovery")) as url:
        yield url


def failing_judge() -> Judge:
    return Judge(ScriptedEngine(lambda request: "{}"), "sufficiency")


def ids(docs: list[Document] | Any) -> list[str | None]:
    return [doc.id for doc in docs]


# -- SufficiencyCompressor --------------------------------------------------------------------------------------


def test_sufficient_keeps_the_useful_document(judge: Judge):
    assert ids(SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)) == ["b"]


def test_the_useful_documents_come_back_in_their_order():
    verdict = {
        "required_entities": [{"entity": "Apollo", "covered": True}],
        "contradictions": [],
        "reasoning": "Chunks 0 and 2.",
        "is_sufficient": True,
        "missing_information": [],
        "confidence": 0.9,
        "useful_chunk_ids": [0, 2],
    }
    with Judge(ScriptedEngine(lambda r: json.dumps(verdict, separators=(",", ":"))), "sufficiency") as judge:
        assert ids(SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)) == ["a", "c"]


def test_a_kept_document_carries_the_route_in_its_metadata(judge: Judge):
    kept = SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)
    assert kept[0].metadata["suffice"]["route"] == "deliver"


def test_a_kept_document_carries_the_verdict_in_its_metadata(judge: Judge):
    kept = SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)
    assert kept[0].metadata["suffice"]["verdict"]["useful_chunk_ids"] == ["b"]


def test_a_kept_document_keeps_its_own_metadata(judge: Judge):
    kept = SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)
    assert kept[0].metadata["relevance_score"] == 0.75


def test_the_callers_documents_are_not_changed(judge: Judge):
    docs = documents()
    SufficiencyCompressor(judge).compress_documents(docs, QUESTION)
    assert docs == documents()


def test_documents_without_ids_are_known_by_their_position(judge: Judge):
    docs = [Document(doc.page_content) for doc in documents()]
    kept = SufficiencyCompressor(judge).compress_documents(docs, QUESTION)
    assert kept[0].page_content == docs[1].page_content


def test_a_kept_document_without_an_id_stays_without_one(judge: Judge):
    docs = [Document(doc.page_content) for doc in documents()]
    assert ids(SufficiencyCompressor(judge).compress_documents(docs, QUESTION)) == [None]


def test_insufficient_raises_with_what_is_missing(judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        SufficiencyCompressor(judge).compress_documents(documents(), UNKNOWN)
    assert caught.value.missing == [MISSING]


def test_insufficient_error_does_not_repeat_missing_as_queries(judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        SufficiencyCompressor(judge).compress_documents(documents(), UNKNOWN)
    assert (caught.value.missing, caught.value.queries) == ([MISSING], [])


def test_insufficient_error_carries_the_result(judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        SufficiencyCompressor(judge).compress_documents(documents(), UNKNOWN)
    assert caught.value.result.gate == "sufficiency"


def test_insufficient_with_empty_returns_nothing(judge: Judge):
    assert SufficiencyCompressor(judge, on_insufficient="empty").compress_documents(documents(), UNKNOWN) == []


def test_insufficient_with_keep_returns_every_document(judge: Judge):
    kept = SufficiencyCompressor(judge, on_insufficient="keep").compress_documents(documents(), UNKNOWN)
    assert ids(kept) == ["a", "b", "c"]


def test_insufficient_with_keep_marks_every_document_negative(judge: Judge):
    kept = SufficiencyCompressor(judge, on_insufficient="keep").compress_documents(documents(), UNKNOWN)
    assert [doc.metadata["suffice"]["positive"] for doc in kept] == [False, False, False]


def test_no_verdict_raises_by_default():
    with failing_judge() as judge, pytest.raises(GateFailedError):
        SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)


def test_no_verdict_with_keep_returns_every_document_unjudged():
    with failing_judge() as judge:
        kept = SufficiencyCompressor(judge, on_error="keep").compress_documents(documents(), QUESTION)
    assert ["suffice" in doc.metadata for doc in kept] == [False, False, False]


def test_a_service_that_is_down_raises_by_default(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        SufficiencyCompressor(down_client).compress_documents(documents(), QUESTION)


def test_a_service_that_is_down_passes_every_document_unjudged_or_none_as_asked(down_client: Client):
    kept = SufficiencyCompressor(down_client, on_unavailable="keep", timeout=5).compress_documents(
        documents(), QUESTION
    )
    assert ["suffice" in doc.metadata for doc in kept] == [False, False, False]
    empty = SufficiencyCompressor(down_client, on_unavailable="empty")
    assert asyncio.run(empty.acompress_documents(documents(), QUESTION)) == []


def test_a_bad_on_insufficient_is_a_config_error_naming_it(judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyCompressor(judge, on_insufficient="ignore")  # type: ignore[arg-type]
    assert caught.value.parameter == "on_insufficient"


def test_a_judge_that_is_none_of_suffices_is_a_config_error_naming_it():
    with pytest.raises(ConfigError) as caught:
        SufficiencyCompressor(object())  # type: ignore[arg-type]
    assert caught.value.parameter == "judge"


def test_the_retrievers_score_reaches_the_judge(judge: Judge, monkeypatch: pytest.MonkeyPatch):
    records: list[dict[str, Any]] = []

    def recorded(*args: Any) -> dict[str, Any]:
        records.append(record_for(*args))
        return records[-1]

    record_for = gating.record_for
    monkeypatch.setattr(gating, "record_for", recorded)
    SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)
    assert [chunk.get("score") for chunk in records[0]["chunks"]] == [None, 0.75, 0.5]


def test_only_the_chosen_metadata_keys_reach_the_judge():
    prompts: list[str] = []

    def script(request: GenerationRequest) -> str:
        prompts.append(request.messages[-1]["content"])
        return verdict_for(request)

    with Judge(ScriptedEngine(script), "sufficiency") as judge:
        SufficiencyCompressor(judge, metadata_keys=["page", "path"]).compress_documents(documents()[:1], QUESTION)
    assert 'metadata={"page": 3, "path": "/srv/a.txt"}' in prompts[0]


def test_metadata_reaches_the_judge_only_when_named():
    prompts: list[str] = []

    def script(request: GenerationRequest) -> str:
        prompts.append(request.messages[-1]["content"])
        return verdict_for(request)

    with Judge(ScriptedEngine(script), "sufficiency") as judge:
        SufficiencyCompressor(judge).compress_documents(documents()[:1], QUESTION)
    assert "/srv/a.txt" not in prompts[0]


def test_the_gates_options_are_passed_through(judge: Judge):
    compressor = SufficiencyCompressor(judge, options={"max_useful_chunks": 4})
    assert compressor._gate.gate.settings()["max_useful_chunks"] == "4"


def test_a_client_keeps_what_the_judge_keeps(judge: Judge, scripted_client: Client):
    expected = SufficiencyCompressor(judge).compress_documents(documents(), QUESTION)
    assert SufficiencyCompressor(scripted_client).compress_documents(documents(), QUESTION) == expected


def test_the_async_path_keeps_what_the_blocking_one_keeps(judge: Judge):
    compressor = SufficiencyCompressor(judge)
    assert ids(asyncio.run(compressor.acompress_documents(documents(), QUESTION))) == ["b"]


def test_the_async_path_never_runs_the_blocking_one(judge: Judge, monkeypatch: pytest.MonkeyPatch):
    compressor = SufficiencyCompressor(judge)

    def blocking(*args: Any) -> Any:
        raise AssertionError("the blocking select ran")

    monkeypatch.setattr(compressor._gate, "select", blocking)
    monkeypatch.setattr(compressor._gate, "judge", blocking)
    assert ids(asyncio.run(compressor.acompress_documents(documents(), QUESTION))) == ["b"]


def test_an_async_client_keeps_the_useful_document(service: str):
    """The async path awaits the AsyncClient's own ``ajudge``."""

    async def main() -> list[Document]:
        async with AsyncClient(service) as client:
            return list(await SufficiencyCompressor(client).acompress_documents(documents(), QUESTION))

    assert ids(asyncio.run(main())) == ["b"]


def test_the_async_path_raises_on_insufficient(judge: Judge):
    with pytest.raises(InsufficientContextError):
        asyncio.run(SufficiencyCompressor(judge).acompress_documents(documents(), UNKNOWN))


# -- inside LangChain's own retriever ---------------------------------------------------------------------------


def store() -> InMemoryVectorStore:
    vectors = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    vectors.add_documents(documents())
    return vectors


def test_the_compression_retriever_returns_the_useful_retrieved_document(judge: Judge):
    base = store().as_retriever(search_kwargs={"k": 3})
    retriever = ContextualCompressionRetriever(base_compressor=SufficiencyCompressor(judge), base_retriever=base)
    # The scripted verdict names the second document shown useful: the second the base retriever returns.
    assert ids(retriever.invoke(QUESTION)) == [base.invoke(QUESTION)[1].id]


def test_the_compression_retriever_awaits_the_compressor(service: str):
    async def main() -> tuple[list[Document], list[Document]]:
        base = store().as_retriever(search_kwargs={"k": 3})
        async with AsyncClient(service) as client:
            retriever = ContextualCompressionRetriever(
                base_compressor=SufficiencyCompressor(client), base_retriever=base
            )
            return await retriever.ainvoke(QUESTION), await base.ainvoke(QUESTION)

    kept, retrieved = asyncio.run(main())
    assert ids(kept) == [retrieved[1].id]


def test_the_compression_retriever_raises_what_is_missing(judge: Judge):
    base = store().as_retriever(search_kwargs={"k": 3})
    retriever = ContextualCompressionRetriever(base_compressor=SufficiencyCompressor(judge), base_retriever=base)
    with pytest.raises(InsufficientContextError) as caught:
        retriever.invoke(UNKNOWN)
    assert caught.value.missing == [MISSING]


# -- RecoveryCheck ----------------------------------------------------------------------------------------------


def check_input(question: str = QUESTION, answer: object = ANSWER) -> dict[str, Any]:
    return {"question": question, "documents": documents(), "answer": answer}


def test_a_supported_answer_is_delivered(judge: Judge):
    assert RecoveryCheck(judge).invoke(check_input()).route == "deliver"


def test_a_delivered_answer_is_the_answer_as_given(judge: Judge):
    # Byte for byte, with the inline citations of its supported segment (sources 0 and 1: documents a and b).
    delivered = RecoveryCheck(judge).invoke(check_input()).delivered
    assert delivered == ANSWER + "[CITATION:a][CITATION:b]"
    assert strip_markers(delivered) == ANSWER


def test_an_unsupported_answer_is_routed_not_raised(judge: Judge):
    assert RecoveryCheck(judge).invoke(check_input(UNKNOWN)).route == "retrieve_more"


def test_an_unsupported_answer_carries_the_gap(judge: Judge):
    # The gap is the unsupported segments' exact text.
    assert RecoveryCheck(judge).invoke(check_input(UNKNOWN)).gap == [ANSWER]


def test_an_unsupported_answer_carries_the_queries(judge: Judge):
    assert RecoveryCheck(judge).invoke(check_input(UNKNOWN)).queries == ["unknown probe launch date"]


def test_an_unsupported_answer_delivers_nothing(judge: Judge):
    assert RecoveryCheck(judge).invoke(check_input(UNKNOWN)).delivered is None


def test_a_partly_supported_answer_goes_to_review_under_the_default_threshold(judge: Judge):
    assert RecoveryCheck(judge).invoke(check_input(PARTLY_QUESTION, PARTLY)).route == "human_review"


def test_a_check_with_an_audit_log_queues_the_partial_answer_for_a_person(judge: Judge, tmp_path: Path):
    from suffice.audit import AuditLog

    log = AuditLog(tmp_path / "audit.db")
    checked = RecoveryCheck(judge, audit=log).invoke(check_input(PARTLY_QUESTION, PARTLY))
    [review] = log.reviews()
    log.close()
    assert checked.route == "human_review" and review["reason"].startswith("partial_under_high_stakes: ")
    assert json.loads(review["payload"])["question"] == PARTLY_QUESTION


def test_the_gates_options_reach_the_recovery_gate(judge: Judge):
    check = RecoveryCheck(judge, options={"threshold": "loose"})
    checked = check.invoke(check_input(PARTLY_QUESTION, PARTLY))
    assert checked.route == "deliver"
    # A partial delivery marks the segment the documents do not support in the delivered text.
    assert checked.delivered == "Apollo 11 launched.[CITATION:b] It launched in July.[UNSUPPORTED]"
    assert checked.caveats == ["It launched in July.", "No passage gives the month."]


def test_the_retrievers_scores_reach_the_recovery_decision(judge: Judge):
    # The verdict cites chunks 0 (no score) and 1 (relevance_score 0.75).
    outcome = RecoveryCheck(judge).invoke(check_input()).outcome
    assert outcome is not None and outcome.routing.scores["cumulative_score"] == 0.75


def test_an_answer_message_is_read_as_its_text(judge: Judge):
    checked = RecoveryCheck(judge).invoke(check_input(answer=AIMessage(ANSWER)))
    assert checked.answer == ANSWER and checked.route == "deliver"


def test_no_recovery_verdict_raises_by_default():
    with failing_judge() as judge, pytest.raises(GateFailedError):
        RecoveryCheck(judge).invoke(check_input())


def test_no_recovery_verdict_with_keep_delivers_the_answer_unchecked():
    with failing_judge() as judge:
        checked = RecoveryCheck(judge, on_error="keep").invoke(check_input())
    assert (checked.route, checked.checked) == ("deliver", False)


def test_a_service_that_is_down_raises_delivers_unchecked_or_abstains_as_asked(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        RecoveryCheck(down_client).invoke(check_input())
    checked = RecoveryCheck(down_client, on_unavailable="keep").invoke(check_input())
    assert (checked.route, checked.delivered, checked.checked) == ("deliver", ANSWER, False)
    withheld = asyncio.run(RecoveryCheck(down_client, on_unavailable="empty").ainvoke(check_input()))
    assert (withheld.route, withheld.delivered, withheld.checked) == ("abstain", None, False)


def test_a_gate_that_checks_no_answer_is_a_config_error_naming_it(judge: Judge):
    with pytest.raises(ConfigError) as caught:
        RecoveryCheck(judge, gate="sufficiency")
    assert caught.value.parameter == "gate"


def test_an_input_without_a_question_is_an_input_error_naming_it(judge: Judge):
    with pytest.raises(InputError) as caught:
        RecoveryCheck(judge).invoke({"documents": documents(), "answer": ANSWER})
    assert caught.value.field == "question"


def test_documents_that_are_not_documents_are_an_input_error_naming_them(judge: Judge):
    with pytest.raises(InputError) as caught:
        RecoveryCheck(judge).invoke({"question": QUESTION, "documents": ["text"], "answer": ANSWER})
    assert caught.value.field == "documents"


def test_a_client_routes_the_answer(service: str):
    with Client(service) as client:
        assert RecoveryCheck(client).invoke(check_input(UNKNOWN)).gap == [ANSWER]


def test_the_async_check_never_runs_the_blocking_one(judge: Judge, monkeypatch: pytest.MonkeyPatch):
    check = RecoveryCheck(judge)

    def blocking(*args: Any) -> Any:
        raise AssertionError("the blocking judge ran")

    monkeypatch.setattr(check._gate, "judge", blocking)
    assert asyncio.run(check.ainvoke(check_input())).route == "deliver"


def test_an_async_client_routes_the_answer(service: str):
    async def main() -> CheckedAnswer:
        async with AsyncClient(service) as client:
            return await RecoveryCheck(client).ainvoke(check_input(UNKNOWN))

    assert asyncio.run(main()).route == "retrieve_more"


def test_the_check_closes_an_lcel_chain_over_a_real_retriever(judge: Judge):
    retriever = store().as_retriever(search_kwargs={"k": 3})
    chain = {
        "question": RunnablePassthrough(),
        "documents": retriever,
        "answer": RunnableLambda(lambda question: ANSWER),
    } | RecoveryCheck(judge)
    assert chain.invoke(QUESTION).route == "deliver"


# -- the module without LangChain, and offline ------------------------------------------------------------------


def test_importing_without_langchain_core_names_the_extra():
    blocker = textwrap.dedent(
        """
        import sys

        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name == "langchain_core" or name.startswith("langchain_core."):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, Hide())
        try:
            import suffice.integrations.langchain
        except ImportError as error:
            print(error)
        """
    )
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert 'pip install "suffice[langchain]"' in done.stdout, done.stderr[-2000:]


OFFLINE_SCRIPT = """
from langchain_classic.retrievers import ContextualCompressionRetriever

from suffice import Client
from suffice.integrations.langchain import RecoveryCheck, SufficiencyCompressor
from tests.fakes import ScriptedEngine, recovery_reply
from tests.integrations.test_langchain import ANSWER, QUESTION, both_gates, store
from tests.test_client import serve

with serve(ScriptedEngine(both_gates), gates=("sufficiency", "recovery")) as url, Client(url) as client:
    base = store().as_retriever(search_kwargs={"k": 3})
    retriever = ContextualCompressionRetriever(base_compressor=SufficiencyCompressor(client), base_retriever=base)
    kept = retriever.invoke(QUESTION)
    checked = RecoveryCheck(client).invoke({"question": QUESTION, "documents": base.invoke(QUESTION), "answer": ANSWER})
    print("ran", len(kept), checked.route)
"""


def test_the_langchain_pipeline_tries_no_address_off_the_machine(tmp_path: Path):
    """The retriever, the compressor and the check through a client, watched with strace: LangChain's
    own paths (LangSmith tracing is off unless the environment asks) connect nowhere but loopback."""
    reason = _strace_works()
    need(reason is None, str(reason))
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    watch = [STRACE or "strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-o", str(trace)]
    done = subprocess.run(
        [*watch, sys.executable, "-c", OFFLINE_SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    assert "ran 1 deliver" in done.stdout, done.stderr[-3000:]
    assert "connect(" in trace.read_text(errors="replace"), "strace saw no connect: is it watching?"
    assert off_machine(trace.read_text(errors="replace")) == []


# -- the real engine ---------------------------------------------------------------------------------------------


def engine_pipeline(judge: Judge | Client) -> tuple[list[Document], list[Document], CheckedAnswer]:
    """The retriever with the compressor, then the check of a fixed answer over what it kept."""
    base = store().as_retriever(search_kwargs={"k": 3})
    compressor = SufficiencyCompressor(judge, on_insufficient="keep")
    kept = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base).invoke(QUESTION)
    checked = RecoveryCheck(judge).invoke({"question": QUESTION, "documents": kept, "answer": ANSWER})
    return base.invoke(QUESTION), kept, checked


def assert_guaranteed(retrieved: list[Document], kept: list[Document], checked: CheckedAnswer) -> None:
    order = [doc.id for doc in retrieved]
    assert [doc.id for doc in kept] == [i for i in order if i in {doc.id for doc in kept}]
    assert all(doc.metadata["suffice"]["gate"] == "sufficiency" for doc in kept)
    assert checked.outcome is not None and checked.outcome.result.gate == "recovery"
    assert checked.route in ("deliver", "retrieve_more", "abstain", "human_review")
    # Whatever the model said, a delivered answer is the answer as given, with its inline citations.
    if checked.route == "deliver":
        assert checked.delivered is not None and strip_markers(checked.delivered, "[UNSUPPORTED]") == ANSWER
    else:
        assert checked.delivered is None


@pytest.mark.engine
def test_the_pipeline_on_the_engine_in_process(engine_judge: Judge):
    retrieved, kept, checked = engine_pipeline(engine_judge)
    assert_guaranteed(retrieved, kept, checked)


@pytest.mark.engine
def test_the_pipeline_through_suffice_serve(engine_client: Client):
    retrieved, kept, checked = engine_pipeline(engine_client)
    assert_guaranteed(retrieved, kept, checked)
