import json

import pytest

from suffice.exceptions import SufficeError
from suffice.jsonl import ResumableWriter, read_records
from suffice.records import InvalidRecord


def test_read_records_marks_bad_lines_and_skips_blank_ones(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n\nnot json\n{"id": 2}\n')
    records = list(read_records(path))
    assert records[0] == {"id": 1} and records[2] == {"id": 2}
    assert isinstance(records[1], InvalidRecord) and records[1].line == 3


def test_resume_cuts_a_partial_line_and_checks_ids(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "verd')
    writer = ResumableWriter(out)
    assert writer.done_ids == ["a", "b"]
    writer.verify(0, {"id": "a"})
    with pytest.raises(SufficeError, match="does not continue"):
        writer.verify(1, {"id": "x"})
    writer.write([{"id": "c"}])
    writer.close()
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a", "b", "c"]


def test_overwrite_starts_over(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    writer = ResumableWriter(out, overwrite=True)
    assert writer.done_ids == []
    writer.close()
    assert out.read_text() == ""
