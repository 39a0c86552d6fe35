"""An output with a line in the middle that is not a result row (a killed worker's torn
shard concatenated with another, bit rot, a hand edit) resumes: the line is set aside
in ``OUTPUT.rejected``, dropped from the output, and its record judged again.  And the
CLI never advises "rerun to resume" for an error the rerun repeats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.cli import judge_cmd
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK, EXIT_USAGE
from suffice.judge import Judge
from tests.batch.test_runner import good, opener, record, rows, write_lines
from tests.fakes import ScriptedEngine

CONFIG = JudgeConfig()
RECORDS = 10
#: Row 5 torn after 40 bytes, as a killed writer leaves it, then a line end.
TORN_AT = 4


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A finished output of ten rows whose fifth line is torn (the torn bytes too)."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(RECORDS)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    lines = out.read_bytes().splitlines(keepends=True)
    lines[TORN_AT] = lines[TORN_AT][:40] + b"\n"
    out.write_bytes(b"".join(lines))
    return source, out, lines[TORN_AT]


def test_a_torn_row_in_the_middle_is_judged_again_and_every_record_has_one_row(damaged):
    source, out, _ = damaged
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(RECORDS)]


def test_only_the_record_of_the_torn_row_is_judged_again(damaged):
    source, out, _ = damaged
    engine = ScriptedEngine(good)
    judge_file(CONFIG, source, out, open_judge=opener(engine))
    assert sum(engine.calls) == 1


def test_the_torn_row_is_kept_aside_in_the_rejected_file(damaged):
    source, out, torn = damaged
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert out.with_name(out.name + ".rejected").read_bytes() == torn


def test_the_user_is_told_how_many_lines_were_set_aside_and_where(damaged):
    source, out, _ = damaged
    said: list[str] = []
    judge_file(CONFIG, source, out, notify=said.append, open_judge=opener(ScriptedEngine(good)))
    assert any(f"set aside 1 lines of {out}" in m and f"{out}.rejected" in m for m in said), said


def test_shards_concatenated_after_a_worker_was_killed_mid_row_resume_one_run(tmp_path):
    """``cat a.out.jsonl b.out.jsonl``: worker A's torn last row is glued to B's first."""
    full, a_in, b_in = tmp_path / "in.jsonl", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_lines(full, [json.dumps(record(i)).encode() for i in range(8)])
    write_lines(a_in, [json.dumps(record(i)).encode() for i in range(4)])
    write_lines(b_in, [json.dumps(record(i)).encode() for i in range(4, 8)])
    a_out, b_out, out = tmp_path / "a.out.jsonl", tmp_path / "b.out.jsonl", tmp_path / "out.jsonl"
    judge_file(CONFIG, a_in, a_out, BatchOptions(batch_size=1), open_judge=opener(ScriptedEngine(good)))
    judge_file(CONFIG, b_in, b_out, BatchOptions(batch_size=1), open_judge=opener(ScriptedEngine(good)))
    out.write_bytes(a_out.read_bytes()[:-50] + b_out.read_bytes())
    (tmp_path / "out.jsonl.settings.json").write_bytes((tmp_path / "a.out.jsonl.settings.json").read_bytes())
    judge_file(CONFIG, full, out, open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(8)]


def test_the_cli_resumes_an_output_with_a_torn_row_in_the_middle(damaged, monkeypatch):
    source, out, _ = damaged
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(ScriptedEngine(good), config=config)))
    assert judge_cmd.judge_file(CONFIG, source, out, BatchOptions(), progress=False) == EXIT_OK


@pytest.fixture
def unreadable_parquet(tmp_path: Path) -> tuple[Path, Path]:
    """A finished Parquet output whose bytes were damaged: a rerun cannot read it."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    out.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    return source, out


def test_an_output_a_rerun_cannot_read_is_a_usage_error(unreadable_parquet, monkeypatch):
    source, out = unreadable_parquet
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(ScriptedEngine(good), config=config)))
    assert judge_cmd.judge_file(CONFIG, source, out, BatchOptions(), progress=False) == EXIT_USAGE


def test_an_output_a_rerun_cannot_read_is_not_called_resumable(unreadable_parquet, monkeypatch, capsys):
    source, out = unreadable_parquet
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(ScriptedEngine(good), config=config)))
    judge_cmd.judge_file(CONFIG, source, out, BatchOptions(), progress=False)
    assert "rerun the same command to resume" not in capsys.readouterr().err


def test_a_hand_edited_row_that_is_still_json_is_set_aside_not_a_reason_to_refuse(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(RECORDS)])
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    lines = out.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"line":', b'"lime":')
    out.write_bytes(b"".join(lines))
    judge_file(CONFIG, source, out, open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(RECORDS)]
