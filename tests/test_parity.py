"""One judge in two shapes: ``Judge`` (in process) and ``Client`` / ``AsyncClient`` (through ``suffice serve`` on
loopback) take the same configuration object and keyword arguments and give the same results and stats for the same
records (the same scripted engine behind both); the clients batch any number of records within the service's
limits, in order, with one progress; progress is printed only when asked for."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from suffice import AsyncClient, Client, Judge, JudgeConfig
from suffice.exceptions import ConfigError
from suffice.results import JudgeResult
from suffice.serving.base import OnRecords
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine, recovery_reply
from tests.test_client import RECORDS, record, serve


def comparable(results: list[JudgeResult]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json", exclude={"raw_text"}) for r in results]


def test_the_same_records_give_the_same_results_and_stats_in_both_shapes():
    records = [*RECORDS, {**record(9), "sufficient": True}]
    judge = Judge(ScriptedEngine(good))
    expected = judge.judge_batch(records)
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        assert comparable(client.judge_batch(records)) == comparable(expected)
        assert client.stats == judge.stats
        assert client.stats.items == len(records) and client.stats.errors == 1 and client.stats.labeled == 1

        async def main() -> list[JudgeResult]:
            async with AsyncClient(url) as async_client:
                results = await async_client.ajudge_batch(records)
                async_client.judge_batch(records)  # the blocking call counts in the same stats
                assert async_client.stats.items == 2 * len(records)
                return results

        assert comparable(asyncio.run(main())) == comparable(expected)


def test_the_config_that_opens_a_judge_sets_the_clients_gate_and_options():
    config = JudgeConfig(gate="recovery", options={"threshold": "loose"})
    answer = {"question": "Who wrote it?", "chunks": ["Ada wrote it."], "response": "Bob wrote it.", "id": "a"}
    engine = ScriptedEngine(lambda request: recovery_reply(request, "unsupported"))
    in_process = Judge(engine, config=config).judge(answer)
    with serve(engine, gates=("sufficiency", "recovery")) as url, Client(url, config) as client:
        through = client.judge(answer)
    assert through.gate == in_process.gate == "recovery"
    assert comparable([through]) == comparable([in_process])
    strict = Judge(engine, gate="recovery").judge(answer)
    assert through.verdict is not None and strict.verdict is not None
    assert through.verdict.decision.threshold != strict.verdict.decision.threshold  # the config's options were sent
    with pytest.raises(ConfigError) as caught:
        Client("http://127.0.0.1:9", config, gate="sufficiency")
    assert caught.value.parameter == "gate"


def test_a_batch_larger_than_the_service_takes_is_sent_in_parts_in_order_with_one_progress():
    records = [record(i) for i in range(250)]
    finished: list[int] = []
    engine = ScriptedEngine(good)
    with serve(engine, max_items=100) as url, Client(url) as client:
        results = client.judge_batch(records, progress=OnRecords(finished.append))
    assert [r.id for r in results] == [f"q{i}" for i in range(250)]
    assert all(r.ok for r in results)
    assert finished == [100, 100, 50]  # one progress over the parts, each counted once
    assert client.stats.items == 250


def test_a_record_larger_than_a_request_may_be_is_its_own_error_row_not_a_refused_batch():
    big = {"id": "big", "question": "Who?", "chunks": [{"id": 0, "text": "x" * 6000}]}
    with serve(ScriptedEngine(good), max_body_bytes=4096) as url, Client(url) as client:
        results = client.judge_batch([record(0), big, record(1)])
    assert [r.id for r in results] == ["q0", "big", "q1"]
    assert results[0].ok and results[2].ok
    assert results[1].error is not None and results[1].error.field == "record"
    assert "4096" in results[1].error.message


@pytest.mark.parametrize("shape", ["judge", "client"])
def test_progress_is_drawn_when_asked_for_and_never_by_default(shape, capsys):
    records = [record(i) for i in range(3)]
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        judge: Judge | Client = Judge(ScriptedEngine(good)) if shape == "judge" else client
        judge.judge_batch(records)
        assert capsys.readouterr().err == ""
        judge.judge_batch(records, progress=True)
        assert "3/3" in capsys.readouterr().err


@pytest.mark.parametrize("shape", ["judge", "client"])
def test_results_are_a_table_typed_as_the_parquet_writer_types_them(shape, tmp_path):
    import pyarrow.parquet as pq

    from suffice.batch import BatchOptions, judge_file

    records = [*RECORDS, record(7)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        judge: Judge | Client = Judge(ScriptedEngine(good)) if shape == "judge" else client
        results = judge.judge_batch(records)
        table = results.to_arrow()
    judge_file(JudgeConfig(), source, tmp_path / "out.parquet", BatchOptions(), judge=Judge(ScriptedEngine(good)))
    written = pq.read_table(tmp_path / "out.parquet")
    assert table.schema == written.schema
    assert table.num_rows == len(records) and table.column("id").to_pylist() == written.column("id").to_pylist()
    assert table.column("verdict").to_pylist()[:5] == written.column("verdict").to_pylist()[:5]
    frame = results.to_pandas()
    assert list(frame["id"]) == [r.id for r in results] and frame["error"].notna().sum() == 1


class _SettingsRefusedOnce(httpx.BaseTransport):
    """The real transport, but the first ``GET /v1/settings`` answers 503 (a service still starting)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.posts = 0
        self.refused = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/settings") and not self.refused:
            self.refused = True
            return httpx.Response(503, json={"detail": "starting"})
        self.posts += request.method == "POST"
        return self.inner.handle_request(request)


def test_limits_refused_once_are_asked_again_not_kept():
    transport = _SettingsRefusedOnce()
    records = [record(i) for i in range(3)]
    with serve(ScriptedEngine(good), max_items=2) as url, Client(url) as client:
        client._http = httpx.Client(transport=transport)
        assert [r.id for r in client.judge_batch(records[:2])] == ["q0", "q1"]
        assert transport.posts == 1  # no limits known: one request, not one per record
        transport.posts = 0
        assert all(r.ok for r in client.judge_batch(records))
        assert transport.posts == 2  # asked again: at most 2 items a request
