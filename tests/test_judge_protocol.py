"""One judge shape: the in-process ``Judge``, ``Client`` and ``AsyncClient`` (a real uvicorn service on loopback
over a scripted engine) are each a ``JudgeProtocol``: the same calls, keywords and results, and the code that takes
a judge (the integrations, the ``Pipeline``) runs on each without asking which kind it is.  The same scenario on the
real engine, in process and through the session's ``suffice serve``: tests/integrations/test_protocol_engine.py."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

import suffice
from suffice import AsyncClient, Client, ConfigError, Judge, JudgeProtocol, JudgeResult
from suffice.gates import Gate
from suffice.harness.pipeline import Outcome, Pipeline, PipelineConfig
from suffice.integrations.gating import DocumentGate, Evidence
from suffice.records.item import item_record, parse_record
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.harness.hotpot import hotpot_retriever, load_pairs, questions
from tests.harness.test_pipeline import complete_when_all_ten
from tests.test_client import RECORDS, comparable, record, serve

CALLS = ("judge", "judge_batch", "ajudge", "ajudge_batch", "gate_for", "settings_for")


@contextlib.contextmanager
def each_kind(engine: ScriptedEngine) -> Iterator[dict[str, Any]]:
    """The same engine as an in-process judge, and behind a real service as a Client and an AsyncClient (its
    asyncio connections belong to one event loop: each test awaits it in one ``asyncio.run``)."""
    with serve(engine) as url, Client(url) as client:
        async_client = AsyncClient(url)
        try:
            yield {"Judge": Judge(engine, "sufficiency"), "Client": client, "AsyncClient": async_client}
        finally:
            with contextlib.suppress(RuntimeError):  # the loop its connections belonged to is closed
                asyncio.run(async_client.aclose())


class Wrapped:
    """A judge of the application's own, written against the protocol alone: what no ``isinstance`` on
    suffice's classes would let through."""

    def __init__(self, inner: JudgeProtocol) -> None:
        self.inner = inner
        self.calls = 0

    def judge(self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None):
        self.calls += 1
        return self.inner.judge(record, gate=gate, options=options)

    def judge_batch(self, records: Sequence[object], *, gate: str | None = None, options=None):
        self.calls += 1
        return self.inner.judge_batch(records, gate=gate, options=options)

    async def ajudge(self, record: object, *, gate: str | None = None, options=None):
        self.calls += 1
        return await self.inner.ajudge(record, gate=gate, options=options)

    async def ajudge_batch(self, records: Sequence[object], *, gate: str | None = None, options=None):
        self.calls += 1
        return await self.inner.ajudge_batch(records, gate=gate, options=options)

    def gate_for(self, gate: str | None = None, options=None) -> Gate:
        return self.inner.gate_for(gate, options)

    def settings_for(self, gate: str | None = None, options=None) -> dict[str, str]:
        return self.inner.settings_for(gate, options)


def test_every_kind_is_a_judge_protocol_with_the_same_calls_and_keywords():
    assert suffice.JudgeProtocol is JudgeProtocol
    for kind in (Judge, Client, AsyncClient):
        for name in CALLS:
            call = getattr(kind, name)
            assert inspect.iscoroutinefunction(call) == name.startswith("a"), (kind, name)
            if name.startswith(("judge", "ajudge")):
                parameters = inspect.signature(call).parameters
                assert {"gate", "options"} <= set(parameters), (kind, name)
    with each_kind(ScriptedEngine(good)) as kinds:
        assert all(isinstance(judge, JudgeProtocol) for judge in kinds.values())
    assert not isinstance(object(), JudgeProtocol)


async def awaited(judge: JudgeProtocol) -> tuple[list[JudgeResult], JudgeResult]:
    return await judge.ajudge_batch(RECORDS, gate="sufficiency"), await judge.ajudge(RECORDS[1])


def test_the_same_records_give_the_same_results_through_every_kind_and_call():
    with each_kind(ScriptedEngine(good)) as kinds:
        seen: dict[str, list[list[dict[str, Any]]]] = {}
        for name, judge in kinds.items():
            batch = judge.judge_batch(RECORDS, gate="sufficiency")
            one = judge.judge(RECORDS[1], gate="sufficiency")
            abatch, aone = asyncio.run(awaited(judge))
            assert all(isinstance(r, JudgeResult) for r in [*batch, one, *abatch, aone])
            seen[name] = [[comparable(r) for r in batch], [comparable(one)], [comparable(r) for r in abatch]]
            assert comparable(aone) == comparable(one)
            # A bad record is its own error row, the same type and field whichever judge ran it.
            assert batch[-1].error is not None and (batch[-1].error.type, batch[-1].error.field) == (
                "InputError",
                "question",
            )
        assert seen["Client"] == seen["Judge"]
        assert seen["AsyncClient"] == seen["Judge"]


def test_settings_for_and_gate_for_agree_between_the_judge_and_the_service():
    with each_kind(ScriptedEngine(good)) as kinds:
        local = kinds["Judge"].settings_for("sufficiency")
        for name in ("Client", "AsyncClient"):
            assert kinds[name].settings_for("sufficiency") == local, name
            assert kinds[name].gate_for().settings() == kinds["Judge"].gate_for().settings()


def test_options_on_an_in_process_judge_build_one_judge_for_them_on_the_same_engine():
    engine = ScriptedEngine(good)
    judge = Judge(engine, "sufficiency")
    assert judge.gate_for(options={"max_useful_chunks": 4}).settings()["max_useful_chunks"] == "4"
    derived = judge.gate_for(options={"max_useful_chunks": 4})
    assert derived is judge.gate_for(options={"max_useful_chunks": 4}), "built once, then kept"
    results = judge.judge_batch(RECORDS[:2], options={"max_useful_chunks": 4})
    assert all(r.ok for r in results)
    assert judge.stats.items == 2, "a derived judge's work counts in its parent's stats"
    assert judge.gate_for() is judge.gate and judge.gate.settings().get("max_useful_chunks") != "4"


@pytest.mark.parametrize(
    ("keywords", "parameter"),
    [({"options": {"no_such_option": 1}}, "no_such_option"), ({"gate": "no-such-gate"}, "gate")],
)
def test_a_gate_or_option_an_in_process_judge_refuses_is_a_config_error_naming_it(keywords, parameter):
    judge = Judge(ScriptedEngine(good), "sufficiency")
    for call in (
        lambda: judge.judge_batch(RECORDS, **keywords),
        lambda: judge.judge(RECORDS[0], **keywords),
        lambda: asyncio.run(judge.ajudge_batch(RECORDS, **keywords)),
    ):
        with pytest.raises(ConfigError) as caught:
            call()
        assert caught.value.parameter == parameter


def test_async_client_judge_blocks_without_a_warning_where_no_event_loop_runs():
    with serve(ScriptedEngine(good)) as url:
        client = AsyncClient(url)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = client.judge(record(0))
            batch = client.judge_batch(RECORDS)
            settings = client.settings_for()
        asyncio.run(client.aclose())
    assert isinstance(result, JudgeResult) and result.ok
    assert len(batch) == len(RECORDS) and batch[-1].error is not None
    assert settings["gate"] == "sufficiency"


# --- code that takes a judge: an integration and the Pipeline, over each kind ------------------------------------


DOCS = [Evidence("Ada wrote it.", id="a"), Evidence("Ada wrote 1.", id="b"), Evidence("Noise.", id="c")]


def test_an_integrations_gate_selects_the_same_documents_through_every_kind_and_a_judge_of_ones_own():
    with each_kind(ScriptedEngine(good)) as kinds:
        kinds["Wrapped"] = wrapped = Wrapped(kinds["Judge"])
        picked = {}
        for name, judge in kinds.items():
            gate = DocumentGate(judge, on_insufficient="keep")
            kept, outcome = gate.select("Who wrote 1?", DOCS)
            akept, aoutcome = asyncio.run(gate.aselect("Who wrote 1?", DOCS))
            assert outcome is not None and aoutcome is not None
            picked[name] = (kept, akept, outcome.positive, outcome.result.verdict)
        assert wrapped.calls == 2
    assert picked["Client"] == picked["Judge"]
    assert picked["AsyncClient"] == picked["Judge"]
    assert picked["Wrapped"] == picked["Judge"]


def summary(outcomes: list[Outcome]) -> list[tuple[Any, ...]]:
    return [(o.kind, o.rounds, o.chunk_ids, [t.route for t in o.trace]) for o in outcomes]


def test_the_pipeline_runs_the_same_loop_over_every_kind(tmp_path):
    """Two rounds (drop, widened retrieval, deliver) for every question, whichever judge judges them."""
    pairs = load_pairs()
    engine = ScriptedEngine(complete_when_all_ten, max_model_len=32768)
    with each_kind(engine) as kinds:
        got = {}
        for name, judge in kinds.items():
            pipeline = Pipeline(judge, hotpot_retriever(pairs, []), audit=tmp_path / f"{name}.db")
            got[name] = summary(pipeline.run(questions(pairs)))
            assert pipeline.audit.verify().ok and pipeline.audit.verify().rows == 2 * len(pairs)
    assert all(o[0] == "delivered" and o[1] == 2 for o in got["Judge"])
    assert got["Client"] == got["Judge"]
    assert got["AsyncClient"] == got["Judge"]


def test_a_pipeline_that_rewrites_queries_needs_a_judge_with_its_engine_here(tmp_path):
    config = PipelineConfig(rewrite_queries=True)
    with serve(ScriptedEngine(good)) as url, Client(url) as client, pytest.raises(ConfigError) as caught:
        Pipeline(client, hotpot_retriever(load_pairs(), []), config, audit=tmp_path / "audit.db")
    assert caught.value.parameter == "rewrite_queries"


def test_something_that_is_no_judge_is_a_config_error_naming_it(tmp_path):
    retriever = hotpot_retriever(load_pairs(), [])
    for make in (
        lambda: DocumentGate(object()),  # type: ignore[arg-type]
        lambda: Pipeline(object(), retriever, audit=tmp_path / "audit.db"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigError) as caught:
            make()
        assert caught.value.parameter == "judge"


def test_an_item_goes_to_a_service_as_the_record_it_was_read_from():
    raw = {
        "id": "q1",
        "question": "Who?",
        "chunks": [
            {"id": 3, "text": "Ada.", "source": "s", "score": 0.5, "date": "2024-01-02", "metadata": {"k": 1}},
            {"id": "x", "text": "Bob."},
        ],
        "response": "Ada",
        "rubric": "legal@1.0.0",
        "retrieval_exhausted": True,
    }
    item = parse_record(raw)
    assert parse_record(item_record(item)) == item
    assert item_record(item) == raw


# --- the batch runner over each kind ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Judge", "Client", "AsyncClient"])
def test_the_batch_runner_writes_the_in_process_runs_output_with_any_judge(tmp_path, kind):
    """``judge_file(judge=...)`` with each kind writes the rows and settings of the run that opens its own engine."""
    from suffice.batch import BatchOptions, judge_file
    from suffice.batch.run_settings import settings_path
    from tests.batch.test_runner import CONFIG, opener, rows, write_lines
    from tests.batch.test_service_scorer import LINES

    source = tmp_path / "in.jsonl"
    write_lines(source, LINES)
    local, given = tmp_path / "local.jsonl", tmp_path / "given.jsonl"
    engine = ScriptedEngine(good)
    judge_file(CONFIG, source, local, BatchOptions(batch_size=2), open_judge=opener(engine))
    with each_kind(engine) as kinds:
        report = judge_file(CONFIG, source, given, BatchOptions(batch_size=2), judge=kinds[kind])
    assert rows(given) == rows(local)
    assert settings_path(given).read_text() == settings_path(local).read_text()
    assert report.errors == 1


def test_the_batch_runner_refuses_a_judge_and_a_client_together_and_what_is_no_judge(tmp_path):
    from suffice.batch import judge_file
    from tests.batch.test_runner import CONFIG

    judge = Judge(ScriptedEngine(good))
    source = tmp_path / "in.jsonl"
    source.write_text("")
    with pytest.raises(ConfigError) as caught:
        judge_file(CONFIG, source, tmp_path / "out.jsonl", judge=judge, client=judge)
    assert caught.value.parameter == "client"
    with pytest.raises(ConfigError) as caught:
        judge_file(CONFIG, source, tmp_path / "out.jsonl", judge=object())  # type: ignore[arg-type]
    assert caught.value.parameter == "judge"
