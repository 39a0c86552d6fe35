"""Input records from other tools: RAGAS names, a field mapping, Parquet files."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from suffice.batch.inputs import InputFile, format_of
from suffice.exceptions import ConfigError, InputError
from suffice.records.fields import FieldMap
from suffice.records.item import parse_record

RAGAS = {
    "user_input": "Who wrote Emma?",
    "retrieved_contexts": ["Emma is a novel.", "Jane Austen wrote Emma."],
    "response": "Jane Austen.",
    "reference": "Jane Austen",
}


def test_a_ragas_record_is_read_with_suffices_names():
    item = parse_record(FieldMap().apply(RAGAS, 7), need_response=True)
    assert item.question == "Who wrote Emma?"
    assert [c.text for c in item.chunks] == RAGAS["retrieved_contexts"]
    assert [c.id for c in item.chunks] == [0, 1]
    assert item.response == "Jane Austen."


def test_a_record_without_an_id_in_ragas_shape_gets_its_position():
    assert parse_record(FieldMap().apply(RAGAS, 7)).id.startswith("row-7-")


def test_the_same_record_at_the_same_position_gets_the_same_id():
    assert FieldMap().apply(dict(RAGAS), 7)["id"] == FieldMap().apply(dict(RAGAS), 7)["id"]


def test_another_record_at_the_same_position_gets_another_id():
    other = {**RAGAS, "user_input": "Who wrote Persuasion?"}
    assert FieldMap().apply(other, 7)["id"] != FieldMap().apply(dict(RAGAS), 7)["id"]


def test_a_ragas_record_keeps_its_own_id():
    assert parse_record(FieldMap().apply({**RAGAS, "id": "t-1"}, 7)).id == "t-1"


def test_a_mapping_renames_fields():
    fields = FieldMap.parse(["question=query", "chunks=passages", "id=trace_id"])
    record = {"trace_id": "t9", "query": "Q?", "passages": [{"id": "p", "text": "T"}]}
    item = parse_record(fields.apply(record, 1))
    assert (item.id, item.question, item.chunks[0].id) == ("t9", "Q?", "p")


def test_a_mapped_field_that_is_missing_is_still_an_error_naming_suffices_field():
    fields = FieldMap.parse(["question=query"])
    with pytest.raises(Exception, match="question"):
        parse_record(fields.apply({"id": "a", "chunks": []}, 1))


def test_without_positions_a_mapped_record_without_an_id_is_an_error_naming_id():
    with pytest.raises(Exception, match="id"):
        parse_record(FieldMap().apply(RAGAS, None))


def test_a_record_in_suffices_shape_without_an_id_gets_its_position_and_digest_as_id():
    record = {"question": "Q?", "chunks": ["A."]}
    read = FieldMap().apply(record, 3)
    assert parse_record(read).id == read["id"] and read["id"].startswith("row-3-")
    assert FieldMap().apply(dict(record), 3)["id"] == read["id"]  # the same record at the same line: the same id
    assert "id" not in record  # the caller's record is not changed
    with pytest.raises(Exception, match="id"):  # no position (a Python call): no id is made up
        parse_record(FieldMap().apply(record, None))


@pytest.mark.parametrize(
    ("pair", "names"),
    [
        ("question", "must be SUFFICE_FIELD=INPUT_FIELD"),
        ("answer=response", "'answer' is not a record field"),
        ("=x", "must be SUFFICE_FIELD=INPUT_FIELD"),
    ],
)
def test_a_bad_mapping_is_a_config_error_naming_the_option(pair, names):
    with pytest.raises(ConfigError) as caught:
        FieldMap.parse([pair])
    assert caught.value.parameter == "field"
    assert names in str(caught.value)


def test_a_field_mapped_twice_is_refused():
    with pytest.raises(ConfigError, match="mapped twice"):
        FieldMap.parse(["question=a", "question=b"])


def test_the_format_comes_from_the_extension_or_the_option(tmp_path):
    assert format_of(tmp_path / "x.parquet", None) == "parquet"
    assert format_of(tmp_path / "x.jsonl", None) == "jsonl"
    assert format_of(tmp_path / "x.data", "parquet") == "parquet"
    with pytest.raises(ConfigError, match="extension"):
        format_of(tmp_path / "x.data", None)


def test_parquet_input_yields_records_with_positions_and_a_known_count(tmp_path):
    path = tmp_path / "in.parquet"
    rows = [{**RAGAS, "user_input": f"Q{i}?"} for i in range(5)]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)
    source = InputFile(path)
    lines = list(source)
    assert source.count == 5
    assert [line.line for line in lines] == [1, 2, 3, 4, 5]
    assert parse_record(lines[3].record).question == "Q3?"


def test_a_damaged_parquet_file_is_a_config_error_naming_the_input(tmp_path):
    path = tmp_path / "in.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError) as caught:
        InputFile(path)
    assert caught.value.parameter == "input"


def test_jsonl_input_counts_its_records_for_the_eta_without_blank_lines(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(RAGAS) + "\n\n  \n{broken\n" + json.dumps(RAGAS))
    source = InputFile(path)
    assert source.count == 3
    assert len(list(source)) == 3


def test_a_parquet_ragas_row_with_a_null_id_gets_its_position(tmp_path):
    # A column has every field: the record without an id holds a null, not nothing.
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{**RAGAS, "id": "t-1"}, dict(RAGAS)]), path)
    lines = list(InputFile(path))
    assert parse_record(lines[1].record).id.startswith("row-2-")


def test_a_mapped_id_that_is_null_gets_the_position():
    fields = FieldMap.parse(["id=trace_id"])
    assert parse_record(fields.apply({**RAGAS, "trace_id": None}, 3)).id.startswith("row-3-")


def test_a_null_among_string_chunks_is_the_error_not_its_neighbour(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{**RAGAS, "retrieved_contexts": ["a", None, "c"]}]), path)
    [line] = list(InputFile(path))
    with pytest.raises(InputError) as info:
        parse_record(line.record)
    assert info.value.field == "chunks[1]"


def test_strings_beside_chunk_objects_keep_their_positions_as_ids():
    item = parse_record(FieldMap().apply({"id": "a", "question": "Q?", "chunks": ["x", {"id": 5, "text": "y"}]}, 1))
    assert [c.id for c in item.chunks] == [0, 5]


def _timestamps(path, rows: int, bad: int) -> None:
    values = [0] * rows
    values[bad] = 253402300800 * 10**6  # 10000-01-01: Python's datetime ends at year 9999
    table = pa.table(
        {
            "id": [f"r{i}" for i in range(rows)],
            "question": ["Q?"] * rows,
            "chunks": [[{"id": 0, "text": "a"}]] * rows,
            "exported_at": pa.array(values, type=pa.timestamp("us")),
        }
    )
    pq.write_table(table, path)


def test_a_parquet_value_python_cannot_hold_is_that_rows_error_only(tmp_path):
    path = tmp_path / "in.parquet"
    _timestamps(path, rows=3000, bad=2500)
    lines = list(InputFile(path))
    assert len(lines) == 3000
    assert [line.line for line in lines[2499:2502]] == [2500, 2501, 2502]
    with pytest.raises(InputError) as info:
        parse_record(lines[2500].record)
    assert info.value.field == "record"
    assert "row 2501 cannot be read: OverflowError" in str(info.value)


def test_the_rows_beside_an_unreadable_value_are_read(tmp_path):
    path = tmp_path / "in.parquet"
    _timestamps(path, rows=3000, bad=2500)
    lines = list(InputFile(path))
    assert parse_record(lines[2499].record).id == "r2499"
    assert parse_record(lines[2501].record).id == "r2501"


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ('[\n  {"id": "a", "question": "Q?", "chunks": []},\n  {"id": "b"}\n]\n', "many lines"),
        ('{\n  "id": "a"\n}\n', "many lines"),
        ('[{"id": "a", "question": "Q?", "chunks": []}, {"id": "b"}]\n', "a JSON array"),
    ],
)
def test_a_json_document_is_refused_as_not_json_lines(tmp_path, text, shape):
    path = tmp_path / "in.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        InputFile(path)
    assert caught.value.parameter == "input"
    assert shape in str(caught.value)


def test_json_lines_whose_first_record_is_a_list_are_still_read(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('["not", "a", "record"]\n' + json.dumps({**RAGAS, "id": "x"}) + "\n")
    assert len(list(InputFile(path))) == 2


def _line(tmp_path, text: str) -> object:
    path = tmp_path / "in.jsonl"
    path.write_text(text + "\n")
    [line] = list(InputFile(path))
    return line.record


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"id": "a", "id": "b", "question": "Q?", "chunks": ["t"]}', "id"),
        ('{"user_input": "Q?", "user_input": "R?", "retrieved_contexts": ["t"]}', "question"),
        ('{"id": "a", "question": "Q?", "chunks": [{"id": 0, "text": "x", "text": "y"}, "t"]}', "chunks[0].text"),
    ],
)
def test_a_key_twice_stays_an_error_through_string_chunks_and_ragas_names(tmp_path, text, field):
    with pytest.raises(InputError) as info:
        parse_record(_line(tmp_path, text))
    assert info.value.field == field


def test_a_key_twice_through_a_mapping_is_named_by_suffices_field(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"trace": "a", "trace": "b", "question": "Q?", "chunks": []}\n')
    [line] = list(InputFile(path, fields=FieldMap.parse(["id=trace"])))
    with pytest.raises(InputError) as info:
        parse_record(line.record)
    assert info.value.field == "id"
