"""Compressed inputs (gzip, bzip2, xz) are read as they are; a damaged one is refused
before anything is judged; outputs are never compressed."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.batch.inputs import InputFile
from suffice.cli import main as cli_main
from suffice.exceptions import ConfigError
from tests.batch.test_runner import CONFIG, good, opener, record, rows
from tests.fakes import ScriptedEngine

RECORDS = 6
COMPRESSORS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": (".jsonl.gz", gzip.compress),
    "bzip2": (".jsonl.bz2", bz2.compress),
    "xz": (".jsonl.xz", lzma.compress),
}


def records_bytes(n: int = RECORDS) -> bytes:
    return b"".join(json.dumps(record(i)).encode() + b"\n" for i in range(n))


def compressed_input(tmp_path: Path, kind: str, n: int = RECORDS) -> Path:
    suffix, compress = COMPRESSORS[kind]
    path = tmp_path / f"in{suffix}"
    path.write_bytes(compress(records_bytes(n)))
    return path


def judge(source: Path, out: Path, engine: ScriptedEngine | None = None):
    return judge_file(CONFIG, source, out, BatchOptions(), open_judge=opener(engine or ScriptedEngine(good)))


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_compressed_input_is_judged_record_by_record(tmp_path, kind):
    out = tmp_path / "out.jsonl"
    judge(compressed_input(tmp_path, kind), out)
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(RECORDS)]


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_compressed_inputs_rows_are_verdicts(tmp_path, kind):
    out = tmp_path / "out.jsonl"
    judge(compressed_input(tmp_path, kind), out)
    assert [row["error"] for row in rows(out)] == [None] * RECORDS


def test_compression_is_told_by_content_not_name(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(gzip.compress(records_bytes()))
    out = tmp_path / "out.jsonl"
    judge(source, out)
    assert len(rows(out)) == RECORDS


def test_a_compressed_input_resumes_with_nothing_left_to_judge(tmp_path):
    source, out = compressed_input(tmp_path, "gzip"), tmp_path / "out.jsonl"
    judge(source, out)
    report = judge(source, out)
    assert report.skipped == RECORDS


def test_a_cut_short_gzip_input_is_refused_naming_it(tmp_path):
    """A copy that stopped half way: refused whole, not judged up to the cut (its
    count of lines is read before anything is judged)."""
    source = tmp_path / "in.jsonl.gz"
    whole = gzip.compress(records_bytes(200))
    source.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ConfigError) as caught:
        judge(source, tmp_path / "out.jsonl")
    assert caught.value.parameter == "input"


def test_a_cut_short_input_starts_no_engine_and_writes_no_row(tmp_path):
    source = tmp_path / "in.jsonl.gz"
    whole = gzip.compress(records_bytes(200))
    source.write_bytes(whole[: len(whole) // 2])
    engine = ScriptedEngine(good)
    out = tmp_path / "out.jsonl"
    with pytest.raises(ConfigError):
        judge(source, out, engine)
    assert not out.exists()


def test_a_flipped_byte_in_a_gzip_input_is_refused(tmp_path):
    source = tmp_path / "in.jsonl.gz"
    data = bytearray(gzip.compress(records_bytes(200)))
    data[len(data) // 2] ^= 0xFF
    source.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="cannot be read after line"):
        judge(source, tmp_path / "out.jsonl")


def test_a_zstd_input_is_refused_naming_the_command_that_decompresses_it(tmp_path):
    source = tmp_path / "in.jsonl.zst"
    source.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 32)
    with pytest.raises(ConfigError, match=r"zstd -d in\.jsonl\.zst"):
        judge(source, tmp_path / "out.jsonl")


@pytest.mark.parametrize("name", ["out.jsonl.gz", "out.jsonl.xz"])
def test_a_compressed_output_name_is_refused_naming_output(tmp_path, name):
    with pytest.raises(ConfigError) as caught:
        judge(compressed_input(tmp_path, "gzip"), tmp_path / name)
    assert caught.value.parameter == "output"


def test_the_cli_exits_2_on_a_damaged_input(tmp_path, capsys):
    source = tmp_path / "in.jsonl.gz"
    whole = gzip.compress(records_bytes(200))
    source.write_bytes(whole[: len(whole) // 2])
    status = cli_main.main(["judge", str(source), "-o", str(tmp_path / "out.jsonl")])
    assert status == 2
    assert "cannot be read after line" in capsys.readouterr().err


def test_the_hint_for_a_compressed_json_array_decompresses_before_jq(tmp_path):
    """jq reads no gzip: the hint ``jq -c '.[]' in.json.gz`` failed as given."""
    source = tmp_path / "in.json.gz"
    source.write_bytes(gzip.compress(json.dumps([record(0), record(1)]).encode()))
    with pytest.raises(ConfigError, match=re.escape("gzip -dc in.json.gz | jq -c '.[]'")):
        InputFile(source)
