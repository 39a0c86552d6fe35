"""``suffice review list|show|decide|export`` on an audit database, in-process: who decided, two reviewers, the
labels ``suffice calibrate`` reads, and the overrides per gate and rule."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from suffice.audit import AuditLog
from suffice.cli import calibrate_cmd
from suffice.cli.main import main
from suffice.exceptions import EXIT_FATAL, EXIT_OK, EXIT_USAGE, STATUS, ExportWriteError, Status
from suffice.gates import gate_class, roles
from suffice.records.lines import read_records

CHUNKS = [{"id": "d1", "text": "Ada wrote it.", "source": "a.txt", "score": None}, {"id": "d2", "text": "In 1843."}]


def payload(question: str, sufficient: bool, **extra: object) -> dict[str, object]:
    verdict = {"is_sufficient": sufficient, "confidence": 0.8}
    return {"question": question, "chunks": CHUNKS, "verdict": verdict, "rule": "model_escalated", **extra}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    log = AuditLog(path)
    log.enqueue_review(item_id="q1", gate="sufficiency", reason="r", payload=payload("Who wrote it?", True))
    log.enqueue_review(item_id="q2", gate="sufficiency", reason="r", payload=payload("When?", False))
    log.enqueue_review(
        item_id="q3", gate="sufficiency", reason="r", payload=payload("Why?", True, settings={"high_stakes": True})
    )
    log.enqueue_review(item_id="q4", gate="sufficiency", reason="two failed", payload={"raw_output": "{"})
    log.close()
    return path


def test_show_prints_the_question_the_context_and_the_rule(db, capsys):
    assert main(["review", "show", "1", "--audit-db", str(db)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "question: Who wrote it?" in out
    assert "chunk d1 (a.txt): Ada wrote it." in out
    assert "rule: model_escalated" in out


def test_decide_records_the_reviewer_and_the_corrected_label(db, capsys):
    args = ["review", "decide", "2", "--decision", "refine_retrieval", "--label", "sufficient", "--by", "ada"]
    assert main([*args, "--audit-db", str(db)]) == EXIT_OK
    assert "review 2 resolved by ada" in capsys.readouterr().out
    row = AuditLog(db).review(2)
    assert (row["resolved_by"], row["label"], row["decision"]) == ("ada", "sufficient", "refine_retrieval")


def test_decide_passes_the_queries_and_the_answer_and_refuses_one_for_another_decision(db, capsys):
    refine = ["review", "decide", "2", "--decision", "refine_retrieval", "--by", "ada", "--audit-db", str(db)]
    assert main([*refine, "--query", "when was it written", "--query", "Ada 1843", "--note", "undated"]) == EXIT_OK
    [entry] = json.loads(AuditLog(db).review(2)["decisions"])
    assert (entry["queries"], entry["note"]) == (["when was it written", "Ada 1843"], "undated")
    main(["review", "show", "2", "--audit-db", str(db)])
    assert "  query: Ada 1843" in capsys.readouterr().out
    answer = ["review", "decide", "1", "--decision", "answer", "--by", "ada", "--audit-db", str(db)]
    assert main([*answer, "--query", "Ada"]) == EXIT_USAGE
    assert "queries: only a 'refine_retrieval' decision" in capsys.readouterr().err
    assert AuditLog(db).review(1)["decisions"] == "[]"
    assert main([*answer, "--answer", "Ada Lovelace wrote it."]) == EXIT_OK
    assert json.loads(AuditLog(db).review(1)["decisions"])[0]["answer"] == "Ada Lovelace wrote it."


def test_two_reviewers_over_the_command_line(db, capsys):
    decide = ["review", "decide", "3", "--audit-db", str(db)]
    assert main([*decide, "--decision", "answer", "--by", "ada"]) == EXIT_OK
    assert "1 of 2 reviewers have decided" in capsys.readouterr().out
    assert main([*decide, "--decision", "answer", "--by", "ada"]) == EXIT_FATAL
    assert "ada decided it already" in capsys.readouterr().err
    main(["review", "list", "--audit-db", str(db)])
    assert "awaiting: 1 of 2 reviewers decided" in capsys.readouterr().out
    assert main([*decide, "--decision", "answer", "--by", "bob"]) == EXIT_OK
    assert "2 reviewers agree (ada, bob)" in capsys.readouterr().out


def test_labels_that_cannot_be_written_exit_with_the_tables_status(db, tmp_path, monkeypatch, capsys):
    """Labels are written whole or not at all: their error's status is the table's (ExportWriteError)."""
    main(["review", "decide", "--audit-db", str(db), "--by", "ada", "1", "--decision", "answer"])
    capsys.readouterr()
    monkeypatch.setitem(STATUS, ExportWriteError, Status(77, 500, "do this"))
    labels = tmp_path / "no" / "labels.jsonl"
    assert main(["review", "export", "--labels", str(labels), "--audit-db", str(db)]) == 77
    assert f"cannot write {labels}" in (err := capsys.readouterr().err) and "(do this)" in err


def test_export_writes_labels_calibrate_takes_and_counts_the_overrides(db, tmp_path, capsys):
    decide = ["review", "decide", "--audit-db", str(db), "--by", "ada"]
    main([*decide, "1", "--decision", "answer"])  # agrees with the machine
    main([*decide, "2", "--decision", "answer"])  # overrides it: the machine said insufficient
    main([*decide, "4", "--decision", "unanswerable"])  # no question to judge again: left out
    capsys.readouterr()
    labels = tmp_path / "labels.jsonl"
    assert main(["review", "export", "--labels", str(labels), "--audit-db", str(db)]) == EXIT_OK
    err = capsys.readouterr().err
    assert "2 labeled records written" in err
    assert "1 overrode the machine's label" in err
    assert "1 resolved reviews left out" in err
    assert "sufficiency    model_escalated                       2         1" in err
    assert stat.S_IMODE(labels.stat().st_mode) == 0o600
    records = [r for r in read_records(labels) if isinstance(r, dict)]
    assert [(r["id"], r["sufficient"], r["review"]["override"]) for r in records] == [
        ("q1", True, False),
        ("q2", True, True),
    ]
    # What calibrate checks before it judges, and the gate's own reading of each record.
    calibrate_cmd._check_labels(records, labels)  # raises for a record calibrate would refuse
    gate = gate_class("sufficiency")()
    for record in records:
        item = roles.parse_item(gate, record)
        assert [c.id for c in item.chunks] == ["d1", "d2"]


def test_list_json_parses_payloads_and_decisions(db, capsys):
    main(["review", "decide", "3", "--decision", "answer", "--by", "ada", "--audit-db", str(db)])
    capsys.readouterr()
    assert main(["review", "list", "--json", "--audit-db", str(db)]) == EXIT_OK
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["state"] == "awaiting" and rows[2]["decisions"][0]["by"] == "ada"
    assert rows[0]["payload"]["question"] == "Who wrote it?"
