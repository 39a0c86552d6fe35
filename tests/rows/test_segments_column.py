"""A recovery verdict's segments are a typed column of a Parquet output (issue 49): a list of structs that DuckDB or
Spark reads without parsing JSON, and a resumed run reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from suffice.cli.main import main
from suffice.exceptions import EXIT_OK
from suffice.judge import Judge
from tests.fakes import ScriptedEngine, recovery_reply

RECORD = {
    "id": "ada",
    "question": "Who wrote the notes?",
    "response": "Ada wrote the notes. She wrote them in 1843.",
    "chunks": [{"id": 0, "text": "Ada wrote the notes.", "source": "ada.txt"}],
}


def test_the_segments_are_a_list_of_structs_in_parquet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    source.write_text(json.dumps(RECORD) + "\n")
    engine = ScriptedEngine(lambda r: recovery_reply(r, lambda i, t: "unsupported" if "1843" in t else "supported"))
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(engine, config=config)))
    args = ["judge", str(source), "-o", str(out), "--no-progress", "--gate", "recovery"]
    assert main(args) == EXIT_OK
    table = pq.read_table(out)
    segments = table.schema.field("verdict").type.field("segments").type
    assert pa.types.is_list(segments) and pa.types.is_struct(segments.value_type)
    assert {f.name for f in segments.value_type} == {"index", "start", "end", "kind", "text", "label", "sources"}
    [row] = table.to_pylist()
    assert [(s["start"], s["end"], s["label"], s["sources"]) for s in row["verdict"]["segments"]] == [
        (0, 20, "supported", ["ada.txt"]),
        (21, 44, "unsupported", []),
    ]
    assert row["verdict"]["cited_answer"] == "Ada wrote the notes.[CITATION:ada.txt] She wrote them in 1843."
