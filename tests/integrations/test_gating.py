"""What every framework integration shares (suffice.integrations.gating), on a scripted judge
and on a client of a real uvicorn service over it."""

from __future__ import annotations

import asyncio
import time

import pytest

from suffice import (
    AsyncClient,
    Client,
    ConfigError,
    GateFailedError,
    InsufficientContextError,
    Judge,
    ServiceTimeoutError,
    ServiceUnavailableError,
)
from suffice.integrations.gating import DocumentGate, Evidence, chunk_ids, record_for, scalar_metadata
from tests.fakes import ScriptedEngine
from tests.integrations.conftest import MISSING
from tests.test_client import Blocking, serve

DOCS = [
    Evidence("Apollo 11 was a crewed mission.", id="a"),
    Evidence("Apollo 11 launched on 16 July 1969.", id="b", score=0.9),
    Evidence("The Moon is far away.", id="c"),
]


def test_a_document_without_an_id_gets_its_position():
    assert chunk_ids([Evidence("x"), Evidence("y", id="k"), Evidence("z")]) == [0, "k", 2]


def test_a_repeated_id_gets_its_position_appended():
    assert chunk_ids([Evidence("x", id="k"), Evidence("y", id="k")]) == ["k", "k@1"]


def test_the_record_carries_the_retrievers_score_as_the_chunks_score():
    assert record_for("Q?", DOCS)["chunks"][1]["score"] == 0.9


def test_one_question_over_the_same_documents_is_one_record_id():
    assert record_for("Q?", DOCS)["id"] == record_for("Q?", list(DOCS))["id"]


def test_only_the_chosen_scalar_metadata_reaches_the_judge():
    assert scalar_metadata({"page": 3, "path": "/x", "vec": [1, 2]}, ["page", "vec"]) == {"page": 3}


def test_sufficient_keeps_the_useful_documents_in_their_order(scripted_judge: Judge):
    kept, _ = DocumentGate(scripted_judge).select("When did Apollo 11 launch?", DOCS)
    assert kept == [1]


def test_the_outcome_carries_the_route(scripted_judge: Judge):
    _, outcome = DocumentGate(scripted_judge).select("When did Apollo 11 launch?", DOCS)
    assert outcome is not None and outcome.metadata()["route"] == "deliver"


def test_insufficient_raises_with_what_is_missing(scripted_judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        DocumentGate(scripted_judge).select("When did the unknown probe launch?", DOCS)
    assert caught.value.missing == [MISSING]


def test_the_sufficiency_gates_error_does_not_repeat_missing_as_queries(scripted_judge: Judge):
    with pytest.raises(InsufficientContextError) as caught:
        DocumentGate(scripted_judge).select("When did the unknown probe launch?", DOCS)
    assert (caught.value.missing, caught.value.queries) == ([MISSING], [])


def test_insufficient_with_empty_keeps_nothing(scripted_judge: Judge):
    kept, _ = DocumentGate(scripted_judge, on_insufficient="empty").select("unknown probe?", DOCS)
    assert kept == []


def test_insufficient_with_keep_keeps_everything(scripted_judge: Judge):
    kept, _ = DocumentGate(scripted_judge, on_insufficient="keep").select("unknown probe?", DOCS)
    assert kept == [0, 1, 2]


def test_a_failed_verdict_raises_by_default():
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge, pytest.raises(GateFailedError):
        DocumentGate(judge).select("Q?", DOCS)


def test_a_failed_verdict_lets_every_document_through_when_asked():
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge:
        kept, outcome = DocumentGate(judge, on_error="keep").select("Q?", DOCS)
    assert (kept, outcome) == ([0, 1, 2], None)


def test_a_bad_on_insufficient_is_a_config_error_naming_it(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        DocumentGate(scripted_judge, on_insufficient="ignore")  # type: ignore[arg-type]
    assert caught.value.parameter == "on_insufficient"


def test_an_option_the_gate_does_not_take_is_a_config_error(scripted_judge: Judge):
    with pytest.raises(ConfigError):
        DocumentGate(scripted_judge, options={"no_such_option": 1})


def test_options_on_a_judge_build_a_judge_for_them_on_the_same_engine(scripted_judge: Judge):
    gate = DocumentGate(scripted_judge, options={"max_useful_chunks": 4})
    assert gate.gate.settings()["max_useful_chunks"] == "4"


def test_a_client_gives_what_the_judge_gives(scripted_judge: Judge, scripted_client: Client):
    local = DocumentGate(scripted_judge).select("When did Apollo 11 launch?", DOCS)[0]
    assert DocumentGate(scripted_client).select("When did Apollo 11 launch?", DOCS)[0] == local


def test_the_async_path_gives_what_the_blocking_one_gives(scripted_judge: Judge):
    gate = DocumentGate(scripted_judge)
    assert asyncio.run(gate.aselect("When did Apollo 11 launch?", DOCS))[0] == [1]


def test_a_positive_verdict_naming_no_useful_document_keeps_them_all(scripted_judge: Judge):
    """A calibrated threshold can make "sufficient" of a verdict that named no chunk useful."""
    judged = scripted_judge.judge_batch([record_for("Q?", DOCS)])[0]
    assert judged.verdict is not None
    none_useful = judged.verdict.model_copy(update={"useful_chunk_ids": []})
    outcome = DocumentGate(scripted_judge).outcome("Q?", DOCS, judged.model_copy(update={"verdict": none_useful}))
    assert outcome is not None and outcome.kept == [0, 1, 2]


# -- a service that does not answer: on_unavailable ---------------------------------------------------------


def test_a_service_that_is_down_raises_by_default(down_client: Client):
    with pytest.raises(ServiceUnavailableError):
        DocumentGate(down_client).select("Who wrote it?", DOCS)


@pytest.mark.parametrize(("policy", "kept"), [("keep", [0, 1, 2]), ("empty", [])])
def test_a_service_that_is_down_gives_every_document_or_none_as_asked(down_client: Client, policy, kept):
    gate = DocumentGate(down_client, on_unavailable=policy)
    assert gate.select("Who wrote it?", DOCS) == (kept, None)
    assert asyncio.run(gate.aselect("Who wrote it?", DOCS)) == (kept, None)


def test_an_async_client_of_a_service_that_is_down_follows_on_unavailable(down_client: Client):
    async def main() -> tuple[list[int], object]:
        async with AsyncClient(down_client.base_url, retries=0) as client:
            return await DocumentGate(client, on_unavailable="keep").aselect("Who wrote it?", DOCS)

    assert asyncio.run(main()) == ([0, 1, 2], None)


def test_on_unavailable_leaves_a_failed_verdict_to_on_error():
    with Judge(ScriptedEngine(lambda r: "{}"), "sufficiency") as judge, pytest.raises(GateFailedError):
        DocumentGate(judge, on_unavailable="keep").select("Who wrote it?", DOCS)


def test_the_per_call_timeout_bounds_a_call_the_service_does_not_answer():
    engine = Blocking()
    with serve(engine) as url, Client(url) as client:  # the client's own timeout: 600 s
        began = time.monotonic()
        with pytest.raises(ServiceTimeoutError):
            DocumentGate(client, timeout=0.5).select("Who wrote it?", DOCS)
        assert DocumentGate(client, timeout=0.5, on_unavailable="keep").select("Who?", DOCS) == ([0, 1, 2], None)
        assert time.monotonic() - began < 5
        for cancel in engine.cancels:
            cancel.set()


@pytest.mark.parametrize(
    ("setting", "value"), [("on_unavailable", "ignore"), ("timeout", 0), ("timeout", "5"), ("timeout", True)]
)
def test_a_bad_unavailability_setting_is_a_config_error_naming_it(down_client: Client, setting, value):
    with pytest.raises(ConfigError) as caught:
        DocumentGate(down_client, **{setting: value})
    assert caught.value.parameter == setting


def test_a_timeout_with_an_in_process_judge_is_a_config_error(scripted_judge: Judge):
    with pytest.raises(ConfigError) as caught:
        DocumentGate(scripted_judge, timeout=5)
    assert caught.value.parameter == "timeout"
