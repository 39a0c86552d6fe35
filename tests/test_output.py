import json

import pytest

from suffice.exceptions import OutputMismatchError, SufficeError
from suffice.output import ResultFile


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _error(kind, final=None):
    error = {"type": kind, "message": "x"}
    if final is not None:
        error["final"] = final
    return error


def test_a_partial_last_line_is_cut_off(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n{"id": "b", "line": 2}\n{"id": "c", "li')
    results = ResultFile(out)
    results.start()
    results.close()
    assert [r["id"] for r in _rows(out)] == ["a", "b"]


def test_answered_lines_are_known_by_line_number(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "b", "line": 3}\n{"id": "a", "line": 1}\n')
    results = ResultFile(out)
    results.close()
    assert results.done == {3: "b", 1: "a"}


def test_a_row_for_another_record_is_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n')
    results = ResultFile(out)
    with pytest.raises(OutputMismatchError, match="does not answer this input"):
        results.verify(1, {"id": "x"})
    results.close()


def test_engine_failures_are_removed_to_be_judged_again(tmp_path):
    out = tmp_path / "out.jsonl"
    rows = [
        {"id": "a", "line": 1, "error": _error("GenerationError", final=False)},
        {"id": "b", "line": 2, "error": _error("InputError", final=True)},
        {"id": "c", "line": 3, "error": None},
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = ResultFile(out)
    results.start()
    results.close()
    assert sorted(results.done) == [2, 3]
    assert results.redo == 1
    assert [r["id"] for r in _rows(out)] == ["b", "c"]


def test_generation_errors_written_before_final_existed_are_judged_again(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"id": "a", "line": 1, "error": _error("GenerationError")}) + "\n")
    results = ResultFile(out)
    results.close()
    assert results.done == {}


def test_retry_errors_removes_every_error_row(tmp_path):
    out = tmp_path / "out.jsonl"
    rows = [
        {"id": "a", "line": 1, "error": _error("InputError", final=True)},
        {"id": "b", "line": 2, "error": None},
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = ResultFile(out, retry_errors=True)
    results.close()
    assert list(results.done) == [2]


def test_rows_written_out_of_order_are_put_back_in_input_order(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "b", "line": 2}\n')
    results = ResultFile(out)
    results.write([{"id": "a", "line": 1}, {"id": "c", "line": 3}])
    results.close()
    assert [r["line"] for r in _rows(out)] == [1, 2, 3]


def test_two_rows_for_one_line_are_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n{"id": "a", "line": 1}\n')
    with pytest.raises(SufficeError, match="a second time"):
        ResultFile(out)


def test_rows_without_a_line_number_are_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    with pytest.raises(SufficeError, match="no input line number"):
        ResultFile(out)


def test_overwrite_starts_over(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n')
    results = ResultFile(out, overwrite=True)
    results.start()
    results.close()
    assert out.read_text() == ""


def test_nothing_changes_until_start(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1, "error": {"type": "GenerationError", "final": false}}\n{"id": "b", "li')
    before = out.read_bytes()
    ResultFile(out).close()
    assert out.read_bytes() == before


def test_rows_left_out_of_order_by_a_killed_run_are_sorted_even_with_nothing_to_do(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "line": 1}\n{"id": "c", "line": 3}\n{"id": "b", "line": 2}\n')
    ResultFile(out).close()
    assert [r["line"] for r in _rows(out)] == [1, 2, 3]
