"""Input records from other tools: RAGAS names, a field mapping, Parquet files."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from suffice.batch.inputs import FieldMap, InputFile, format_of
from suffice.exceptions import ConfigError
from suffice.records import parse_record

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


def test_a_record_in_suffices_shape_without_an_id_is_still_an_error():
    with pytest.raises(Exception, match="id"):
        parse_record(FieldMap().apply({"question": "Q?", "chunks": []}, 3))


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
