"""The batch runner on a scripted engine: hostile lines, dead engines, resume rules.

Generation itself is proven on the real engine (tests/cli/test_faults.py); here the
engine is scripted so thousands of odd inputs run in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.batch import BatchOptions, judge_file
from suffice.config import JudgeConfig
from suffice.exceptions import EngineDeadError, OutputMismatchError
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest, OnRecords, Progress
from suffice.serving.engine_config import EngineConfig
from tests.fakes import ScriptedEngine
from tests.test_judge import GOOD as JUDGE_GOOD


def good(request: GenerationRequest) -> str:
    """A valid sufficiency output for any number of chunks (chunk 0 is always shown)."""
    text = json.dumps(JUDGE_GOOD, separators=(",", ":"))
    assert request.constraint.matches(text)
    return text


def record(i: int, text: str = "Ada wrote it.") -> dict[str, object]:
    return {"id": f"r{i}", "question": f"Who wrote {i}?", "chunks": [{"id": 0, "text": text}]}


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def opener(engine: ScriptedEngine):
    return lambda config: Judge(engine, config=config)


CONFIG = JudgeConfig()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
records = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "question": st.text() | json_values,
        "chunks": st.lists(
            st.fixed_dictionaries({}, optional={"id": json_values, "text": st.text(), "source": json_values}),
            max_size=3,
        )
        | json_values,
        "response": json_values,
    },
)
line_values = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    records.map(lambda r: json.dumps(r).encode()),
    st.binary(max_size=64).map(lambda b: b.replace(b"\n", b" ")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line_values, min_size=1, max_size=8))
def test_every_input_line_gets_exactly_one_row(tmp_path, lines):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [record(0), *lines, record(1)]
    encoded = [json.dumps(x).encode() if isinstance(x, dict) else x for x in lines]
    write_lines(source, encoded)
    expected = [n for n, raw in enumerate(encoded, start=1) if raw.strip()]
    judge_file(CONFIG, source, out, BatchOptions(overwrite=True, batch_size=3), open_judge=opener(ScriptedEngine(good)))
    assert [row["line"] for row in rows(out)] == expected


WORST = [
    b'{"id": ' + b"7" * 5000 + b', "question": "q?", "chunks": []}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"id": "\\ud800", "question": "q?", "chunks": [{"id": 0, "text": "Ada"}]}',
    b'{"id": "s", "question": "lone \\udfff here?", "chunks": [{"id": 0, "text": "x \\ud800 y"}]}',
    b'{"id": NaN, "question": "q?", "chunks": []}',
    b'{"id": "inf", "question": "q?", "chunks": [{"id": 0, "text": "a", "score": Infinity}]}',
    b"\xff\xfe not utf-8",
    b'"a string"',
    b'{"id": [1, 2], "question": "q?", "chunks": []}',
    b'{"id": {"a": 1}, "question": "q?", "chunks": []}',
    b'{"id": null, "question": "q?", "chunks": []}',
    b'{"id": 12, "question": "q?", "chunks": [{"id": 0, "text": "' + b"word " * 400_000 + b'"}]}',
    b'{"id": "twice", "question": "q?", "id": "other", "chunks": [{"id": 0, "text": "Ada"}]}',
    b'{"id": "ctrl", "question": "\\u0000\\u0001", "chunks": [{"id": 0, "text": "Ada"}]}',
]


def test_the_worst_lines_each_get_a_row_and_good_records_still_get_verdicts(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps(record(0)).encode(), *WORST, json.dumps(record(1)).encode()]
    write_lines(source, lines)
    judge_file(CONFIG, source, out, BatchOptions(batch_size=4), open_judge=opener(ScriptedEngine(good)))
    written = rows(out)
    assert [row["line"] for row in written] == list(range(1, len(lines) + 1))
    assert written[0]["verdict"] is not None
    assert written[-1]["verdict"] is not None
    assert written[3]["id"] == "\ud800"  # the lone surrogate survives the round trip


def test_the_worst_lines_get_error_rows_naming_the_field(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, WORST[-2:])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    twice, ctrl = rows(out)
    assert twice["error"]["field"] == "id"
    assert ctrl["error"]["field"] == "question"


def test_a_parquet_value_python_cannot_hold_is_one_error_row_and_the_rest_are_judged(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = [0] * 5
    values[2] = 253402300800 * 10**6  # 10000-01-01, in a column suffice does not judge
    table = pa.table(
        {
            "id": [f"r{i}" for i in range(5)],
            "question": ["Who wrote it?"] * 5,
            "chunks": [[{"id": 0, "text": "Ada wrote it."}]] * 5,
            "exported_at": pa.array(values, type=pa.timestamp("us")),
        }
    )
    source, out = tmp_path / "in.parquet", tmp_path / "out.jsonl"
    pq.write_table(table, source)
    report = judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    written = rows(out)
    assert [row["verdict"] is not None for row in written] == [True, True, False, True, True]
    assert written[2]["error"]["field"] == "record"
    assert report.errors == 1


def test_a_lone_surrogate_id_resumes(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [WORST[2], json.dumps(record(1)).encode()])
    judge_file(CONFIG, source, out, BatchOptions(batch_size=1), open_judge=opener(ScriptedEngine(good)))
    report = judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert report.skipped == 2


class DyingEngine(ScriptedEngine):
    """Generates normally for ``calls`` engine calls, then its process is 'gone'."""

    def __init__(self, calls: int) -> None:
        super().__init__(good)
        self.left = calls

    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None, cancel=None):
        if self.left == 0:
            raise EngineDeadError("the engine process 1234 exited")
        self.left -= 1
        return super().generate(requests, progress, cancel)


def test_a_dead_engine_stops_the_run_without_error_rows(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(6)])
    with pytest.raises(EngineDeadError):
        judge_file(CONFIG, source, out, BatchOptions(batch_size=2), open_judge=opener(DyingEngine(calls=1)))
    written = rows(out)
    assert [row["line"] for row in written] == [1, 2]
    assert [row["error"] for row in written] == [None, None]


def test_a_rerun_after_a_dead_engine_judges_every_record_once(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(6)])
    with pytest.raises(EngineDeadError):
        judge_file(CONFIG, source, out, BatchOptions(batch_size=2), open_judge=opener(DyingEngine(calls=2)))
    judge_file(CONFIG, source, out, BatchOptions(batch_size=2), open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(6)]


def test_a_request_the_engine_fails_on_is_isolated_and_judged_again_on_rerun(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i, "poison" if i == 2 else "Ada")).encode() for i in range(4)])
    failing = ScriptedEngine(good, fail_when=lambda prompt: "poison" in prompt)
    first = judge_file(CONFIG, source, out, open_judge=opener(failing))
    assert first.errors == 1
    assert rows(out)[2]["error"]["final"] is False
    second = judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert second.redone == 1
    assert rows(out)[2]["error"] is None


def test_retry_errors_judges_input_errors_again(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode(), b'{"id": "x"}'])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    report = judge_file(CONFIG, source, out, BatchOptions(retry_errors=True), open_judge=opener(ScriptedEngine(good)))
    assert report.redone == 1


def test_an_input_error_row_is_final(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode(), b'{"id": "x"}'])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    report = judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert report.redone == 0


@pytest.mark.parametrize(
    ("changed", "options", "setting"),
    [
        (JudgeConfig(engine=EngineConfig(max_model_len=2048)), BatchOptions(), "max_model_len"),
        (JudgeConfig(engine=EngineConfig(backend="outlines")), BatchOptions(), "backend"),
        (JudgeConfig(detail="decision"), BatchOptions(), "prompt_version"),
        (JudgeConfig(), BatchOptions(fmt="seed"), "format"),
        (JudgeConfig(gate="recovery"), BatchOptions(), "gate"),
    ],
)
def test_a_rerun_with_other_settings_is_refused_naming_the_setting(tmp_path, changed, options, setting):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(changed, source, out, options, open_judge=opener(ScriptedEngine(good)))
    assert caught.value.setting == setting


def test_an_output_without_its_settings_is_refused(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    out.write_text('{"id": "r0", "line": 1}\n')
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert caught.value.setting == "settings"


def test_overwrite_starts_over_with_other_settings(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    report = judge_file(
        CONFIG, source, out, BatchOptions(fmt="seed", overwrite=True), open_judge=opener(ScriptedEngine(good))
    )
    assert report.summary.verdicts == 1


def test_the_input_as_output_is_refused(tmp_path):
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(CONFIG, source, source, open_judge=opener(ScriptedEngine(good)))
    assert caught.value.setting == "output"


def test_the_input_is_untouched_when_refused_as_output(tmp_path):
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    before = source.read_bytes()
    with pytest.raises(OutputMismatchError):
        judge_file(CONFIG, source, source, open_judge=opener(ScriptedEngine(good)))
    assert source.read_bytes() == before


def test_a_resume_matches_rows_by_id_when_the_input_moved_its_records(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    out.write_text(out.read_text().splitlines()[0] + "\n")  # only r0 answered
    other = tmp_path / "other.jsonl"
    write_lines(other, [json.dumps(record(9)).encode(), *(json.dumps(record(i)).encode() for i in range(2))])
    engine = ScriptedEngine(good)
    report = judge_file(CONFIG, other, out, open_judge=opener(engine))
    assert report.skipped == 1
    assert [r["id"] for r in rows(out)] == ["r9", "r0", "r1"]


def test_rows_of_a_moved_record_carry_its_new_line(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    out.write_text(out.read_text().splitlines()[0] + "\n")  # only r0 answered, at line 1
    write_lines(source, [json.dumps(record(i)).encode() for i in (1, 2, 0)])  # r0 moved to line 3
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [(r["id"], r["line"]) for r in rows(out)] == [("r1", 1), ("r2", 2), ("r0", 3)]


def test_an_answered_input_reordered_is_rewritten_in_its_new_order(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    write_lines(source, [json.dumps(record(i)).encode() for i in (2, 0, 1)])
    engine = ScriptedEngine(good)
    judge_file(CONFIG, source, out, open_judge=opener(engine))
    assert engine.calls == []
    assert [(r["id"], r["line"]) for r in rows(out)] == [("r2", 1), ("r0", 2), ("r1", 3)]


def test_a_row_kept_by_position_for_another_record_is_dropped_and_the_record_judged(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(1)).encode(), json.dumps(record(1)).encode()])  # r1 twice
    first = judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert first.errors == 1
    write_lines(source, [json.dumps(record(1)).encode(), json.dumps(record(2)).encode()])  # the repeat renamed
    engine = ScriptedEngine(good)
    second = judge_file(CONFIG, source, out, open_judge=opener(engine))
    got = rows(out)
    assert [r["id"] for r in got] == ["r1", "r2"]
    assert got[1]["verdict"] is not None
    assert sum(engine.calls) == 1
    assert second.errors == 0


def test_a_broken_line_fixed_is_judged_and_its_error_row_dropped(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(1)).encode(), b"{broken"])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    write_lines(source, [json.dumps(record(1)).encode(), json.dumps(record(2)).encode()])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [(r["id"], r["error"]) for r in rows(out)] == [("r1", None), ("r2", None)]


def test_a_new_rubric_version_in_the_store_refuses_the_resume(tmp_path):
    import shutil

    from suffice.gates.adequacy.store import builtin_dir

    store = tmp_path / "rubrics"
    shutil.copytree(builtin_dir(), store)
    config = JudgeConfig(gate="adequacy", options={"rubric": "customer-support", "rubric_dir": store})
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [b'{"id": "x"}'])
    judge_file(config, source, out, open_judge=opener(ScriptedEngine(good)))
    (store / "legal-review@9.9.9.json").write_text((store / "legal-review@1.0.0.json").read_text())
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(config, source, out, open_judge=opener(ScriptedEngine(good)))
    assert caught.value.setting == "rubrics"


def test_each_repeated_id_gets_an_error_row_and_the_first_keeps_its_verdict(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i % 2)).encode() for i in range(5)])  # r0 r1 r0 r1 r0
    judge_file(CONFIG, source, out, BatchOptions(batch_size=2), open_judge=opener(ScriptedEngine(good)))
    got = rows(out)
    assert [r["line"] for r in got] == [1, 2, 3, 4, 5]
    assert [r["error"]["type"] if r["error"] else None for r in got] == [
        None,
        None,
        "DuplicateIdError",
        "DuplicateIdError",
        "DuplicateIdError",
    ]
    assert got[2]["error"]["field"] == "id"
    assert "record 1" in got[4]["error"]["message"]


def test_repeated_ids_are_not_judged_again_on_resume(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i % 2)).encode() for i in range(4)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    engine = ScriptedEngine(good)
    report = judge_file(CONFIG, source, out, open_judge=opener(engine))
    assert report.skipped == 4
    assert engine.calls == []


def test_shuffled_partial_output_from_workers_resumes_every_id_once(tmp_path):
    import random

    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(40)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    lines = out.read_text().splitlines(keepends=True)
    kept = random.Random(7).sample(lines, 23)  # any mix of finished ids, any order, as shards leave them
    out.write_text("".join(kept))
    engine = ScriptedEngine(good)
    report = judge_file(CONFIG, source, out, BatchOptions(batch_size=5), open_judge=opener(engine))
    assert report.skipped == 23
    assert sum(engine.calls) == 17
    assert [r["id"] for r in rows(out)] == [f"r{i}" for i in range(40)]


def test_a_run_with_nothing_left_to_judge_starts_no_engine(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    opened = []

    def never(config):
        opened.append(config)
        raise AssertionError("the engine should not start")

    report = judge_file(CONFIG, source, out, open_judge=never)
    assert opened == []
    assert report.skipped == 3


def test_ragas_parquet_input_gets_one_row_per_record_and_progress_knows_the_total(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source, out = tmp_path / "in.parquet", tmp_path / "out.jsonl"
    traces = [{"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."]} for i in range(6)]
    pq.write_table(pa.Table.from_pylist(traces), source)
    totals = []

    def progress(total, done):
        totals.append((total, done))
        return OnRecords(lambda n: None), (lambda: None)

    judge_file(CONFIG, source, out, progress=progress, open_judge=opener(ScriptedEngine(good)))
    got = rows(out)
    assert [r["id"].rsplit("-", 1)[0] for r in got] == [f"row-{i}" for i in range(1, 7)]
    assert all(r["verdict"] is not None for r in got)
    assert totals == [(6, 0)]


def test_an_id_less_record_edited_in_place_is_judged_again_on_resume(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    traces = [{"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."]} for i in range(4)]
    write_lines(source, [json.dumps(t).encode() for t in traces])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    traces[2]["user_input"] = "Who wrote the other one?"  # another shard, or an edited line
    write_lines(source, [json.dumps(t).encode() for t in traces])
    engine = ScriptedEngine(good)
    report = judge_file(CONFIG, source, out, open_judge=opener(engine))
    assert report.skipped == 3
    assert engine.calls == [1]


def test_an_id_less_record_edited_in_place_leaves_one_row_per_line(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    traces = [{"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."]} for i in range(4)]
    write_lines(source, [json.dumps(t).encode() for t in traces])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    traces[2]["user_input"] = "Who wrote the other one?"
    write_lines(source, [json.dumps(t).encode() for t in traces])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [r["line"] for r in rows(out)] == [1, 2, 3, 4]


def test_an_output_with_position_only_ids_is_resumed_without_a_second_row(tmp_path):
    """Outputs written before ids carried a digest (``row-3``) are taken over by position."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    traces = [{"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."]} for i in range(3)]
    write_lines(source, [json.dumps(t).encode() for t in traces])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    old = [{**r, "id": f"row-{r['line']}"} for r in rows(out)]
    out.write_text("".join(json.dumps(r) + "\n" for r in old))
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [r["line"] for r in rows(out)] == [1, 2, 3]


def test_the_same_id_less_records_get_the_same_ids_from_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    traces = [
        {"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."], "score": 0.1 * i} for i in range(3)
    ]
    traces[1].pop("score")  # a column missing from one JSONL line is a null in Parquet
    jsonl, parquet = tmp_path / "in.jsonl", tmp_path / "in.parquet"
    write_lines(jsonl, [json.dumps(t).encode() for t in traces])
    table = pa.Table.from_pylist(traces).cast(
        pa.schema([("user_input", pa.string()), ("retrieved_contexts", pa.list_(pa.string())), ("score", pa.float32())])
    )
    pq.write_table(table, parquet)
    judge_file(CONFIG, jsonl, tmp_path / "a.jsonl", open_judge=opener(ScriptedEngine(good)))
    judge_file(CONFIG, parquet, tmp_path / "b.jsonl", open_judge=opener(ScriptedEngine(good)))
    assert [r["id"] for r in rows(tmp_path / "a.jsonl")] == [r["id"] for r in rows(tmp_path / "b.jsonl")]


def test_a_lone_surrogate_in_an_id_less_record_does_not_stop_the_run(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [
        b'{"user_input": "Who wrote \\ud800 it?", "retrieved_contexts": ["Ada wrote it."]}',
        json.dumps({"user_input": "Who wrote 1?", "retrieved_contexts": ["Ada wrote it."]}).encode(),
    ]
    write_lines(source, lines)
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [r["line"] for r in rows(out)] == [1, 2]


def _parquet_rows(path: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_parquet_output_has_typed_verdict_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(5)] + [b"not json"])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    table = pq.read_table(out)
    assert table.num_rows == 6
    assert pa.types.is_struct(table.schema.field("verdict").type)
    assert table.column("verdict").combine_chunks().field("is_sufficient").to_pylist()[:5] == [True] * 5
    assert table.column("error").combine_chunks().field("type").to_pylist()[5] == "InputError"
    assert not (tmp_path / "out.parquet.journal.jsonl").exists()


def test_a_parquet_run_killed_midway_resumes_from_its_journal(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(8)])
    with pytest.raises(EngineDeadError):
        judge_file(CONFIG, source, out, BatchOptions(batch_size=2), open_judge=opener(DyingEngine(calls=2)))
    journal = tmp_path / "out.parquet.journal.jsonl"
    assert len(rows(journal)) == 4
    assert not out.exists()
    engine = ScriptedEngine(good)
    judge_file(CONFIG, source, out, BatchOptions(batch_size=2), open_judge=opener(engine))
    assert sum(engine.calls) == 4
    assert [r["id"] for r in _parquet_rows(out)] == [f"r{i}" for i in range(8)]
    assert not journal.exists()


def test_a_finished_parquet_output_resumes_new_records_only(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    write_lines(source, [json.dumps(record(i)).encode() for i in range(5)])
    engine = ScriptedEngine(good)
    report = judge_file(CONFIG, source, out, open_judge=opener(engine))
    assert report.skipped == 3
    assert sum(engine.calls) == 2
    assert [r["id"] for r in _parquet_rows(out)] == [f"r{i}" for i in range(5)]


def test_parquet_output_in_the_seed_shape_is_refused_naming_the_option(tmp_path):
    from suffice.exceptions import ConfigError

    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(0)).encode()])
    with pytest.raises(ConfigError) as caught:
        judge_file(CONFIG, source, out, BatchOptions(fmt="seed"), open_judge=opener(ScriptedEngine(good)))
    assert caught.value.parameter == "format"


def test_the_same_records_as_parquet_and_as_jsonl_get_the_same_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [record(i, f"Ada wrote {i}.") for i in range(7)]
    as_jsonl, as_parquet = tmp_path / "in.jsonl", tmp_path / "in.parquet"
    write_lines(as_jsonl, [json.dumps(r).encode() for r in records])
    pq.write_table(pa.Table.from_pylist(records), as_parquet, row_group_size=3)
    judge_file(CONFIG, as_jsonl, tmp_path / "a.jsonl", open_judge=opener(ScriptedEngine(good)))
    judge_file(CONFIG, as_parquet, tmp_path / "b.jsonl", open_judge=opener(ScriptedEngine(good)))
    assert rows(tmp_path / "b.jsonl") == rows(tmp_path / "a.jsonl")


def test_parquet_output_reads_back_to_the_jsonl_rows_but_for_chunk_ids_as_strings(tmp_path):
    from suffice.rows.tables import iter_parquet

    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])
    judge_file(CONFIG, source, tmp_path / "a.jsonl", open_judge=opener(ScriptedEngine(good)))
    judge_file(CONFIG, source, tmp_path / "b.parquet", open_judge=opener(ScriptedEngine(good)))
    expected = rows(tmp_path / "a.jsonl")
    for row in expected:
        row["verdict"]["useful_chunk_ids"] = [str(c) for c in row["verdict"]["useful_chunk_ids"]]
        row["cached"] = None  # a Parquet file has the column in every row; a JSONL row only on a cache hit
        row["cascade"] = None  # likewise: a cascade's rows alone carry it in JSONL
    assert list(iter_parquet(tmp_path / "b.parquet")) == expected


def test_a_resume_with_another_field_mapping_is_refused_naming_it(tmp_path):
    from suffice.batch import FieldMap

    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps({"id": "a", "query": "Q?", "rewritten": "R?", "chunks": []}).encode()] * 1)
    first = BatchOptions(fields=FieldMap.parse(["question=query"]))
    judge_file(CONFIG, source, out, first, open_judge=opener(ScriptedEngine(good)))
    other = BatchOptions(fields=FieldMap.parse(["question=rewritten"]))
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(CONFIG, source, out, other, open_judge=opener(ScriptedEngine(good)))
    assert caught.value.setting == "fields"


def test_an_output_records_its_format_at_the_default_and_its_field_mapping_sorted(tmp_path):
    from suffice.batch import FieldMap
    from suffice.batch.run_settings import settings_path
    from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT

    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps({"key": "a", "query": "Q?", "chunks": []}).encode()])
    judge_file(CONFIG, source, tmp_path / "plain.jsonl", open_judge=opener(ScriptedEngine(good)))
    plain = json.loads(settings_path(tmp_path / "plain.jsonl").read_text())
    assert plain["format"] == DEFAULT_VERDICT_FORMAT and "fields" not in plain
    mapped = BatchOptions(fields=FieldMap.parse(["question=query", "id=key"]))
    judge_file(CONFIG, source, tmp_path / "mapped.jsonl", mapped, open_judge=opener(ScriptedEngine(good)))
    recorded = json.loads(settings_path(tmp_path / "mapped.jsonl").read_text())
    assert [key for key in recorded if key in ("format", "fields")] == ["format", "fields"]
    assert recorded["fields"] == "id=key,question=query"
    assert {k: v for k, v in recorded.items() if k != "fields"} == plain


@pytest.mark.parametrize("which", ["output", "input"])
def test_an_audit_database_that_is_the_output_or_the_input_is_refused(tmp_path, which):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    before = source.read_bytes()
    audit = out if which == "output" else source
    with pytest.raises(OutputMismatchError) as caught:
        judge_file(CONFIG, source, out, BatchOptions(audit_db=audit), open_judge=opener(ScriptedEngine(good)))
    assert caught.value.setting == "audit_db"
    assert source.read_bytes() == before


@pytest.mark.parametrize("given", ["wrong", "none"])
def test_an_audit_key_that_does_not_fit_stops_the_run_before_the_engine_starts(tmp_path, given):
    from suffice.audit import AuditLog
    from suffice.exceptions import ConfigError

    db = tmp_path / "audit.db"
    AuditLog(db, key=b"k" * 32).close()
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    opened: list[int] = []

    def counting(config):
        opened.append(1)
        return Judge(ScriptedEngine(good), config=config)

    key = b"w" * 32 if given == "wrong" else None
    with pytest.raises(ConfigError) as caught:
        judge_file(CONFIG, source, out, BatchOptions(audit_db=db, audit_key=key), open_judge=counting)
    assert caught.value.parameter == "audit_key"
    assert opened == []


LONE_SURROGATE_ID = WORST[2]


def test_a_lone_surrogate_id_in_a_parquet_output_resumes(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(0)).encode(), LONE_SURROGATE_ID, json.dumps(record(2)).encode()])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    report = judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert report.skipped == 3


def test_a_lone_surrogate_id_reads_back_from_a_parquet_output_as_it_was(tmp_path):
    from suffice.formats.files.parquet import unescape
    from suffice.rows.tables import iter_parquet

    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(0)).encode(), LONE_SURROGATE_ID])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [unescape(row)["id"] for row in iter_parquet(out)] == ["r0", "\ud800"]


def test_a_string_that_looks_escaped_reads_back_from_parquet_as_it_was(tmp_path):
    """The escape's mark is escaped itself: a real id that begins with it is not
    mistaken for an escaped one."""
    from suffice.formats.files.parquet import ESCAPED, unescape
    from suffice.rows.tables import iter_parquet

    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    tricky = ESCAPED + '"x"'
    write_lines(source, [json.dumps({**record(0), "id": tricky}).encode()])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [unescape(row)["id"] for row in iter_parquet(out)] == [tricky]


def test_a_journal_row_parquet_cannot_hold_is_a_typed_error_naming_the_output_format(tmp_path):
    from suffice.formats.files.parquet import parquet_from_journal

    source, jsonl = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    judge_file(CONFIG, source, jsonl, open_judge=opener(ScriptedEngine(good)))
    (row,) = rows(jsonl)
    journal = tmp_path / "out.parquet.journal.jsonl"
    write_lines(journal, [json.dumps({**row, "tokens": {"prompt": 2**70, "completion": 1}}).encode()])
    with pytest.raises(OutputMismatchError) as refused:
        parquet_from_journal(journal, tmp_path / "out.parquet", CONFIG.make_gate())
    assert refused.value.setting == "output-format"


class _Bar:
    """A progress factory that keeps where the bar started and how far it went."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.position = 0.0

    def __call__(self, total: int | None, done: int):  # type: ignore[no-untyped-def]
        self.total = total
        self.position = float(done)

        def advance(n: float) -> None:
            self.position += n

        return OnRecords(advance), lambda: None


@pytest.fixture
def next_shard(tmp_path: Path) -> tuple[Path, Path]:
    """An output of r0-r9, and an input of r6-r15: four answered, six rows foreign."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(10)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    write_lines(source, [json.dumps(record(i)).encode() for i in range(6, 16)])
    return source, out


def test_the_progress_bar_ends_at_its_total_when_the_output_holds_rows_for_other_ids(next_shard):
    source, out = next_shard
    bar = _Bar()
    judge_file(CONFIG, source, out, progress=bar, open_judge=opener(ScriptedEngine(good)))
    assert bar.position == 10


def test_the_resume_message_counts_the_records_of_this_input_that_were_skipped(next_shard):
    source, out = next_shard
    said: list[str] = []
    judge_file(CONFIG, source, out, notify=said.append, open_judge=opener(ScriptedEngine(good)))
    assert any("resuming: 4 of 10 records" in m for m in said), said


def test_the_progress_bar_ends_at_its_total_when_a_stale_row_is_judged_again(tmp_path):
    """An id-less record inserted first: the rows kept by position are stale, not done."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    traces = [{"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."]} for i in range(4)]
    write_lines(source, [json.dumps(t).encode() for t in traces])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    traces.insert(0, {"user_input": "A new first question?", "retrieved_contexts": ["x"]})
    write_lines(source, [json.dumps(t).encode() for t in traces])
    bar = _Bar()
    judge_file(CONFIG, source, out, progress=bar, open_judge=opener(ScriptedEngine(good)))
    assert bar.position == 5
