"""The typed Parquet schema of result rows, its writer and its reader (no engine)."""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from typing import Annotated, Any, Literal, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel, Field, SerializeAsAny

from suffice.formats.verdicts import export
from suffice.gates import DecisionGate, gate_names, make_gate, roles
from suffice.gates.base import Gate
from suffice.gates.recovery.grammar import Classification
from suffice.gates.sufficiency.grammar import CalibratedDecision, ChunkId, SufficiencyVerdict
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.results import ErrorInfo, JudgeResult, TokenCounts
from suffice.rows.tables import (
    ParquetRows,
    RowError,
    arrow_type,
    coerce_row,
    iter_parquet,
    parquet_rows,
    result_schema,
    row_from_arrow,
)

COLUMNS = [
    *("id", "gate", "verdict", "error", "model", "backend", "prompt_version", "tokens", "retries"),
    *("cached", "cascade", "line"),
]


def registry() -> list[Gate]:
    """Every gate the config accepts, full and decision-only."""
    gates = [make_gate(name, {"rubric": "customer-support"} if name == "adequacy" else {}) for name in gate_names()]
    return [*gates, *(DecisionGate(g) for g in gates)]


def gate_id(gate: Gate) -> str:
    return f"{gate.name}-{type(gate).__name__}"


def row_of(result: JudgeResult, gate: Gate, line: int) -> dict[str, Any]:
    """A result row as the batch runner writes it (``suffice`` format), through JSON."""
    row = result.model_dump(mode="json", exclude={"raw_text"})
    row["line"] = line
    if result.verdict is not None:
        row.update(export(gate, result.verdict, "suffice"))
    return json.loads(json.dumps(row))


def result(gate: Gate, verdict: BaseModel | None = None, error: ErrorInfo | None = None, **kw: Any) -> JudgeResult:
    fields: dict[str, Any] = {
        "id": "q-1",
        "gate": gate.name,
        "model": "qwen3-0.6b",
        "backend": "xgrammar",
        "prompt_version": gate.prompt_version,
        "tokens": TokenCounts(prompt=812, completion=97),
        "retries": 0,
        "raw_text": "{...}",
    }
    return JudgeResult(**{**fields, **kw, "verdict": verdict, "error": error})


def shortcut_verdict(gate: Gate) -> BaseModel:
    """The gate's own verdict for an item with no chunks (no model needed)."""
    item = roles.parse_item(gate, {"id": "q-0", "question": "Who wrote it?", "chunks": [], "response": "Nobody."})
    verdict = roles.shortcut(gate, item)
    assert verdict is not None
    return verdict


def write_rows(path: Any, gate: Gate, rows: list[dict[str, Any]], **kw: Any) -> list[dict[str, Any]]:
    with ParquetRows(path, result_schema(gate.verdict_model), **kw) as out:
        out.write(rows)
    return list(iter_parquet(path))


# --- arrow_type -----------------------------------------------------------------------


class Inner(BaseModel):
    score: float
    note: str | None = None


class Outer(BaseModel):
    name: str
    inner: Inner
    maybe: Inner | None = None
    tags: list[str] = Field(default_factory=list)


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [(str, pa.string()), (int, pa.int64()), (float, pa.float64()), (bool, pa.bool_())],
    ids=["str", "int", "float", "bool"],
)
def test_scalars_map_to_their_arrow_types(annotation, expected):
    assert arrow_type(annotation) == expected


@pytest.mark.parametrize("annotation", [int | None, Optional[int], None | int], ids=["pipe", "Optional", "none-first"])  # noqa: UP045
def test_an_optional_is_the_type_it_wraps(annotation):
    assert arrow_type(annotation) == pa.int64()


@pytest.mark.parametrize("annotation", [list[str], tuple[str, ...], set[str], frozenset[str]])
def test_sequences_are_lists(annotation):
    kind = arrow_type(annotation)
    assert pa.types.is_list(kind)
    assert kind.value_type == pa.string()


def test_list_items_are_nullable_only_when_the_item_type_admits_none():
    assert arrow_type(list[str]).value_field.nullable is False
    assert arrow_type(list[str | None]).value_field.nullable is True


def test_a_dict_of_str_keys_is_a_map():
    kind = arrow_type(dict[str, float])
    assert pa.types.is_map(kind)
    assert kind.key_type == pa.string()
    assert kind.item_type == pa.float64()


def test_a_model_is_a_struct_of_its_fields_in_order():
    kind = arrow_type(Outer)
    assert pa.types.is_struct(kind)
    assert [kind.field(i).name for i in range(kind.num_fields)] == ["name", "inner", "maybe", "tags"]


def test_a_nested_model_is_a_nested_struct():
    inner = arrow_type(Outer).field("inner")
    assert pa.types.is_struct(inner.type)
    assert inner.type.field("score").type == pa.float64()


def test_struct_children_are_nullable_exactly_where_the_field_admits_none():
    kind = arrow_type(Outer)
    assert kind.field("inner").nullable is False
    assert kind.field("maybe").nullable is True
    assert kind.field("inner").type.field("note").nullable is True


def test_a_literal_of_strings_is_a_string():
    assert arrow_type(Literal["PASS", "FAIL"]) == pa.string()


def test_a_string_enum_is_a_string():
    assert arrow_type(Colour) == pa.string()
    assert arrow_type(Classification) == pa.string()


@pytest.mark.parametrize("annotation", [ChunkId, int | str, str | int, list[ChunkId]], ids=str)
def test_a_union_of_int_and_str_is_written_as_a_string(annotation):
    kind = arrow_type(annotation)
    assert (kind.value_type if pa.types.is_list(kind) else kind) == pa.string()


@pytest.mark.parametrize(
    "annotation",
    [Annotated[int, Field(ge=0)], Annotated[int | None, "doc"]],
    ids=["constraint", "optional-inside"],
)
def test_annotated_wrappers_are_unwrapped(annotation):
    assert arrow_type(annotation) == pa.int64()


def test_serialize_as_any_is_unwrapped():
    kind = arrow_type(SerializeAsAny[Inner])
    assert pa.types.is_struct(kind)
    assert kind.field(0).name == "score"


@pytest.mark.parametrize(
    ("annotation", "named"),
    [(Any, "Any"), (object, "object"), (int | float, "int | float"), (dict[int, str], "dict[int, str]")],
    ids=["Any", "object", "int-or-float", "int-keys"],
)
def test_an_annotation_without_a_faithful_arrow_type_is_refused_by_name(annotation, named):
    with pytest.raises(TypeError, match=r"no Arrow type") as caught:
        arrow_type(annotation)
    assert named in str(caught.value)


def test_a_model_with_an_any_field_is_refused():
    class Loose(BaseModel):
        payload: dict[str, Any]

    with pytest.raises(TypeError, match="Any"):
        arrow_type(Loose)


def test_a_recursive_model_is_refused():
    class Node(BaseModel):
        children: list[Node]

    Node.model_rebuild()
    with pytest.raises(TypeError, match="Node refers to itself"):
        arrow_type(Node)


# --- result_schema --------------------------------------------------------------------


@pytest.mark.parametrize("gate", registry(), ids=gate_id)
def test_the_result_schema_has_every_row_column(gate):
    assert result_schema(gate.verdict_model).names == COLUMNS


@pytest.mark.parametrize("gate", registry(), ids=gate_id)
def test_the_verdict_column_is_a_struct_of_the_gates_verdict_fields(gate):
    verdict = result_schema(gate.verdict_model).field("verdict")
    assert pa.types.is_struct(verdict.type)
    assert [f.name for f in verdict.type] == list(gate.verdict_model.model_fields)


@pytest.mark.parametrize("gate", registry(), ids=gate_id)
def test_columns_are_nullable_where_a_row_can_hold_null(gate):
    schema = result_schema(gate.verdict_model)
    nullable = {name for name in COLUMNS if schema.field(name).nullable}
    assert nullable == {"id", "verdict", "error", "cached", "cascade"}


def test_the_error_column_is_a_struct_of_the_error_fields():
    error = result_schema(SufficiencyVerdict).field("error").type
    assert [f.name for f in error] == ["type", "message", "field", "raw_text", "final"]
    assert error.field("final").type == pa.bool_()
    assert error.field("field").nullable is True


def test_the_tokens_and_line_columns_are_integers():
    schema = result_schema(SufficiencyVerdict)
    assert schema.field("tokens").type == pa.struct(
        [pa.field("prompt", pa.int64(), nullable=False), pa.field("completion", pa.int64(), nullable=False)]
    )
    assert schema.field("line").type == pa.int64()


def test_the_sufficiency_verdict_types():
    verdict = result_schema(SufficiencyVerdict).field("verdict").type
    assert verdict.field("is_sufficient").type == pa.bool_()
    assert verdict.field("confidence").type == pa.float64()
    assert verdict.field("coverage").type == pa.map_(pa.string(), pa.field("value", pa.bool_(), nullable=False))
    assert verdict.field("useful_chunk_ids").type.value_type == pa.string()
    assert verdict.field("p_sufficient").nullable is True
    assert pa.types.is_struct(verdict.field("decision").type)


def test_result_schema_refuses_what_is_not_a_model():
    with pytest.raises(TypeError, match="pydantic model"):
        result_schema(dict)  # type: ignore[arg-type]


# --- round trips ----------------------------------------------------------------------

SUFFICIENCY = make_gate("sufficiency")
SUFFICIENT = SufficiencyVerdict(
    is_sufficient=True,
    required_entities=["Marie Curie", "1903"],
    coverage={"Marie Curie": True, "1903": True},
    missing_information=[],
    contradictions=["chunk 3 says 1904"],
    confidence=0.875,
    reasoning="Chunk 3 names her and the year of the prize.",
    useful_chunk_ids=[3, "doc-7"],
    prompt_version="sufficiency/v4",
    truncated_chunk_ids=[11],
    omitted_chunk_ids=["late"],
    p_sufficient=0.93,
    decision=CalibratedDecision(
        score_name="p_sufficient", score=0.93, threshold=0.6, sufficient=True, reason="0.930 >= 0.600"
    ),
)
FAILED = ErrorInfo(type="InputError", message="question: is missing", field="question", final=True)


@pytest.fixture
def sufficiency_rows() -> list[dict[str, Any]]:
    return [
        row_of(result(SUFFICIENCY, SUFFICIENT), SUFFICIENCY, 1),
        row_of(result(SUFFICIENCY, error=FAILED, id=None, tokens=TokenCounts(), retries=2), SUFFICIENCY, 2),
        row_of(result(SUFFICIENCY, shortcut_verdict(SUFFICIENCY), id="q-3"), SUFFICIENCY, 3),
    ]


def test_a_verdict_row_reads_back_as_written_with_chunk_ids_as_strings(tmp_path, sufficiency_rows):
    back = write_rows(tmp_path / "out.parquet", SUFFICIENCY, sufficiency_rows)
    expected = copy.deepcopy(sufficiency_rows[0])
    expected["verdict"]["useful_chunk_ids"] = ["3", "doc-7"]
    expected["verdict"]["truncated_chunk_ids"] = ["11"]
    assert back[0] == expected


def test_verdict_fields_read_back_as_values(tmp_path, sufficiency_rows):
    verdict = write_rows(tmp_path / "out.parquet", SUFFICIENCY, sufficiency_rows)[0]["verdict"]
    assert verdict["is_sufficient"] is True
    assert verdict["confidence"] == 0.875
    assert verdict["coverage"] == {"Marie Curie": True, "1903": True}
    assert verdict["useful_chunk_ids"] == ["3", "doc-7"]
    assert verdict["omitted_chunk_ids"] == ["late"]
    assert verdict["p_sufficient"] == 0.93
    assert verdict["decision"]["threshold"] == 0.6
    assert verdict["contradictions"] == ["chunk 3 says 1904"]


def test_an_error_row_reads_back_with_no_verdict(tmp_path, sufficiency_rows):
    back = write_rows(tmp_path / "out.parquet", SUFFICIENCY, sufficiency_rows)[1]
    assert back == sufficiency_rows[1]
    assert back["verdict"] is None
    assert back["id"] is None
    assert back["error"]["field"] == "question"
    assert back["error"]["raw_text"] is None
    assert back["retries"] == 2


def test_a_shortcut_row_keeps_its_empty_map_and_lists(tmp_path, sufficiency_rows):
    back = write_rows(tmp_path / "out.parquet", SUFFICIENCY, sufficiency_rows)[2]
    assert back == sufficiency_rows[2]
    assert back["verdict"]["coverage"] == {}
    assert back["verdict"]["useful_chunk_ids"] == []
    assert back["verdict"]["model_called"] is False
    assert back["verdict"]["decision"] is None


def test_rows_come_back_in_order(tmp_path, sufficiency_rows):
    back = write_rows(tmp_path / "out.parquet", SUFFICIENCY, sufficiency_rows)
    assert [r["line"] for r in back] == [1, 2, 3]


def test_the_written_verdict_column_is_a_struct_of_the_model_fields(tmp_path, sufficiency_rows):
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, sufficiency_rows)
    verdict = pq.read_schema(path).field("verdict").type
    assert pa.types.is_struct(verdict)
    assert [f.name for f in verdict] == list(SufficiencyVerdict.model_fields)
    assert verdict.field("is_sufficient").type == pa.bool_()


def test_a_verdict_field_can_be_read_as_a_column(tmp_path, sufficiency_rows):
    """The point of the typed schema: no JSON parsing to query a verdict field."""
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, sufficiency_rows)
    verdicts = pq.read_table(path, columns=["verdict"]).column("verdict").combine_chunks()
    assert verdicts.field("confidence").to_pylist()[0] == 0.875
    assert verdicts.is_null().to_pylist() == [False, True, False]


def other_gate_rows(gate: Gate) -> list[dict[str, Any]]:
    """A verdict row (the gate's shortcut verdict, with chunk ids ``[2, "b"]``) and an
    error row; the recovery verdict also gets class probabilities (a map)."""
    update: dict[str, Any] = {"truncated_chunk_ids": [2, "b"]}
    if gate.verdict_model.__name__ == "RecoveryVerdict":
        update["class_probabilities"] = {"SUFFICIENT": 0.125, "PARTIALLY_SUFFICIENT": 0.25, "INSUFFICIENT": 0.625}
    verdict = shortcut_verdict(gate).model_copy(update=update)
    return [
        row_of(result(gate, verdict), gate, 1),
        row_of(result(gate, error=FAILED), gate, 2),
    ]


@pytest.mark.parametrize("gate", registry(), ids=gate_id)
def test_every_gates_rows_round_trip(tmp_path, gate):
    rows = other_gate_rows(gate)
    back = write_rows(tmp_path / "out.parquet", gate, rows)
    expected = copy.deepcopy(rows)
    expected[0]["verdict"]["truncated_chunk_ids"] = ["2", "b"]
    assert back == expected


def test_a_recovery_row_keeps_its_probabilities_and_decision(tmp_path):
    gate = make_gate("recovery")
    back = write_rows(tmp_path / "out.parquet", gate, other_gate_rows(gate))[0]["verdict"]
    assert back["classification"] == "INSUFFICIENT"
    assert back["class_probabilities"] == {"SUFFICIENT": 0.125, "PARTIALLY_SUFFICIENT": 0.25, "INSUFFICIENT": 0.625}
    assert back["truncated_chunk_ids"] == ["2", "b"]
    assert back["answer"] is None
    assert back["decision"]["route"] in {"retrieve_more", "abstain", "human_review"}


def test_an_adequacy_row_keeps_its_nested_dimensions(tmp_path):
    gate = make_gate("adequacy", {"rubric": "customer-support"})
    back = write_rows(tmp_path / "out.parquet", gate, other_gate_rows(gate))[0]["verdict"]
    assert back["dimensions"]["factual_coverage"]["score"] == 0.0
    assert back["dimensions"]["rubric_alignment"]["assessment"] == "No context was retrieved."
    assert back["adequacy_decision"] == "FAIL"
    assert back["decision"]["decision"] == "FAIL"
    assert isinstance(back["decision"]["failed_critical"], dict)


def test_a_decision_only_row_keeps_its_probabilities(tmp_path):
    gate = DecisionGate(make_gate("sufficiency"))
    verdict = DecisionVerdict(
        decision="true",
        positive=True,
        probability=0.75,
        probabilities={"true": 0.75, "false": 0.25},
        prompt_version=gate.prompt_version,
        omitted_chunk_ids=[4, "x"],
    )
    back = write_rows(tmp_path / "out.parquet", gate, [row_of(result(gate, verdict), gate, 7)])[0]
    assert back["verdict"]["probabilities"] == {"true": 0.75, "false": 0.25}
    assert back["verdict"]["omitted_chunk_ids"] == ["4", "x"]
    assert back["verdict"]["detail"] == "decision"
    assert back["line"] == 7


# --- the writer -----------------------------------------------------------------------


def numbered(n: int) -> list[dict[str, Any]]:
    base = row_of(result(SUFFICIENCY, SUFFICIENT), SUFFICIENCY, 0)
    return [{**base, "line": i, "id": f"q-{i}"} for i in range(1, n + 1)]


def test_row_groups_are_bounded(tmp_path):
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, numbered(25), row_group_rows=10)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 3
    assert [meta.row_group(i).num_rows for i in range(3)] == [10, 10, 5]


def test_row_groups_are_bounded_across_write_calls(tmp_path):
    path = tmp_path / "out.parquet"
    rows = numbered(25)
    with ParquetRows(path, result_schema(SufficiencyVerdict), row_group_rows=10) as out:
        out.write(rows[:7])
        out.write(iter(rows[7:]))
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [10, 10, 5]


def test_full_row_groups_are_written_as_they_fill(tmp_path):
    """Memory holds at most one row group: the writer does not wait for ``close``."""
    out = ParquetRows(tmp_path / "out.parquet", result_schema(SufficiencyVerdict), row_group_rows=10)
    out.write(numbered(25))
    assert out.rows_written == 20
    out.close()
    assert out.rows_written == 25


def test_parquet_rows_counts_from_the_footer(tmp_path):
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, numbered(25), row_group_rows=10)
    assert parquet_rows(path) == 25


def test_iter_parquet_reads_in_small_batches_in_order(tmp_path):
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, numbered(25), row_group_rows=10)
    assert [r["line"] for r in iter_parquet(path, batch_rows=4)] == list(range(1, 26))


def test_a_file_with_no_rows_has_the_schema(tmp_path):
    path = tmp_path / "out.parquet"
    assert write_rows(path, SUFFICIENCY, []) == []
    assert parquet_rows(path) == 0
    assert pq.read_schema(path).names == COLUMNS


def test_the_file_appears_only_on_close(tmp_path):
    path = tmp_path / "out.parquet"
    out = ParquetRows(path, result_schema(SufficiencyVerdict))
    out.write(numbered(3))
    assert not path.exists()
    out.close()
    assert path.exists()
    assert not (tmp_path / "out.parquet.tmp").exists()


def test_a_failure_inside_the_with_leaves_no_file_and_no_tmp(tmp_path):
    path = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError, match="boom"), ParquetRows(path, result_schema(SufficiencyVerdict)) as out:
        out.write(numbered(3))
        raise RuntimeError("boom")
    assert not path.exists()
    assert not (tmp_path / "out.parquet.tmp").exists()


def test_a_failure_leaves_the_previous_file_as_it_was(tmp_path):
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, numbered(2))
    with pytest.raises(RowError), ParquetRows(path, result_schema(SufficiencyVerdict), row_group_rows=2) as out:
        out.write([*numbered(4), {"bogus": 1}])
    assert parquet_rows(path) == 2
    assert not (tmp_path / "out.parquet.tmp").exists()


def test_writing_after_close_is_refused(tmp_path):
    out = ParquetRows(tmp_path / "out.parquet", result_schema(SufficiencyVerdict))
    out.close()
    with pytest.raises(ValueError, match="closed"):
        out.write(numbered(1))


def test_row_group_rows_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="row_group_rows"):
        ParquetRows(tmp_path / "out.parquet", result_schema(SufficiencyVerdict), row_group_rows=0)
    assert not (tmp_path / "out.parquet.tmp").exists()


# --- coerce_row -----------------------------------------------------------------------

SCHEMA = result_schema(SufficiencyVerdict)


def test_an_unknown_column_is_refused_by_name(tmp_path):
    row = {**numbered(1)[0], "fitting": {}}
    with pytest.raises(RowError, match=r"^fitting: is not a column") as caught:
        coerce_row(row, SCHEMA)
    assert caught.value.key == "fitting"


def test_an_unknown_verdict_field_is_refused_by_its_path():
    row = numbered(1)[0]
    row["verdict"]["Sufficient Context"] = True
    with pytest.raises(RowError, match=r"^verdict\.Sufficient Context: is not a field"):
        coerce_row(row, SCHEMA)


def test_an_unknown_key_inside_the_writer_is_refused_by_name(tmp_path):
    path = tmp_path / "out.parquet"
    with pytest.raises(RowError, match="model_is_sufficient"), ParquetRows(path, SCHEMA) as out:
        out.write([{**numbered(1)[0], "model_is_sufficient": True}])
    assert not path.exists()


def test_a_missing_required_column_is_refused():
    row = numbered(1)[0]
    del row["line"]
    with pytest.raises(RowError, match=r"^line: is required"):
        coerce_row(row, SCHEMA)


def test_a_missing_optional_column_is_null():
    row = numbered(1)[0]
    del row["error"]
    assert coerce_row(row, SCHEMA)["error"] is None


def test_a_value_of_the_wrong_type_is_refused_by_its_path():
    row = numbered(1)[0]
    row["verdict"]["confidence"] = "high"
    with pytest.raises(RowError, match=r"^verdict\.confidence: must be a number"):
        coerce_row(row, SCHEMA)


def test_an_int_is_a_string_only_where_the_model_allows_int_or_str():
    row = {**numbered(1)[0], "model": 3}
    with pytest.raises(RowError, match=r"^model: must be a string"):
        coerce_row(row, SCHEMA)


def test_a_bool_is_not_an_integer():
    with pytest.raises(RowError, match=r"^retries: must be an integer"):
        coerce_row({**numbered(1)[0], "retries": True}, SCHEMA)


def test_coerce_row_turns_chunk_ids_into_strings_and_maps_into_pairs():
    verdict = coerce_row(numbered(1)[0], SCHEMA)["verdict"]
    assert verdict["useful_chunk_ids"] == ["3", "doc-7"]
    assert verdict["coverage"] == [("Marie Curie", True), ("1903", True)]


def test_an_integral_float_field_takes_an_int():
    row = numbered(1)[0]
    row["verdict"]["confidence"] = 1
    confidence = coerce_row(row, SCHEMA)["verdict"]["confidence"]
    assert confidence == 1.0
    assert isinstance(confidence, float)


# --- any Parquet file -----------------------------------------------------------------


def test_iter_parquet_reads_any_file_with_maps_as_dicts(tmp_path):
    path = tmp_path / "other.parquet"
    schema = pa.schema(
        [
            ("n", pa.int32()),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("l", pa.list_(pa.struct([("inner", pa.map_(pa.string(), pa.string()))]))),
        ]
    )
    table = pa.Table.from_pylist(
        [{"n": 1, "m": [("a", 1), ("b", 2)], "l": [{"inner": [("k", "v")]}]}, {"n": 2, "m": None, "l": []}],
        schema=schema,
    )
    pq.write_table(table, path)
    assert list(iter_parquet(path, batch_rows=1)) == [
        {"n": 1, "m": {"a": 1, "b": 2}, "l": [{"inner": {"k": "v"}}]},
        {"n": 2, "m": None, "l": []},
    ]


def test_row_from_arrow_leaves_a_row_without_maps_alone():
    schema = pa.schema([("a", pa.list_(pa.int64()))])
    assert row_from_arrow({"a": [1, 2]}, schema) == {"a": [1, 2]}


def test_iter_parquet_refuses_a_zero_batch(tmp_path):
    path = tmp_path / "out.parquet"
    write_rows(path, SUFFICIENCY, numbered(1))
    with pytest.raises(ValueError, match="batch_rows"):
        next(iter_parquet(path, batch_rows=0))
