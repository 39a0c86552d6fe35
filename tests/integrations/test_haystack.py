"""suffice.integrations.haystack: SufficiencyRouter in real Haystack pipelines.

Harness behaviour on the scripted judge and a client of a real uvicorn service over it (see
conftest.py: a question with "unknown" in it is insufficient, any other keeps the second document);
Haystack's telemetry proven off (its switch, and no connect off the machine under strace); then a
Haystack ``Pipeline`` (InMemoryDocumentStore, InMemoryBM25Retriever, the router, a component on each
output) on the real engine, in process and through the session's ``suffice serve``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.core.errors import DeserializationError, PipelineRuntimeError
from haystack.core.serialization import DeserializationCallbacks
from haystack.document_stores.in_memory import InMemoryDocumentStore

from suffice import (
    AsyncClient,
    Client,
    ConfigError,
    GateFailedError,
    InsufficientContextError,
    InvalidRequestError,
    Judge,
    JudgeConfig,
    ServiceUnavailableError,
)
from suffice.grammars.routes import Route
from suffice.integrations.haystack import SufficiencyRouter
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine
from tests.integrations.conftest import MISSING, verdict_for
from tests.setup_or_fail import need
from tests.test_client import serve
from tests.test_no_network import jailed, off_machine
from tests.test_no_network import strace_works as _strace_works

ROOT = Path(__file__).resolve().parents[2]
SUFFICIENT = "When did Apollo 11 launch?"
INSUFFICIENT = "When did the unknown probe launch?"
ROUTES: tuple[Route, ...] = ("deliver", "retrieve_more", "abstain", "human_review")


def documents() -> list[Document]:
    return [
        Document(content="Apollo 11 was a crewed mission to the Moon.", meta={"page": 3, "path": "/a.txt"}),
        Document(content="Apollo 11 launched on 16 July 1969.", score=0.9),
        Document(content="The Moon is far away."),
    ]


def outputs(router: SufficiencyRouter, question: str, docs: list[Document] | None = None) -> dict[str, Any]:
    return router.run(query=question, documents=documents() if docs is None else docs)


# -- the two outputs -----------------------------------------------------------------------------------------------


def test_sufficient_emits_documents_only(scripted_judge: Judge):
    assert list(outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)) == ["documents"]


def test_sufficient_keeps_the_useful_documents(scripted_judge: Judge):
    kept = outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)["documents"]
    assert [d.content for d in kept] == ["Apollo 11 launched on 16 July 1969."]


def test_a_kept_document_keeps_its_id(scripted_judge: Judge):
    kept = outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)["documents"]
    assert [d.id for d in kept] == [documents()[1].id]


def test_a_kept_document_carries_the_verdict_in_its_meta(scripted_judge: Judge):
    kept = outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)["documents"]
    assert kept[0].meta["suffice"]["route"] == "deliver"


def test_the_verdict_in_meta_names_the_useful_document_by_its_haystack_id(scripted_judge: Judge):
    kept = outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)["documents"]
    assert kept[0].meta["suffice"]["verdict"]["useful_chunk_ids"] == [documents()[1].id]


def test_the_callers_documents_are_not_changed(scripted_judge: Judge):
    docs = documents()
    outputs(SufficiencyRouter(scripted_judge), SUFFICIENT, docs)
    assert docs == documents()


def test_insufficient_emits_the_verdict_only(scripted_judge: Judge):
    assert list(outputs(SufficiencyRouter(scripted_judge), INSUFFICIENT)) == ["insufficient"]


def test_the_insufficient_verdict_says_what_is_missing(scripted_judge: Judge):
    assert outputs(SufficiencyRouter(scripted_judge), INSUFFICIENT)["insufficient"]["missing"] == [MISSING]


def test_the_sufficiency_gates_insufficient_output_does_not_repeat_missing_as_queries(scripted_judge: Judge):
    # The gate writes no retrieval queries: what is missing is said once, under "missing".
    payload = outputs(SufficiencyRouter(scripted_judge), INSUFFICIENT)["insufficient"]
    assert (payload["missing"], payload["queries"]) == ([MISSING], [])


def test_the_insufficient_verdict_routes_away_from_deliver(scripted_judge: Judge):
    assert outputs(SufficiencyRouter(scripted_judge), INSUFFICIENT)["insufficient"]["route"] == "retrieve_more"


def test_the_insufficient_verdict_names_the_documents_judged(scripted_judge: Judge):
    payload = outputs(SufficiencyRouter(scripted_judge), INSUFFICIENT)["insufficient"]
    assert payload["document_ids"] == [d.id for d in documents()]


def test_the_insufficient_verdict_is_json(scripted_judge: Judge):
    payload = outputs(SufficiencyRouter(scripted_judge), INSUFFICIENT)["insufficient"]
    assert json.loads(json.dumps(payload)) == payload


def test_no_documents_route_to_insufficient(scripted_judge: Judge):
    assert list(outputs(SufficiencyRouter(scripted_judge), SUFFICIENT, [])) == ["insufficient"]


# -- on_insufficient, on_error -------------------------------------------------------------------------------------


def test_insufficient_raises_when_asked(scripted_judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        outputs(SufficiencyRouter(scripted_judge, on_insufficient="raise"), INSUFFICIENT)
    assert caught.value.missing == [MISSING]


def test_insufficient_with_empty_emits_no_documents(scripted_judge: Judge):
    assert outputs(SufficiencyRouter(scripted_judge, on_insufficient="empty"), INSUFFICIENT) == {"documents": []}


def test_insufficient_with_keep_emits_every_document(scripted_judge: Judge):
    kept = outputs(SufficiencyRouter(scripted_judge, on_insufficient="keep"), INSUFFICIENT)["documents"]
    assert [d.id for d in kept] == [d.id for d in documents()]


def test_documents_kept_when_insufficient_carry_the_negative_verdict(scripted_judge: Judge):
    kept = outputs(SufficiencyRouter(scripted_judge, on_insufficient="keep"), INSUFFICIENT)["documents"]
    assert [d.meta["suffice"]["positive"] for d in kept] == [False, False, False]


def test_a_bad_on_insufficient_is_a_config_error_naming_it(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyRouter(scripted_judge, on_insufficient="ignore")  # type: ignore[arg-type]
    assert caught.value.parameter == "on_insufficient"


def test_a_failed_verdict_raises_by_default():
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge, pytest.raises(GateFailedError):
        outputs(SufficiencyRouter(judge), SUFFICIENT)


def test_a_failed_verdict_lets_every_document_through_unjudged_when_asked():
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge:
        kept = outputs(SufficiencyRouter(judge, on_error="keep"), SUFFICIENT)["documents"]
    assert ["suffice" in d.meta for d in kept] == [False, False, False]


def test_a_service_that_is_down_raises_by_default(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        outputs(SufficiencyRouter(down_client), SUFFICIENT)


def test_a_service_that_is_down_passes_every_document_unjudged_or_none_as_asked(down_client: Client):
    kept = outputs(SufficiencyRouter(down_client, on_unavailable="keep"), SUFFICIENT)["documents"]
    assert ["suffice" in d.meta for d in kept] == [False, False, False]
    assert outputs(SufficiencyRouter(down_client, on_unavailable="empty"), SUFFICIENT) == {"documents": []}


def test_a_bad_on_error_is_a_config_error_naming_it(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyRouter(scripted_judge, on_error="ignore")  # type: ignore[arg-type]
    assert caught.value.parameter == "on_error"


# -- ids, scores, metadata, options --------------------------------------------------------------------------------


def test_documents_with_one_id_are_told_apart_by_position(scripted_judge: Judge):
    docs = [Document(id="k", content="Apollo 11 was a mission."), Document(id="k", content="It launched in 1969.")]
    kept = outputs(SufficiencyRouter(scripted_judge), SUFFICIENT, docs)["documents"]
    assert [d.content for d in kept] == ["It launched in 1969."]


def test_a_document_made_without_an_id_is_judged_by_its_content_hash(scripted_judge: Judge):
    docs = [Document(content="Apollo 11 was a mission."), Document(id="", content="It launched in 1969.")]
    kept = outputs(SufficiencyRouter(scripted_judge), SUFFICIENT, docs)["documents"]
    assert kept[0].meta["suffice"]["verdict"]["useful_chunk_ids"] == [Document(content="It launched in 1969.").id]


@pytest.fixture
def sent(scripted_judge: Judge, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The records the router hands the scripted judge."""
    records: list[dict[str, Any]] = []
    judge_batch = scripted_judge.judge_batch

    def spy(batch: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        records.extend(batch)
        return judge_batch(batch, *args, **kwargs)

    monkeypatch.setattr(scripted_judge, "judge_batch", spy)
    return records


def test_a_documents_score_reaches_the_judge(scripted_judge: Judge, sent: list[dict[str, Any]]):
    outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)
    assert [c.get("score") for c in sent[0]["chunks"]] == [None, 0.9, None]


def test_the_haystack_ids_are_the_chunk_ids(scripted_judge: Judge, sent: list[dict[str, Any]]):
    outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)
    assert [c["id"] for c in sent[0]["chunks"]] == [d.id for d in documents()]


def test_only_the_chosen_metadata_reaches_the_judge(scripted_judge: Judge, sent: list[dict[str, Any]]):
    outputs(SufficiencyRouter(scripted_judge, metadata_keys=["page"]), SUFFICIENT)
    assert sent[0]["chunks"][0]["metadata"] == {"page": 3}


def test_no_metadata_reaches_the_judge_unless_chosen(scripted_judge: Judge, sent: list[dict[str, Any]]):
    outputs(SufficiencyRouter(scripted_judge), SUFFICIENT)
    assert "metadata" not in sent[0]["chunks"][0]


def test_metadata_keys_must_be_names(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        SufficiencyRouter(scripted_judge, metadata_keys="page")
    assert caught.value.parameter == "metadata_keys"


def test_the_gates_options_reach_the_judge(scripted_judge: Judge, tmp_path: Path):
    """A calibrated threshold above the scripted verdict's confidence (0.9) turns it insufficient."""
    config = tmp_path / "gate.json"
    config.write_text(json.dumps({"gate": "sufficiency", "score": "self_confidence", "threshold": 0.95}))
    router = SufficiencyRouter(scripted_judge, options={"gate_config": str(config)})
    assert list(outputs(router, SUFFICIENT)) == ["insufficient"]


def test_the_gates_options_travel_with_a_clients_request(scripted_client: Client):
    """The service takes no per-request option of the sufficiency gate: it refuses this one by name."""
    with pytest.raises(ConfigError) as caught:
        outputs(SufficiencyRouter(scripted_client, options={"max_useful_chunks": 4}), SUFFICIENT)
    assert caught.value.parameter == "max_useful_chunks"
    assert isinstance(caught.value.__cause__, InvalidRequestError)


def test_a_judge_that_is_none_of_suffices_is_a_config_error():
    with pytest.raises(ConfigError) as caught:
        SufficiencyRouter(object())  # type: ignore[arg-type]
    assert caught.value.parameter == "judge"


# -- a client ------------------------------------------------------------------------------------------------------


def test_a_client_routes_as_the_judge_does(scripted_client: Client):
    kept = outputs(SufficiencyRouter(scripted_client), SUFFICIENT)["documents"]
    assert [d.id for d in kept] == [documents()[1].id]


def test_a_client_gives_the_insufficient_verdict(scripted_client: Client):
    assert outputs(SufficiencyRouter(scripted_client), INSUFFICIENT)["insufficient"]["missing"] == [MISSING]


# -- async ---------------------------------------------------------------------------------------------------------


def test_run_async_gives_what_run_gives(scripted_judge: Judge):
    router = SufficiencyRouter(scripted_judge)
    routed = asyncio.run(router.run_async(query=SUFFICIENT, documents=documents()))
    assert routed == router.run(query=SUFFICIENT, documents=documents())


def test_run_async_routes_the_insufficient_verdict(scripted_judge: Judge):
    routed = asyncio.run(SufficiencyRouter(scripted_judge).run_async(query=INSUFFICIENT, documents=documents()))
    assert routed["insufficient"]["missing"] == [MISSING]


class Held:
    """A script that holds each generation until the test's event loop releases it: a router that
    blocked the loop while it judged would never let the loop release it (the wait's bound is only a
    guard against hanging the suite; the verdict then fails)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: GenerationRequest) -> str:
        self.started.set()
        return verdict_for(request) if self.release.wait(60) else "{}"


async def released_while_awaited(router: SufficiencyRouter, held: Held) -> tuple[bool, dict[str, Any]]:
    """Start the router, wait (off the loop) until the engine holds its request, then release it from the
    loop; whether the router's task was still pending then, and its output."""
    task = asyncio.create_task(router.run_async(query=SUFFICIENT, documents=documents()))
    await asyncio.to_thread(held.started.wait, 60)
    pending = not task.done()
    held.release.set()
    return pending, await task


def test_run_async_on_a_judge_leaves_the_event_loop_free():
    held = Held()
    with Judge(ScriptedEngine(held), "sufficiency") as judge:
        pending, routed = asyncio.run(released_while_awaited(SufficiencyRouter(judge), held))
    assert (pending, list(routed)) == (True, ["documents"])


def test_run_async_on_an_async_client_leaves_the_event_loop_free():
    held = Held()

    async def main(url: str) -> tuple[bool, dict[str, Any]]:
        async with AsyncClient(url) as client:
            return await released_while_awaited(SufficiencyRouter(client), held)

    with serve(ScriptedEngine(held), judge=JudgeConfig()) as url:
        pending, routed = asyncio.run(main(url))
    assert (pending, list(routed)) == (True, ["documents"])


# -- in a Haystack pipeline ----------------------------------------------------------------------------------------

STORE = [
    "Apollo 11 was the first crewed mission to land on the Moon.",
    "Apollo 11 launched from Kennedy Space Center on 16 July 1969.",
    "Neil Armstrong and Buzz Aldrin walked on the Moon.",
]


@component
class Answer:
    """The sufficient branch: what it was given."""

    def __init__(self) -> None:
        self.received: list[list[Document]] = []

    @component.output_types(answered=int)
    def run(self, documents: list[Document]) -> dict[str, int]:
        self.received.append(documents)
        return {"answered": len(documents)}


@component
class Retrieve:
    """The insufficient branch: what it was given."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    @component.output_types(queries=list[str])
    def run(self, insufficient: dict[str, Any]) -> dict[str, list[str]]:
        self.received.append(insufficient)
        return {"queries": insufficient["queries"]}


def rag_pipeline(router: SufficiencyRouter) -> tuple[Pipeline, Answer, Retrieve]:
    """InMemoryDocumentStore -> InMemoryBM25Retriever -> the router -> one component on each output."""
    store = InMemoryDocumentStore()
    store.write_documents([Document(content=text) for text in STORE])
    pipeline = Pipeline()
    answer, retrieve = Answer(), Retrieve()
    pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=3))
    pipeline.add_component("gate", router)
    pipeline.add_component("answer", answer)
    pipeline.add_component("retrieve", retrieve)
    pipeline.connect("retriever.documents", "gate.documents")
    pipeline.connect("gate.documents", "answer.documents")
    pipeline.connect("gate.insufficient", "retrieve.insufficient")
    return pipeline, answer, retrieve


def run_pipeline(router: SufficiencyRouter, question: str) -> tuple[dict[str, Any], Answer, Retrieve]:
    pipeline, answer, retrieve = rag_pipeline(router)
    return pipeline.run({"query": question}, include_outputs_from={"retriever"}), answer, retrieve


def test_a_pipeline_runs_only_the_sufficient_branch(scripted_judge: Judge):
    _, answer, retrieve = run_pipeline(SufficiencyRouter(scripted_judge), SUFFICIENT)
    assert (len(answer.received), len(retrieve.received)) == (1, 0)


def test_a_pipeline_hands_the_useful_retrieved_document_on(scripted_judge: Judge):
    result, answer, _ = run_pipeline(SufficiencyRouter(scripted_judge), SUFFICIENT)
    assert [d.id for d in answer.received[0]] == [result["retriever"]["documents"][1].id]


def test_a_pipeline_runs_only_the_insufficient_branch(scripted_judge: Judge):
    _, answer, retrieve = run_pipeline(SufficiencyRouter(scripted_judge), INSUFFICIENT)
    assert (len(answer.received), len(retrieve.received)) == (0, 1)


def test_a_pipeline_hands_the_gap_and_the_queries_on(scripted_judge: Judge):
    result, _, retrieve = run_pipeline(SufficiencyRouter(scripted_judge), INSUFFICIENT)
    assert (retrieve.received[0]["missing"], result["retrieve"]["queries"]) == ([MISSING], [])


def test_a_pipeline_of_a_client_runs_only_the_insufficient_branch(scripted_client: Client):
    _, answer, retrieve = run_pipeline(SufficiencyRouter(scripted_client), INSUFFICIENT)
    assert (len(answer.received), len(retrieve.received)) == (0, 1)


def test_a_pipeline_wraps_a_raised_insufficient_verdict(
    scripted_judge: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HOME", str(tmp_path))  # a failed run makes ~/.haystack/pipeline_snapshot
    with pytest.raises(PipelineRuntimeError) as caught:
        run_pipeline(SufficiencyRouter(scripted_judge, on_insufficient="raise"), INSUFFICIENT)
    assert isinstance(caught.value.__cause__, InsufficientContextError)


def test_an_async_pipeline_of_an_async_client_routes(scripted_client: Client):
    async def main() -> tuple[Answer, Retrieve]:
        async with AsyncClient(scripted_client.base_url) as client:
            pipeline, answer, retrieve = rag_pipeline(SufficiencyRouter(client))
            await pipeline.run_async({"query": SUFFICIENT})
            return answer, retrieve

    answer, retrieve = asyncio.run(main())
    assert (len(answer.received), len(retrieve.received)) == (1, 0)


# -- saved pipelines -----------------------------------------------------------------------------------------------


def test_to_dict_describes_a_client_without_its_key(scripted_client: Client):
    client = Client(scripted_client.base_url, api_key="secret-key")
    saved = rag_pipeline(SufficiencyRouter(client, metadata_keys=["page"]))[0].to_dict()
    assert "secret-key" not in json.dumps(saved)


def test_to_dict_keeps_the_routers_settings(scripted_judge: Judge):
    saved = rag_pipeline(SufficiencyRouter(scripted_judge, on_insufficient="empty", metadata_keys=["page"]))[0]
    parameters = saved.to_dict()["components"]["gate"]["init_parameters"]
    assert (parameters["on_insufficient"], parameters["metadata_keys"]) == ("empty", ["page"])


def test_to_dict_keeps_the_unavailability_policy(down_client: Client):
    router = SufficiencyRouter(down_client, on_unavailable="empty", timeout=2.5)
    parameters = rag_pipeline(router)[0].to_dict()["components"]["gate"]["init_parameters"]
    assert (parameters["on_unavailable"], parameters["timeout"]) == ("empty", 2.5)


def test_to_dict_describes_the_judge(scripted_judge: Judge):
    saved = rag_pipeline(SufficiencyRouter(scripted_judge))[0].to_dict()
    assert saved["components"]["gate"]["init_parameters"]["judge"] == {"kind": "Judge", "gate": "sufficiency"}


def test_to_dict_writes_a_path_option_as_its_string(scripted_judge: Judge, tmp_path: Path):
    config = tmp_path / "gate.json"
    config.write_text(json.dumps({"gate": "sufficiency", "score": "self_confidence", "threshold": 0.5}))
    saved = rag_pipeline(SufficiencyRouter(scripted_judge, options={"gate_config": config}))[0].to_dict()
    assert saved["components"]["gate"]["init_parameters"]["options"] == {"gate_config": str(config)}


def load(saved: dict[str, Any], judge: Judge | None) -> Pipeline:
    def give_judge(name: str, cls: type, init_params: dict[str, Any]) -> None:
        if judge is not None and cls is SufficiencyRouter:
            init_params["judge"] = judge

    return Pipeline.from_dict(
        saved,
        callbacks=DeserializationCallbacks(component_pre_init=give_judge),
        allowed_modules=["suffice.integrations.haystack", __name__],
    )


def test_a_saved_pipeline_loads_with_its_judge_given_back(scripted_judge: Judge):
    saved = rag_pipeline(SufficiencyRouter(scripted_judge, on_insufficient="empty"))[0].to_dict()
    result = load(saved, scripted_judge).run({"query": INSUFFICIENT})
    assert result["answer"]["answered"] == 0


def test_a_saved_pipeline_without_its_judge_fails_on_a_config_error_naming_it(scripted_judge: Judge):
    saved = rag_pipeline(SufficiencyRouter(scripted_judge))[0].to_dict()
    with pytest.raises(DeserializationError) as caught:
        load(saved, None)
    assert getattr(caught.value.__cause__, "parameter", None) == "judge"


# -- the framework hidden, its telemetry off -----------------------------------------------------------------------


def python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_without_haystack_the_import_error_names_the_extra():
    blocked = python(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'haystack':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "try:\n"
        "    import suffice.integrations.haystack\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert 'pip install "suffice[haystack]"' in blocked.stdout, blocked.stderr[-2000:]


def _env(home: Path, telemetry: str | None) -> dict[str, str]:
    """This test's environment with HOME under the test (Haystack's telemetry writes ~/.haystack) and
    Haystack's switch as given (``None``: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "HAYSTACK_TELEMETRY_ENABLED"}
    env["HOME"] = str(home)
    if telemetry is not None:
        env["HAYSTACK_TELEMETRY_ENABLED"] = telemetry
    return env


def test_importing_the_module_first_keeps_haystacks_telemetry_from_starting(tmp_path: Path):
    """Haystack imported by this module, its switch set for that import alone: no telemetry, no
    ``~/.haystack/config.yaml`` user id written, and the application's environment as it was."""
    done = python(
        "import os\n"
        "import suffice.integrations.haystack\n"
        "import haystack.telemetry._telemetry as t\n"
        "print(t.telemetry is None, os.environ.get('HAYSTACK_TELEMETRY_ENABLED'))\n",
        _env(tmp_path, None),
    )
    assert done.stdout.split() == ["True", "None"], done.stderr[-2000:]
    assert not (tmp_path / ".haystack").exists()


def test_the_module_switches_off_the_telemetry_of_a_haystack_imported_before_it(tmp_path: Path):
    done = python(
        "import haystack.telemetry._telemetry as t\n"
        "assert t.telemetry is not None, 'telemetry did not start: nothing to prove'\n"
        "import suffice.integrations.haystack\n"
        "print(t.telemetry is None)\n",
        _env(tmp_path, "True"),
    )
    assert done.stdout.strip() == "True", done.stderr[-2000:]


#: A pipeline with the router, run as an application would, Haystack imported before suffice with its
#: telemetry switched on: the router judges through a client of a scripted service on loopback (a
#: connect strace must see), then in process.
PIPELINE_RUN = """
import haystack
from suffice import Client, Judge, JudgeConfig
from suffice.integrations.haystack import SufficiencyRouter
from tests.fakes import ScriptedEngine
from tests.integrations.conftest import verdict_for
from tests.integrations.test_haystack import SUFFICIENT, run_pipeline
from tests.test_client import serve

with serve(ScriptedEngine(verdict_for), judge=JudgeConfig()) as url, Client(url) as client:
    run_pipeline(SufficiencyRouter(client), SUFFICIENT)
with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge:
    _, answer, _ = run_pipeline(SufficiencyRouter(judge), SUFFICIENT)
print("answered", len(answer.received))
"""


def test_a_pipeline_run_with_the_router_tries_no_address_off_the_machine(tmp_path: Path):
    """Without the switch this run resolves PostHog's host (a DNS connect off the machine) at exit."""
    reason = _strace_works()
    need(reason is None, str(reason))
    trace = tmp_path / "trace"
    watch = ["strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-e", "signal=none", "-o", str(trace)]
    done = subprocess.run(
        [*jailed(), *watch, sys.executable, "-c", PIPELINE_RUN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(tmp_path, "True"),
        check=False,
    )
    assert "answered 1" in done.stdout, done.stderr[-3000:]
    text = trace.read_text(errors="replace")
    assert "connect(" in text, "strace saw no connect at all: is it watching?"
    assert off_machine(text) == []


# -- the real engine -----------------------------------------------------------------------------------------------


def assert_routed(result: dict[str, Any], answer: Answer, retrieve: Retrieve) -> None:
    """What the code guarantees whatever the model judged: exactly one branch ran, with a well-formed payload."""
    retrieved = result["retriever"]["documents"]
    assert len(answer.received) + len(retrieve.received) == 1
    if answer.received:
        kept = answer.received[0]
        positions = [[d.id for d in retrieved].index(d.id) for d in kept]
        assert positions == sorted(positions)
        assert all(d.meta["suffice"]["gate"] == "sufficiency" for d in kept)
        assert all(d.meta["suffice"]["positive"] is True for d in kept)
    else:
        payload = retrieve.received[0]
        assert isinstance(payload["missing"], list)
        assert isinstance(payload["queries"], list)
        assert payload["route"] in ROUTES
        assert payload["document_ids"] == [d.id for d in retrieved]


@pytest.mark.engine
def test_a_pipeline_routes_on_the_real_engine_in_process(engine_judge: Judge):
    result, answer, retrieve = run_pipeline(SufficiencyRouter(engine_judge), SUFFICIENT)
    assert_routed(result, answer, retrieve)


@pytest.mark.engine
def test_a_pipeline_routes_through_the_real_service(engine_client: Client):
    result, answer, retrieve = run_pipeline(SufficiencyRouter(engine_client), SUFFICIENT)
    assert_routed(result, answer, retrieve)
