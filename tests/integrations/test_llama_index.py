"""suffice.integrations.llama_index: the postprocessor on a scripted judge (harness logic), on a client of
a real uvicorn service over it, inside a real LlamaIndex query engine (mock embedding and LLM), and twice
on the real engine: in process and through the session's ``suffice serve``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.response.schema import Response
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from suffice import (
    AsyncClient,
    Client,
    ConfigError,
    GateFailedError,
    InsufficientContextError,
    Judge,
    JudgeConfig,
    ServiceUnavailableError,
)
from suffice.integrations.gating import METADATA_KEY
from suffice.integrations.llama_index import SufficiencyPostprocessor
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine
from tests.integrations.conftest import MISSING, verdict_for
from tests.test_client import serve

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "When did Apollo 11 launch?"
UNKNOWN = "When did the unknown probe launch?"


def nodes() -> list[NodeWithScore]:
    """Three retrieved nodes, as a retriever returns them (own ids, scores, metadata)."""
    texts = [
        ("crew", "Apollo 11 was a crewed mission.", 0.5),
        ("launch", "Apollo 11 launched on 16 July 1969.", 0.9),
        ("moon", "The Moon is far away.", 0.1),
    ]
    return [
        NodeWithScore(node=TextNode(id_=i, text=text, metadata={"page": n, "path": f"/docs/{i}.txt"}), score=score)
        for n, (i, text, score) in enumerate(texts)
    ]


def ids(scored: Sequence[NodeWithScore]) -> list[str]:
    return [n.node_id for n in scored]


def first_and_last_useful(request: GenerationRequest) -> str:
    """A sufficient verdict naming the first and the last shown chunk, or the last alone when the
    constraint admits one id only."""
    verdict = json.loads(verdict_for(request))
    text = json.dumps({**verdict, "useful_chunk_ids": [0, 2]}, separators=(",", ":"))
    if not request.constraint.matches(text):
        text = json.dumps({**verdict, "useful_chunk_ids": [2]}, separators=(",", ":"))
    assert request.constraint.matches(text), text
    return text


class Seen(BaseNodePostprocessor):
    """Records the ids of the nodes the query engine hands on, and passes them through unchanged."""

    seen: list[str] = Field(default_factory=list)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        self.seen.extend(ids(nodes))
        return nodes


DOCUMENTS = [
    Document(text="Apollo 11 was the first crewed Moon landing.", id_="crew"),
    Document(text="Apollo 11 launched from Kennedy Space Center on 16 July 1969.", id_="launch"),
    Document(text="The Moon is about 384,400 km from Earth.", id_="distance"),
]


def query(postprocessor: SufficiencyPostprocessor, question: str, seen: Seen | None = None) -> Response:
    """The pipeline a LlamaIndex application runs: a vector index over the documents, a query engine
    retrieving all three, the postprocessor (after ``seen``), the LLM.  A mock embedding and a mock
    LLM (it answers with its prompt), so nothing is downloaded."""
    index = VectorStoreIndex.from_documents(DOCUMENTS, embed_model=MockEmbedding(embed_dim=8))
    chain: list[BaseNodePostprocessor] = [postprocessor] if seen is None else [seen, postprocessor]
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3, node_postprocessors=chain)
    response = engine.query(question)
    assert isinstance(response, Response)
    return response


@pytest.fixture
def records(scripted_judge: Judge, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The records the scripted judge is given (each call's, in order)."""
    given: list[dict[str, Any]] = []
    judge_batch = scripted_judge.judge_batch

    def spy(batch: Sequence[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        given.extend(batch)
        return judge_batch(batch, *args, **kwargs)

    monkeypatch.setattr(scripted_judge, "judge_batch", spy)
    return given


# -- the nodes kept and how -------------------------------------------------------------------------


def test_sufficient_keeps_the_useful_node(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert ids(kept) == ["launch"]


def test_useful_nodes_are_kept_in_the_order_given():
    with Judge(ScriptedEngine(first_and_last_useful), "sufficiency") as judge:
        kept = SufficiencyPostprocessor(judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert ids(kept) == ["crew", "moon"]


def test_a_kept_node_carries_the_verdict_in_its_metadata(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert kept[0].node.metadata[METADATA_KEY]["verdict"]["useful_chunk_ids"] == ["launch"]


def test_a_kept_node_carries_the_route(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert kept[0].node.metadata[METADATA_KEY]["route"] == "deliver"


def test_a_kept_node_keeps_its_own_metadata(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert kept[0].node.metadata["path"] == "/docs/launch.txt"


def test_a_kept_node_keeps_its_score(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert kept[0].score == 0.9


def test_the_verdict_stays_out_of_the_text_the_llm_reads(scripted_judge: Judge):
    given = nodes()
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(given, query_str=QUESTION)
    assert kept[0].node.get_content(MetadataMode.LLM) == given[1].node.get_content(MetadataMode.LLM)


def test_the_verdict_stays_out_of_the_text_that_is_embedded(scripted_judge: Judge):
    given = nodes()
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(given, query_str=QUESTION)
    assert kept[0].node.get_content(MetadataMode.EMBED) == given[1].node.get_content(MetadataMode.EMBED)


def test_the_callers_nodes_are_not_changed(scripted_judge: Judge):
    given = nodes()
    SufficiencyPostprocessor(scripted_judge).postprocess_nodes(given, query_str=QUESTION)
    assert [n.model_dump() for n in given] == [n.model_dump() for n in nodes()]


# -- insufficient, failed --------------------------------------------------------------------------


def test_insufficient_raises_with_what_is_missing(scripted_judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=UNKNOWN)
    assert caught.value.missing == [MISSING]


def test_insufficient_with_empty_keeps_no_node(scripted_judge: Judge):
    postprocessor = SufficiencyPostprocessor(scripted_judge, on_insufficient="empty")
    assert postprocessor.postprocess_nodes(nodes(), query_str=UNKNOWN) == []


def test_insufficient_with_keep_keeps_every_node(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge, on_insufficient="keep").postprocess_nodes(
        nodes(), query_str=UNKNOWN
    )
    assert ids(kept) == ["crew", "launch", "moon"]


def test_insufficient_with_keep_marks_every_node_with_the_negative_verdict(scripted_judge: Judge):
    kept = SufficiencyPostprocessor(scripted_judge, on_insufficient="keep").postprocess_nodes(
        nodes(), query_str=UNKNOWN
    )
    assert [n.node.metadata[METADATA_KEY]["positive"] for n in kept] == [False, False, False]


def test_no_verdict_raises_by_default():
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge, pytest.raises(GateFailedError):
        SufficiencyPostprocessor(judge).postprocess_nodes(nodes(), query_str=QUESTION)


def test_no_verdict_with_keep_lets_the_nodes_through_as_given():
    given = nodes()
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge:
        kept = SufficiencyPostprocessor(judge, on_error="keep").postprocess_nodes(given, query_str=QUESTION)
    assert kept == given


def test_a_service_that_is_down_raises_by_default(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        SufficiencyPostprocessor(down_client).postprocess_nodes(nodes(), query_str=QUESTION)


def test_a_service_that_is_down_lets_the_nodes_through_as_given_or_none_as_asked(down_client: Client):
    given = nodes()
    kept = SufficiencyPostprocessor(down_client, on_unavailable="keep").postprocess_nodes(given, query_str=QUESTION)
    assert kept == given
    empty = SufficiencyPostprocessor(down_client, on_unavailable="empty", timeout=5)
    assert empty.postprocess_nodes(given, query_str=QUESTION) == []


# -- what reaches the judge ------------------------------------------------------------------------


def test_the_question_is_the_query_bundles(scripted_judge: Judge, records: list[dict[str, Any]]):
    SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), QueryBundle(QUESTION))
    assert records[0]["question"] == QUESTION


def test_no_query_bundle_is_a_config_error_naming_it(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes())
    assert caught.value.parameter == "query_bundle"


def test_node_ids_are_the_chunk_ids(scripted_judge: Judge, records: list[dict[str, Any]]):
    SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert [c["id"] for c in records[0]["chunks"]] == ["crew", "launch", "moon"]


def test_the_nodes_score_reaches_the_judge_as_the_chunks_score(scripted_judge: Judge, records: list[dict[str, Any]]):
    SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert [c["score"] for c in records[0]["chunks"]] == [0.5, 0.9, 0.1]


def test_the_judge_reads_the_nodes_text_without_its_metadata(scripted_judge: Judge, records: list[dict[str, Any]]):
    SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert records[0]["chunks"][1]["text"] == "Apollo 11 launched on 16 July 1969."


def test_no_metadata_reaches_the_judge_unless_named(scripted_judge: Judge, records: list[dict[str, Any]]):
    SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    assert "metadata" not in records[0]["chunks"][1]


def test_only_the_named_metadata_keys_reach_the_judge(scripted_judge: Judge, records: list[dict[str, Any]]):
    SufficiencyPostprocessor(scripted_judge, metadata_keys=["page"]).postprocess_nodes(nodes(), query_str=QUESTION)
    assert records[0]["chunks"][1]["metadata"] == {"page": 1}


def test_one_string_as_metadata_keys_is_a_config_error(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyPostprocessor(scripted_judge, metadata_keys="page")
    assert caught.value.parameter == "metadata_keys"


def test_nodes_without_ids_are_kept_by_their_position(scripted_judge: Judge):
    given = [NodeWithScore(node=TextNode(id_="", text=n.node.get_content()), score=n.score) for n in nodes()]
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(given, query_str=QUESTION)
    assert kept[0].node.get_content() == "Apollo 11 launched on 16 July 1969."


def test_a_node_retrieved_twice_is_kept_once_by_its_position(scripted_judge: Judge):
    given = nodes()
    twice = [given[1], given[1], given[0]]
    kept = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(twice, query_str=QUESTION)
    assert len(kept) == 1


def test_the_gates_options_are_passed_through():
    with Judge(ScriptedEngine(first_and_last_useful), "sufficiency") as judge:
        postprocessor = SufficiencyPostprocessor(judge, options={"max_useful_chunks": 1})
        kept = postprocessor.postprocess_nodes(nodes(), query_str=QUESTION)
    assert ids(kept) == ["moon"]


def test_an_option_the_gate_does_not_take_is_a_config_error(scripted_judge: Judge):
    with pytest.raises(ConfigError):
        SufficiencyPostprocessor(scripted_judge, options={"no_such_option": 1})


def test_a_bad_on_error_is_a_config_error_naming_it(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyPostprocessor(scripted_judge, on_error="ignore")  # type: ignore[arg-type]
    assert caught.value.parameter == "on_error"


# -- client, async ---------------------------------------------------------------------------------


def test_a_client_keeps_what_the_judge_keeps(scripted_judge: Judge, scripted_client: Client):
    local = SufficiencyPostprocessor(scripted_judge).postprocess_nodes(nodes(), query_str=QUESTION)
    remote = SufficiencyPostprocessor(scripted_client).postprocess_nodes(nodes(), query_str=QUESTION)
    assert ids(remote) == ids(local)


def test_a_client_raises_what_the_judge_raises(scripted_client: Client):
    with pytest.raises(InsufficientContextError) as caught:
        SufficiencyPostprocessor(scripted_client).postprocess_nodes(nodes(), query_str=UNKNOWN)
    assert caught.value.missing == [MISSING]


def test_the_async_hook_keeps_what_the_blocking_one_keeps(scripted_judge: Judge):
    postprocessor = SufficiencyPostprocessor(scripted_judge)
    assert ids(asyncio.run(postprocessor.apostprocess_nodes(nodes(), query_str=QUESTION))) == ["launch"]


def test_the_async_hook_raises_what_the_blocking_one_raises(scripted_judge: Judge):
    postprocessor = SufficiencyPostprocessor(scripted_judge)
    with pytest.raises(InsufficientContextError):
        asyncio.run(postprocessor.apostprocess_nodes(nodes(), query_str=UNKNOWN))


def test_the_async_hook_awaits_an_async_client_natively():
    """The async hook awaits the AsyncClient's own ``ajudge`` (LlamaIndex's default async hook would run the
    blocking one on a thread)."""

    async def kept(url: str) -> list[str]:
        async with AsyncClient(url) as client:
            return ids(await SufficiencyPostprocessor(client).apostprocess_nodes(nodes(), query_str=QUESTION))

    with serve(ScriptedEngine(verdict_for), judge=JudgeConfig()) as url:
        assert asyncio.run(kept(url)) == ["launch"]


# -- inside LlamaIndex's query engine --------------------------------------------------------------


def test_the_query_engine_answers_from_the_kept_nodes(scripted_judge: Judge):
    """The scripted verdict names the second node shown (the mock embedding ties every score, so the
    retriever's order is its own)."""
    seen = Seen()
    response = query(SufficiencyPostprocessor(scripted_judge), QUESTION, seen)
    assert ids(response.source_nodes) == [seen.seen[1]]


def test_the_llm_never_reads_the_verdict(scripted_judge: Judge):
    """The mock LLM answers with its prompt: the context it was given, metadata included."""
    response = query(SufficiencyPostprocessor(scripted_judge), QUESTION)
    assert f"{METADATA_KEY}:" not in str(response)


def test_an_insufficient_verdict_raises_from_query(scripted_judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        query(SufficiencyPostprocessor(scripted_judge), UNKNOWN)
    assert caught.value.missing == [MISSING]


# -- packaging, offline ----------------------------------------------------------------------------

BLOCK_LLAMA_INDEX = textwrap.dedent(
    """
    import sys

    class Hidden:
        def find_spec(self, name, path=None, target=None):
            if name == "llama_index" or name.startswith("llama_index."):
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Hidden())
    try:
        import suffice.integrations.llama_index
    except ImportError as error:
        print(error)
    """
)


def test_without_llama_index_the_import_error_names_the_extra():
    done = subprocess.run([sys.executable, "-c", BLOCK_LLAMA_INDEX], capture_output=True, text=True, cwd=ROOT)
    assert 'pip install "suffice[llama-index]"' in done.stdout, done.stdout + done.stderr


# Runs the query engine of these tests with every socket connection and name lookup refused (and
# recorded) unless it is for loopback; then loads NLTK's sentence splitter, the data LlamaIndex
# downloads when it is missing.
OFFLINE = textwrap.dedent(
    """
    import ipaddress, json, sys

    tried = []

    def loopback(host):
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return host == "localhost"

    def hook(event, args):
        host = None
        if event == "socket.connect" and isinstance(args[1], tuple):
            host = args[1][0]
        elif event == "socket.getaddrinfo":
            host = args[0]
        if host is not None and not loopback(str(host)):
            tried.append([event, str(host)])
            raise OSError(f"offline test: {event} {host}")

    sys.addaudithook(hook)

    from suffice import Judge
    from suffice.integrations.llama_index import SufficiencyPostprocessor
    from tests.fakes import ScriptedEngine
    from tests.integrations.conftest import verdict_for
    from tests.integrations.test_llama_index import QUESTION, query

    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge:
        query(SufficiencyPostprocessor(judge), QUESTION)
    from llama_index.core.utils import globals_helper
    globals_helper.punkt_tokenizer
    print(json.dumps(tried))
    """
)


def test_the_query_engine_and_its_tokenizers_try_no_host():
    """LlamaIndex's default tokenizer (tiktoken) and NLTK's data load from llama-index-core's own
    folder, never from their hosts, in an environment that does not redirect them."""
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "NLTK_DATA")}
    done = subprocess.run([sys.executable, "-c", OFFLINE], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


# -- the real engine -------------------------------------------------------------------------------


def assert_kept_from_what_was_retrieved(response: Response, seen: Seen, gate: str) -> None:
    """What the code guarantees whatever the model judges: every document reached the postprocessor,
    and the nodes the LLM got are some of them, in the order retrieved, each carrying the gate's verdict."""
    kept = ids(response.source_nodes)
    assert len(seen.seen) == len(DOCUMENTS)
    assert kept == [i for i in seen.seen if i in kept]
    assert all(n.node.metadata[METADATA_KEY]["gate"] == gate for n in response.source_nodes)


@pytest.mark.engine
def test_a_query_engine_with_the_postprocessor_on_the_real_engine_in_process(engine_judge: Judge):
    seen = Seen()
    response = query(SufficiencyPostprocessor(engine_judge, on_insufficient="keep"), QUESTION, seen)
    assert_kept_from_what_was_retrieved(response, seen, engine_judge.gate.name)


@pytest.mark.engine
def test_a_query_engine_with_the_postprocessor_through_suffice_serve(engine_client: Client):
    seen = Seen()
    response = query(SufficiencyPostprocessor(engine_client, on_insufficient="keep"), QUESTION, seen)
    assert_kept_from_what_was_retrieved(response, seen, engine_client.gate)
