import json

import pytest

from suffice.batch.answered import IN_INPUT_ORDER, KeyIndex
from suffice.batch.journal import ResultFile
from suffice.exceptions import SufficeError


@pytest.fixture
def index(tmp_path):
    keys = KeyIndex(tmp_path)
    yield keys
    keys.close()


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _error(kind, final=None):
    error = {"type": kind, "message": "x"}
    if final is not None:
        error["final"] = final
    return error


def test_a_partial_last_line_is_cut_off(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n{"id": "b", "line": 2}\n{"id": "c", "li')
    results = ResultFile(out, index)
    results.start()
    results.close()
    assert [r["id"] for r in _rows(out)] == ["a", "b"]


def _done(index, *keys):
    return sorted(index.done_rows(list(keys)))


def test_answered_records_are_known_by_id_in_any_order(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "b", "line": 3}\n{"id": "a", "line": 1}\n')
    results = ResultFile(out, index)
    results.close()
    assert _done(index, "i:a", "i:b", "i:c") == ["i:a", "i:b"]


def test_a_row_without_an_id_is_known_by_its_position(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": null, "line": 4, "error": {"type": "InputError", "message": "x"}}\n')
    ResultFile(out, index).close()
    assert _done(index, "l:4", "i:None") == ["l:4"]


def test_a_duplicate_id_row_is_known_by_its_position_not_its_id(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text(
        '{"id": "a", "line": 1}\n{"id": "a", "line": 2, "error": {"type": "DuplicateIdError", "message": "x"}}\n'
    )
    ResultFile(out, index).close()
    assert _done(index, "i:a", "l:1", "l:2") == ["i:a", "l:2"]


def test_engine_failures_are_removed_to_be_judged_again(tmp_path, index):
    out = tmp_path / "out.jsonl"
    rows = [
        {"id": "a", "line": 1, "error": _error("GenerationError", final=False)},
        {"id": "b", "line": 2, "error": _error("InputError", final=True)},
        {"id": "c", "line": 3, "error": None},
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = ResultFile(out, index)
    results.start()
    results.close()
    assert _done(index, "i:a", "i:b", "i:c") == ["i:b", "i:c"]
    assert results.redo == 1
    assert [r["id"] for r in _rows(out)] == ["b", "c"]


def test_generation_errors_written_before_final_existed_are_judged_again(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"id": "a", "line": 1, "error": _error("GenerationError")}) + "\n")
    results = ResultFile(out, index)
    results.close()
    assert index.done_count == 0


def test_retry_errors_removes_every_error_row(tmp_path, index):
    out = tmp_path / "out.jsonl"
    rows = [
        {"id": "a", "line": 1, "error": _error("InputError", final=True)},
        {"id": "b", "line": 2, "error": None},
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = ResultFile(out, index, retry_errors=True)
    results.close()
    assert _done(index, "i:a", "i:b") == ["i:b"]


def test_rows_written_out_of_order_are_put_back_in_input_order(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "b", "line": 2}\n')
    results = ResultFile(out, index)
    results.write([{"id": "a", "line": 1}, {"id": "c", "line": 3}])
    results.close()
    assert [r["line"] for r in _rows(out)] == [1, 2, 3]


def test_a_second_row_for_one_id_is_dropped_and_the_first_kept(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1, "n": 1}\n{"id": "b", "line": 2}\n{"id": "a", "line": 1, "n": 2}\n')
    results = ResultFile(out, index)
    results.start()
    results.close()
    assert results.repeated == 1
    assert [(r["id"], r.get("n")) for r in _rows(out)] == [("a", 1), ("b", None)]


def test_shards_in_any_order_with_a_hole_filled_come_out_in_input_order(tmp_path, index):
    out = tmp_path / "out.jsonl"
    shards = [{"id": f"r{n}", "line": n} for n in (5, 2, 7, 1, 4, 6)]
    shards.insert(3, {"id": "r5", "line": 5, "error": {"type": "GenerationError", "message": "x", "final": False}})
    out.write_text("".join(json.dumps(r) + "\n" for r in shards) + '{"id": "r9", "li')
    results = ResultFile(out, index)
    results.write([{"id": "r3", "line": 3}])
    results.close()
    assert [r["id"] for r in _rows(out)] == ["r1", "r2", "r3", "r4", "r5", "r6", "r7"]


def test_a_row_written_for_an_engine_failure_stays_in_the_file(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "b", "line": 2}\n')
    results = ResultFile(out, index)
    failed = {"id": "a", "line": 1, "error": {"type": "GenerationError", "message": "x", "final": False}}
    results.write([failed])
    results.close()
    assert [r["id"] for r in _rows(out)] == ["a", "b"]
    assert _done(index, "i:a", "i:b") == ["i:b"]


def test_rows_without_a_line_number_are_refused(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    with pytest.raises(SufficeError, match="no input line number"):
        ResultFile(out, index)


def test_overwrite_starts_over(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n')
    results = ResultFile(out, index, overwrite=True)
    results.start()
    results.close()
    assert out.read_text() == ""


def test_nothing_changes_until_start(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1, "error": {"type": "GenerationError", "final": false}}\n{"id": "b", "li')
    before = out.read_bytes()
    ResultFile(out, index).close()
    assert out.read_bytes() == before


def test_rows_left_out_of_order_by_a_killed_run_are_sorted_even_with_nothing_to_do(tmp_path, index):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n{"id": "c", "line": 3}\n{"id": "b", "line": 2}\n')
    ResultFile(out, index).close()
    assert [r["line"] for r in _rows(out)] == [1, 2, 3]


def test_the_scratch_folder_of_a_killed_run_is_removed_by_the_next(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".suffice-keys-{dead.stdout.strip()}-abc"
    left.mkdir()
    (left / "keys.sqlite").write_bytes(b"x")
    keys = KeyIndex(tmp_path)
    keys.close()
    assert not left.exists()
    assert list(tmp_path.glob(".suffice-keys-*")) == []


def test_rows_come_in_input_order_without_a_temporary_sort(index):
    # A sort spills to SQLite's temporary folder (/tmp), off the output's disk.
    plan = " ".join(str(row[-1]) for row in index._db.execute("EXPLAIN QUERY PLAN " + IN_INPUT_ORDER))
    assert "TEMP B-TREE" not in plan
