"""A Parquet input is read in batches bounded by what they decode, not by the file's size (issue 52): 128 lists of a
million nulls take 1.6 KB on disk and, decoded 1,024 rows at a time, 2.4 GB.  Run for real: the file is built
with pyarrow and judged by ``suffice judge`` in a child process, whose peak RSS is measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: 128 rows whose chunks are a million nulls each, and one good row among them (row 65).
_BOMB = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
n, nulls = 129, 1_000_000
lengths = [1 if i == 64 else nulls for i in range(n)]
offsets = pa.array([0] + [sum(lengths[: i + 1]) for i in range(n)], pa.int32())
start = sum(lengths[:64])
rest = offsets[-1].as_py() - start - 1
flat = pa.concat_arrays([pa.nulls(start, pa.string()), pa.array(["Ada wrote it."]), pa.nulls(rest, pa.string())])
chunks = pa.ListArray.from_arrays(offsets, flat)
ids, questions = [f"r{i}" for i in range(n)], [f"Who wrote {i}?" for i in range(n)]
table = pa.table({"id": ids, "question": questions, "chunks": chunks})
pq.write_table(table, sys.argv[1], compression="zstd", write_statistics=False)
"""

#: ``suffice judge`` on a scripted engine, of its first file (one good row: what judging takes) then of its second;
#: prints the process's peak RSS in MiB after each.
_JUDGE = """
import resource, sys
from suffice.cli.main import main
from suffice.judge import Judge
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
Judge.open = classmethod(lambda cls, config: cls(ScriptedEngine(good), config=config))
for source, out in zip(sys.argv[1::2], sys.argv[2::2]):
    main(["judge", source, "-o", out, "--no-progress"])
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)
"""


def test_lists_of_a_million_nulls_are_each_their_rows_error_in_bounded_memory(tmp_path: Path):
    """Before: judging the bomb peaked 2.4 GB above judging one row; now it adds at most 200 MiB (its rows are
    decoded one at a time, a million values each)."""
    one, source, out = tmp_path / "one.parquet", tmp_path / "bomb.parquet", tmp_path / "out.jsonl"
    pq.write_table(pa.table({"id": ["r0"], "question": ["Who wrote 0?"], "chunks": [["Ada wrote it."]]}), one)
    subprocess.run([sys.executable, "-c", _BOMB, str(source)], check=True)
    assert source.stat().st_size < 4_096
    argv = [sys.executable, "-c", _JUDGE, str(one), str(tmp_path / "one.jsonl"), str(source), str(out)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=Path(__file__).parents[2])
    judging, peak = map(int, done.stdout.split()[-2:])
    assert peak - judging < 200, f"{peak} MiB judging a {source.stat().st_size}-byte file, {judging} MiB one row"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["line"] for row in rows] == list(range(1, 130))
    assert rows[64]["id"] == "r64" and rows[64]["error"] is None and rows[64]["verdict"] is not None
    bombs = rows[:64] + rows[65:]
    assert all(row["verdict"] is None and row["error"]["field"] == "chunks" for row in bombs)
