"""A cluster job's N copies of one command, each judging its shard (``--shard K/N``):
together they judge every record once, and their outputs concatenated resume as one
run's output with nothing left to judge."""

from __future__ import annotations

import json
import shutil

import pytest

from suffice.batch import BatchOptions, Shard, judge_file
from suffice.batch.inputs import InputFile
from suffice.cli import main as cli_main
from suffice.exceptions import ConfigError
from tests.batch.test_runner import CONFIG, good, opener, record, rows, write_lines
from tests.fakes import ScriptedEngine

RECORDS = 10


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(record(i)).encode() for i in range(RECORDS)]
    lines.insert(3, b"")  # a blank line: places count records, not lines
    write_lines(path, lines)
    return path


def judge_shard(source, out, shard: Shard):
    return judge_file(CONFIG, source, out, BatchOptions(shard=shard), open_judge=opener(ScriptedEngine(good)))


def concatenated_shards(source, tmp_path, name="out"):
    """Two shards judged apart, their rows joined in one file (``NAME-all.jsonl``) with
    one shard's settings; the shards' own outputs are ``NAME-0.jsonl`` and ``NAME-1.jsonl``."""
    parts = []
    for k in range(2):
        out = tmp_path / f"{name}-{k}.jsonl"
        judge_shard(source, out, Shard(k, 2))
        parts.append(out)
    whole = tmp_path / f"{name}-all.jsonl"
    whole.write_bytes(b"".join(p.read_bytes() for p in parts))
    shutil.copy(parts[0].with_name(parts[0].name + ".settings.json"), whole.with_name(whole.name + ".settings.json"))
    return whole


def test_a_shard_judges_every_nth_record_from_its_index(source, tmp_path):
    out = tmp_path / "out-1.jsonl"
    judge_shard(source, out, Shard(1, 3))
    assert [row["id"] for row in rows(out)] == ["r1", "r4", "r7"]


def test_the_shards_together_judge_every_record_once(source, tmp_path):
    ids = []
    for k in range(3):
        out = tmp_path / f"out-{k}.jsonl"
        judge_shard(source, out, Shard(k, 3))
        ids += [row["id"] for row in rows(out)]
    assert sorted(ids) == sorted(f"r{i}" for i in range(RECORDS))


def test_a_shards_rows_keep_their_lines_in_the_whole_input(source, tmp_path):
    out = tmp_path / "out.jsonl"
    judge_shard(source, out, Shard(1, 3))
    assert [row["line"] for row in rows(out)] == [2, 6, 9]  # line 4 is blank: r3 is on line 5, r4 on 6


def test_a_shards_progress_total_is_its_own_size(source):
    assert InputFile(source, shard=Shard(0, 3)).count == 4


def test_concatenated_shard_outputs_resume_as_one_run_with_nothing_to_judge(source, tmp_path):
    whole = concatenated_shards(source, tmp_path)
    engine = ScriptedEngine(good)
    report = judge_file(CONFIG, source, whole, BatchOptions(), open_judge=opener(engine))
    assert report.skipped == RECORDS
    assert engine.calls == []


def test_a_killed_shard_resumes_only_its_own_records(source, tmp_path):
    """A rerun of one shard (the job's retry) judges what that shard lacks, no other's."""
    out = tmp_path / "out.jsonl"
    judge_shard(source, out, Shard(0, 2))
    kept = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(kept[:2]))  # the run died after two rows
    engine = ScriptedEngine(good)
    judge_file(CONFIG, source, out, BatchOptions(shard=Shard(0, 2)), open_judge=opener(engine))
    assert sum(engine.calls) == 3


@pytest.mark.parametrize(
    "text", ["3", "3/", "/8", "a/8", "-1/8", "8/8", "3/0", "1.5/8", "3/8/2", "²/8", "3/²"], ids=lambda t: t or "empty"
)
def test_a_bad_shard_is_a_config_error_naming_it(text):
    with pytest.raises(ConfigError) as caught:
        Shard.parse(text)
    assert caught.value.parameter == "shard"


def test_the_cli_refuses_a_bad_shard_with_exit_2(source, tmp_path, capsys):
    status = cli_main.main(["judge", str(source), "-o", str(tmp_path / "o.jsonl"), "--shard", "8/8"])
    assert status == 2
    assert "shard='8/8'" in capsys.readouterr().err


def test_concatenated_shard_outputs_are_put_in_input_order_by_the_resume(source, tmp_path):
    whole = concatenated_shards(source, tmp_path)
    judge_file(CONFIG, source, whole, BatchOptions(), open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(whole)] == [f"r{i}" for i in range(RECORDS)]


def test_a_superscript_digit_in_a_shard_is_exit_2_not_a_traceback(source, tmp_path, capsys):
    """``"²".isdigit()`` holds but ``int("²")`` raises: a ValueError traceback."""
    status = cli_main.main(["judge", str(source), "-o", str(tmp_path / "o.jsonl"), "--shard", "²/8"])
    assert status == 2


def _repeated_id_across_shards(tmp_path):
    """Records A (line 2, shard 1) and B (line 3, shard 0) share id X: neither shard sees
    the other, so each judges its X; out-0 (B's row) comes first when concatenated."""
    source = tmp_path / "repeated.jsonl"
    a = {"id": "X", "question": "Who?", "chunks": [{"id": 0, "text": "Ada."}]}
    b = {"id": "X", "question": "Who wrote this much longer question about it?", "chunks": [{"id": 0, "text": "Ada."}]}
    write_lines(source, [json.dumps(record(0)).encode(), json.dumps(a).encode(), json.dumps(b).encode()])
    whole = concatenated_shards(source, tmp_path, "rep")
    a_tokens = rows(tmp_path / "rep-1.jsonl")[0]["tokens"]["prompt"]
    judge_file(CONFIG, source, whole, BatchOptions(), open_judge=opener(ScriptedEngine(good)))
    return rows(whole), a_tokens


def test_a_repeated_id_across_shards_keeps_the_first_records_verdict(tmp_path):
    """Whatever order the shards were joined in: B's verdict was kept and relabelled
    line 2, so record A silently carried B's verdict."""
    got, a_tokens = _repeated_id_across_shards(tmp_path)
    assert got[1]["tokens"]["prompt"] == a_tokens


def test_a_repeated_id_across_shards_is_a_duplicate_row_for_the_later_record(tmp_path):
    got, _ = _repeated_id_across_shards(tmp_path)
    assert got[2]["error"]["type"] == "DuplicateIdError"
