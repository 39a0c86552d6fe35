"""The same mistake, the same error, whichever judge is asked: the in-process ``Judge`` (a scripted engine), ``Client``
and ``AsyncClient`` (a real uvicorn service on loopback over a scripted engine) and ``RayJudge`` (which refuses a
call before any actor starts, so no Ray instance is needed here) raise the same exception class naming the same
field, through each of ``judge``, ``judge_batch``, ``ajudge`` and ``ajudge_batch``; a record's own mistake stays
that record's error row.  The clients rebuild the error from the service's body (``error``: its type) through the
one table of ``suffice.exceptions.STATUS``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from suffice import AsyncClient, Client, ConfigError, InvalidRequestError, Judge, JudgeResult
from suffice.batch import RayJudge, RayOptions
from suffice.config import JudgeConfig
from suffice.exceptions import RubricError, SufficeError
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.test_client import record, serve

KINDS = ("Judge", "Client", "AsyncClient", "RayJudge")
CALLS = ("judge", "judge_batch", "ajudge", "ajudge_batch")

#: Each mistake: the call's keywords, then the error every kind raises for it and the field that error names.
RECOVERY = {"gate": "recovery"}
MISTAKES: dict[str, tuple[dict[str, Any], type[SufficeError], str]] = {
    "unknown gate": ({"gate": "no-such-gate"}, ConfigError, "gate"),
    "gate not a name": ({"gate": 5}, ConfigError, "gate"),
    "unknown option": ({"options": {"no_such_option": 1}}, ConfigError, "no_such_option"),
    "option of another gate": ({"options": {"rubric": "plain"}}, ConfigError, "rubric"),
    "wrong type": ({**RECOVERY, "options": {"retrieval_exhausted": "maybe"}}, ConfigError, "retrieval_exhausted"),
    "value out of range": (
        {**RECOVERY, "options": {"threshold": {"required_support_ratio": 1.5}}},
        ConfigError,
        "threshold",
    ),
    "value refused": ({**RECOVERY, "options": {"threshold": "nope"}}, ConfigError, "threshold"),
    "unknown rubric": ({"gate": "adequacy", "options": {"rubric": "no-such-rubric"}}, RubricError, "rubric"),
    "options not a mapping": ({"options": [1]}, ConfigError, "options"),
}
#: What a client refuses before sending (no URL or JSON body carries it); the service refuses the rest.
CHECKED_BY_THE_CLIENT = {"gate not a name", "options not a mapping"}


@pytest.fixture(scope="module")
def judges() -> Iterator[dict[str, Callable[[], Any]]]:
    """A maker of each kind of judge, every one judging with the sufficiency gate by default; the service serves
    the gates the mistakes name, so its refusals are its judges', not a gate it lacks."""
    engine = ScriptedEngine(good)
    with serve(engine, gates=("sufficiency", "recovery", "adequacy")) as url:
        yield {
            "Judge": lambda: Judge(engine, "sufficiency"),
            "Client": lambda: Client(url),
            "AsyncClient": lambda: AsyncClient(url),
            "RayJudge": lambda: RayJudge(
                JudgeConfig(), RayOptions(address="local", actors=1), open_judge=lambda c: Judge(engine, config=c)
            ),
        }


def called(make: Callable[[], Any], call: str, records: list[object], keywords: dict[str, Any]) -> list[JudgeResult]:
    """``call`` on a judge made for it (an AsyncClient's connections belong to the event loop that awaits it)."""

    async def awaited() -> list[JudgeResult]:
        judge = make()
        try:
            if call == "ajudge":
                return [await judge.ajudge(records[0], **keywords)]
            return await judge.ajudge_batch(records, **keywords)
        finally:
            await closed(judge)

    if call.startswith("a"):
        return asyncio.run(awaited())
    judge = make()
    try:
        if call == "judge":
            return [judge.judge(records[0], **keywords)]
        return judge.judge_batch(records, **keywords)
    finally:
        asyncio.run(closed(judge))


async def closed(judge: Any) -> None:
    if isinstance(judge, AsyncClient):
        await judge.aclose()
    elif hasattr(judge, "close"):
        judge.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_the_same_mistake_raises_the_same_error_naming_the_same_field_through_every_judge(judges, mistake, kind):
    keywords, expected, field = MISTAKES[mistake]
    for call in CALLS:
        with pytest.raises(SufficeError) as caught:
            called(judges[kind], call, [record(0), record(1)], keywords)
        error = caught.value
        assert type(error) is expected, (call, repr(error))
        named = error.parameter if isinstance(error, ConfigError) else getattr(error, "field", None)
        assert named == field, (call, repr(error))
        if kind in ("Client", "AsyncClient") and mistake not in CHECKED_BY_THE_CLIENT:
            # Refused by the service and rebuilt from its answer, which stays the cause (with the HTTP status).
            assert isinstance(error.__cause__, InvalidRequestError), (call, repr(error))
            assert error.__cause__.status in (404, 422)


@pytest.mark.parametrize("kind", ["Judge", "Client", "AsyncClient"])
def test_a_record_with_a_missing_field_is_its_own_error_row_through_every_judge_and_call(judges, kind):
    """Not raised: the row of that record names the field, and the other records are judged.  (RayJudge gives the
    same row; tests/batch/test_cluster.py runs it on a local Ray instance.)"""
    bad = {"id": "bad", "chunks": [{"id": "c", "text": "Ada wrote 1."}]}
    for call in CALLS:
        records = [bad, record(1)] if call.endswith("batch") else [bad]
        results = called(judges[kind], call, records, {})
        error = results[0].error
        assert error is not None and (error.type, error.field) == ("InputError", "question"), (call, results[0])
        assert all(result.ok for result in results[1:]), call


def test_a_refusal_the_service_cannot_trace_to_a_judges_error_stays_an_invalid_request():
    """A cap of the service's own (no judge in process has one) is no ConfigError: it stays the HTTP refusal."""
    with (
        serve(ScriptedEngine(good), max_field_chars=10) as url,
        Client(url) as client,
        pytest.raises(InvalidRequestError) as caught,
    ):
        client.judge(record(0))
    assert caught.value.status == 422 and caught.value.field == "text"
