"""Batch input has the service's caps on one record (issue 38, attack 10): a string's characters and a list's
entries.  A record over one is that record's error row, the rest of the batch is judged, and a Parquet row over one
is measured on Arrow's buffers, never converted into Python strings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.batch.inputs import InputFile
from suffice.cli.main import build_parser
from suffice.exceptions import ConfigError, InputError
from suffice.records.item import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS, parse_record
from suffice.server.config import ServeConfig
from tests.batch.test_runner import CONFIG, good, opener, record, rows
from tests.fakes import ScriptedEngine


def _records(path: Path, **caps: int) -> list[object]:
    return [source.record for source in InputFile(path, **caps)]


def _error(record: object) -> InputError:
    with pytest.raises(InputError) as caught:
        parse_record(record)
    return caught.value


def test_a_jsonl_record_over_the_string_cap_is_its_error_naming_the_field(tmp_path):
    path = tmp_path / "in.jsonl"
    big = {**record(1), "chunks": [{"id": 0, "text": "x" * 101}]}
    path.write_text("".join(json.dumps(r) + "\n" for r in (record(0), big, record(2))))
    read = _records(path, max_field_chars=100)
    assert parse_record(read[0]).id == "r0" and parse_record(read[2]).id == "r2"
    error = _error(read[1])
    assert error.field == "chunks.0.text"
    assert "101 characters: at most 100" in str(error) and "--max-field-chars" in str(error)


def test_a_jsonl_record_over_the_list_cap_is_its_error(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({**record(0), "chunks": ["a"] * 9}) + "\n")
    error = _error(_records(path, max_chunks_per_item=8)[0])
    assert error.field == "chunks" and "9 entries: at most 8" in str(error)


@pytest.mark.parametrize("dictionary", [True, False])
def test_a_parquet_row_over_a_cap_is_its_error_and_its_neighbours_are_read(tmp_path, dictionary):
    path = tmp_path / "in.parquet"
    questions = ["Who?", "x" * 1_001 + ("" if dictionary else "distinct"), "Who?"]
    chunks = [["a"], ["b"], ["c"] * 9]
    pq.write_table(
        pa.table({"id": ["r0", "r1", "r2"], "question": questions, "chunks": chunks}),
        path,
        use_dictionary=dictionary,
    )
    read = _records(path, max_field_chars=1_000, max_chunks_per_item=8)
    assert parse_record(read[0]).id == "r0"
    assert _error(read[1]).field == "question"
    assert _error(read[2]).field == "chunks"
    assert "row 3" in str(_error(read[2]))


def test_a_judged_batch_keeps_going_past_an_over_cap_record(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    big = {**record(1), "question": "x" * 2_000}
    source.write_text("".join(json.dumps(r) + "\n" for r in (record(0), big, record(2))))
    judge_file(CONFIG, source, out, BatchOptions(max_field_chars=1_000), open_judge=opener(ScriptedEngine(good)))
    written = rows(out)
    assert [r["verdict"] is not None for r in written] == [True, False, True]
    assert written[1]["error"]["field"] == "question"


#: 64 rows of one 16 MB string, stored once as a dictionary: about 2 KB on disk.
_BOMB = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
big = pa.array(["x" * (16 << 20)])
column = pa.DictionaryArray.from_arrays(pa.array([0] * 64, pa.int32()), big)
pq.write_table(pa.table({"id": [f"q{i}" for i in range(64)], "question": column}), sys.argv[1], compression="zstd")
"""

_READ = """
import sys, tracemalloc
from pathlib import Path
import pyarrow as pa
from suffice.batch.inputs import InputFile
from suffice.exceptions import InputError
from suffice.records.item import parse_record
tracemalloc.start()
errors = 0
for source in InputFile(Path(sys.argv[1])):
    try:
        parse_record(source.record)
    except InputError as exc:
        errors += exc.field == "question"
print(errors, pa.default_memory_pool().max_memory() >> 20, tracemalloc.get_traced_memory()[1] >> 20)
"""


def test_a_parquet_bomb_of_16_mb_strings_is_read_in_bounded_memory(tmp_path):
    """Before the caps, reading these 64 rows peaked at 1.6 GB (2.9 GB through `suffice judge`): 1 GB of Arrow
    strings, then as much in Python.  Measured as the peaks of Arrow's pool and of Python's allocations (the
    process's RSS also holds what the allocator keeps, which varies with the machine's load)."""
    path = tmp_path / "bomb.parquet"
    subprocess.run([sys.executable, "-c", _BOMB, str(path)], check=True)
    assert path.stat().st_size < 8_192
    done = subprocess.run([sys.executable, "-c", _READ, str(path)], check=True, capture_output=True, text=True)
    errors, arrow_mb, python_mb = map(int, done.stdout.split())
    assert errors == 64
    assert arrow_mb < 128, f"Arrow held {arrow_mb} MB at once reading a 2 KB file"
    assert python_mb < 64, f"Python held {python_mb} MB at once reading a 2 KB file"


def test_serve_and_judge_share_the_caps_and_their_defaults():
    judge_args = build_parser().parse_args(["judge", "in.jsonl", "-o", "out.jsonl"])
    assert ServeConfig().max_field_chars == BatchOptions().max_field_chars == judge_args.max_field_chars
    assert ServeConfig().max_chunks_per_item == BatchOptions().max_chunks_per_item == judge_args.max_chunks_per_item
    assert (BatchOptions().max_field_chars, BatchOptions().max_chunks_per_item) == (
        MAX_FIELD_CHARS,
        MAX_CHUNKS_PER_ITEM,
    )


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_a_bad_cap_is_refused_naming_it(value):
    with pytest.raises(ConfigError) as caught:
        BatchOptions(max_field_chars=value)  # type: ignore[arg-type]
    assert caught.value.parameter == "max_field_chars"


def test_the_docs_give_the_caps_the_code_has():
    from suffice.formats.files.parquet import _BATCH_BYTES
    from suffice.network import KEY_FILE_MAX_BYTES

    docs = Path(__file__).parents[2] / "docs"
    judge = (docs / "judge.md").read_text(encoding="utf-8")
    assert f"{MAX_FIELD_CHARS} characters a string, {MAX_CHUNKS_PER_ITEM} entries a list" in judge
    security = (docs / "security.md").read_text(encoding="utf-8")
    assert f"{_BATCH_BYTES >> 20} MB" in security and f"{KEY_FILE_MAX_BYTES:,} bytes" in security
