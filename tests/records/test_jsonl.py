import json

from suffice.records.item import InvalidRecord, RepeatedKeys
from suffice.records.lines import dump_line, read_lines, read_records


def test_read_records_marks_bad_lines_and_skips_blank_ones(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n\nnot json\n{"id": 2}\n')
    records = list(read_records(path))
    assert records[0] == {"id": 1}
    assert records[2] == {"id": 2}
    assert isinstance(records[1], InvalidRecord)
    assert records[1].line == 3


def test_line_numbers_count_blank_lines(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n\n  \n{"id": 2}\n')
    assert [s.line for s in read_lines(path)] == [1, 4]


def _one(tmp_path, raw: bytes):
    path = tmp_path / "in.jsonl"
    path.write_bytes(raw)
    [line] = list(read_lines(path))
    return line.record


def test_a_byte_order_mark_and_crlf_are_accepted(tmp_path):
    assert _one(tmp_path, b'\xef\xbb\xbf{"id": "a"}\r\n') == {"id": "a"}


def test_an_integer_too_long_to_convert_is_an_invalid_record(tmp_path):
    record = _one(tmp_path, b'{"id": ' + b"9" * 5000 + b"}\n")
    assert isinstance(record, InvalidRecord)
    assert "unreadable value" in record.message


def test_nesting_too_deep_for_the_parser_is_an_invalid_record(tmp_path):
    record = _one(tmp_path, b"[" * 200_000 + b"]" * 200_000 + b"\n")
    assert isinstance(record, InvalidRecord)
    assert "nested too deeply" in record.message


def test_bytes_that_are_not_utf8_are_an_invalid_record(tmp_path):
    record = _one(tmp_path, b'{"id": "\xff\xfe"}\n')
    assert isinstance(record, InvalidRecord)
    assert "not UTF-8" in record.message


def test_dump_line_keeps_a_lone_surrogate_as_an_escape():
    line = dump_line({"id": "a\ud800b"})
    assert json.loads(line)["id"] == "a\ud800b"


def test_dump_line_writes_other_text_as_utf8():
    assert "é".encode() in dump_line({"id": "é"})


def test_an_object_with_a_key_twice_is_marked_with_the_key(tmp_path):
    record = _one(tmp_path, b'{"id": "b", "question": "Q?", "id": "c"}\n')
    assert isinstance(record, RepeatedKeys)
    assert record.repeated == {"id"}


def test_a_chunk_with_a_key_twice_is_marked_and_its_record_is_not(tmp_path):
    record = _one(tmp_path, b'{"id": "b", "chunks": [{"id": 0, "text": "a", "text": "b"}]}\n')
    assert not isinstance(record, RepeatedKeys)
    assert record["chunks"][0].repeated == {"text"}


def test_the_same_key_in_two_objects_is_fine(tmp_path):
    record = _one(tmp_path, b'{"id": "b", "chunks": [{"id": 0, "text": "a"}, {"id": 1, "text": "b"}]}\n')
    assert record == {"id": "b", "chunks": [{"id": 0, "text": "a"}, {"id": 1, "text": "b"}]}


def test_a_json_error_points_into_its_own_line(tmp_path):
    record = _one(tmp_path, b'{"id": "a", "question": "Q?"\n')
    assert isinstance(record, InvalidRecord)
    assert "line 1 column" in record.message
