"""The adequacy seed's audit trail names the rubric: "Log every evaluation with the query hash, context chunk IDs,
rubric version, model response, and routing decision."  Each adequacy verdict written by ``suffice judge`` and
``suffice serve`` is read back from the log and from ``suffice audit export`` with the name and version of the rubric
that judged it (a record's own rubric over the run's), and the hash chain covers both columns.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from suffice.audit import AuditLog
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK
from suffice.gates.adequacy.store import RubricStore
from suffice.judge import Judge
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.adequacy import rubric_of
from tests.audit.test_routes_reach_a_person import CHUNK, QUESTION, adequacy
from tests.fakes import ScriptedEngine
from tests.prompts.test_seed_wording import SEEDS

RUN_RUBRIC = "clinical-guidance"
#: A record naming its own rubric: the row must name that one, not the run's.
OWN_RUBRIC = "legal-review"
RECORDS = [
    {"id": "run", "question": QUESTION, "chunks": [CHUNK]},
    {"id": "own", "question": QUESTION, "chunks": [CHUNK], "rubric": OWN_RUBRIC},
]
COLUMNS = ("rubric", "rubric_version")


def expected() -> dict[str, tuple[str, str, str]]:
    """Per record: the gate, and the name and version of the rubric the store gives for it."""
    store = RubricStore()
    return {
        r["id"]: ("adequacy", (rubric := store.get(r.get("rubric", RUN_RUBRIC))).name, rubric.version) for r in RECORDS
    }


def engine() -> ScriptedEngine:
    return ScriptedEngine(lambda request: adequacy("PROCEED_WITH_ANSWER", rubric=rubric_of(request)))


def by_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    source, db = tmp_path / "in.jsonl", tmp_path / "audit.db"
    source.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    scripted = engine()
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(scripted, config=config)))
    args = ["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress", "--gate", "adequacy"]
    assert main([*args, "--rubric", RUN_RUBRIC, "--audit-db", str(db)]) == EXIT_OK
    return db


def by_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "audit.db"
    config = ServeConfig(judge=JudgeConfig(gate="adequacy"), gates=("adequacy",), audit_db=db)
    service = GateService(config, engine())
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/adequacy", json={"items": RECORDS, "options": {"rubric": RUN_RUBRIC}})
    service.close()
    assert response.status_code == 200, response.text
    return db


ENTRY_POINTS = {"judge": by_judge, "serve": by_serve}


def logged(rows: list[dict]) -> dict[str, tuple[str, str, str]]:
    return {str(r["item_id"]): (r["gate"], r["rubric"], r["rubric_version"]) for r in rows}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_each_adequacy_row_names_its_rubric_and_version_in_the_log_and_its_export(tmp_path, monkeypatch, entry):
    db = ENTRY_POINTS[entry](tmp_path, monkeypatch)
    log = AuditLog(db)
    try:
        assert logged(list(log.rows())) == expected()
    finally:
        log.close()
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"export.{fmt}"
        assert main(["audit", "export", str(db), "--format", fmt, "-o", str(out)]) == EXIT_OK
        text = out.read_text(encoding="utf-8")
        rows = (
            [json.loads(line) for line in text.splitlines()]
            if fmt == "jsonl"
            else list(csv.DictReader(io.StringIO(text)))
        )
        assert logged(rows) == expected(), fmt


@pytest.mark.parametrize("column", COLUMNS)
def test_the_chain_covers_the_rubric_columns(tmp_path, monkeypatch, column):
    db = by_judge(tmp_path, monkeypatch)
    with sqlite3.connect(db) as con:
        con.execute(f"UPDATE evaluations SET {column} = 'altered' WHERE seq = 1")
    con.close()
    log = AuditLog(db)
    try:
        report = log.verify()
    finally:
        log.close()
    assert not report.ok and report.first_broken == 1


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seeds (../shared/seeds) are not beside this checkout")
def test_the_seed_asks_for_the_rubric_version_in_the_log():
    seed = " ".join((SEEDS / "context-adequacy-evaluation.md").read_text(encoding="utf-8").split())
    assert "Log every evaluation with the query hash, context chunk IDs, rubric version" in seed


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_each_adequacy_row_exports_every_criterion_judged(tmp_path, monkeypatch, entry):
    """The audit trail of a verdict holds each criterion of its rubric: the model's score and assessment, the
    criterion's text, whether it is critical and whether it was met, in the export's JSON Lines and CSV alike."""
    db = ENTRY_POINTS[entry](tmp_path, monkeypatch)
    store = RubricStore()
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"export.{fmt}"
        assert main(["audit", "export", str(db), "--format", fmt, "-o", str(out)]) == EXIT_OK
        text = out.read_text(encoding="utf-8")
        if fmt == "jsonl":
            verdicts = {str(r["item_id"]): r["verdict"] for r in map(json.loads, text.splitlines())}
        else:
            verdicts = {r["item_id"]: json.loads(r["verdict"]) for r in csv.DictReader(io.StringIO(text))}
        for record in RECORDS:
            rubric = store.get(record.get("rubric", RUN_RUBRIC))
            criteria = verdicts[record["id"]]["criteria"]
            assert [(c["criterion"], c["text"], c["critical"]) for c in criteria] == [
                (n, c.text, c.critical) for n, c in enumerate(rubric.criteria, 1)
            ], fmt
            assert all(set(c) >= {"score", "assessment", "met", "minimum"} for c in criteria), fmt
