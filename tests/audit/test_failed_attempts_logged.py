"""Every evaluation attempt is in the audit log (issue 48; the seeds' "log every evaluation attempt"): an output that
failed validation, and the retry that followed, leave the row of the record's result a ``retries`` count and an
``attempts`` list (each failed output's error and raw text), chained like every column, in ``suffice judge``'s and
``suffice serve``'s rows and in every format ``suffice audit export`` writes."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from suffice.audit import AuditLog, load_key
from suffice.audit.recording import TWO_FAILED_GENERATIONS
from suffice.audit.schema import EARLIER_FORMATS, JSON_COLUMNS
from suffice.batch import BatchOptions, judge_file
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK, EXIT_TAMPERED, AuditError, VerdictError
from suffice.judge import RETRY_NOTE, Judge
from suffice.results import ATTEMPT_ERROR_CHARS, ATTEMPT_TEXT_CHARS, FailedAttempt
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving.base import Generation, GenerationRequest
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.test_cascade import FULL, CascadeEngine
from tests.test_judge import GOOD, rec

#: The first output for the record ``once`` (it fails validation; the retry's is good).
FIRST = '{"is_sufficient": maybe'
#: The outputs for the record ``twice``: both fail validation.
BAD_1, BAD_2 = '{"not": "a verdict"', '{"still": "not one"}'
#: A line of the retry's prompt (the judge appends the validation error to it).
RETRIED = RETRY_NOTE.splitlines()[0].split(":")[0]


def script(request: GenerationRequest) -> str:
    """Good output for ``fine``; ``once`` fails its first generation; ``twice`` fails both."""
    content = request.messages[-1]["content"]
    retry = RETRIED in content
    if "first try fails" in content:
        return good(request) if retry else FIRST
    if "every try fails" in content:
        return BAD_2 if retry else BAD_1
    return good(request)


def records() -> list[dict[str, object]]:
    chunks = [{"id": 0, "text": "Ada wrote it."}]
    return [
        {"id": "fine", "question": "Who wrote it?", "chunks": chunks},
        {"id": "once", "question": "Who wrote it (the first try fails)?", "chunks": chunks},
        {"id": "twice", "question": "Who wrote it (every try fails)?", "chunks": chunks},
    ]


def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "audit.key"
    assert main(["audit", "keygen", "-o", str(path)]) == EXIT_OK
    return path


def run_batch(tmp_path: Path, key: Path | None = None) -> Path:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records()))
    db = tmp_path / "batch.db"
    engine = ScriptedEngine(script)
    options = BatchOptions(audit_db=db, audit_key=load_key(key) if key else None)
    judge_file(JudgeConfig(), source, tmp_path / "out.jsonl", options, open_judge=lambda c: Judge(engine, config=c))
    return db


def run_service(tmp_path: Path) -> Path:
    db = tmp_path / "serve.db"
    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",), audit_db=db)
    service = GateService(config, ScriptedEngine(script))
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    body = client.post("/v1/judge/sufficiency", json=records()).json()
    service.close()
    assert [r.get("error") is None for r in body["results"]] == [True, True, False]
    # A served answer's columns are fixed: the attempts are the audit log's.
    assert all("attempts" not in r for r in body["results"])
    return db


RUNS = {"judge": run_batch, "serve": run_service}


def rows_of(db: Path) -> dict[str, dict[str, Any]]:
    log = AuditLog(db)
    try:
        return {str(row["item_id"]): row for row in log.export_rows()}
    finally:
        log.close()


def check_rows(rows: dict[str, dict[str, Any]]) -> None:
    """One row per record; a failed output is on the row of the result it led to, with its error and raw text."""
    assert sorted(rows) == ["fine", "once", "twice"]
    fine, once, twice = rows["fine"], rows["once"], rows["twice"]
    assert (int(fine["retries"]), fine["attempts"]) == (0, [])

    assert int(once["retries"]) == 1 and once["decision"] != "error"
    assert once["raw_output"] == json.dumps(GOOD, separators=(",", ":"))
    [attempt] = once["attempts"]
    assert attempt["type"] == "VerdictError"
    assert attempt["message"]  # the validation error that sent it back
    assert (attempt["raw_text"], attempt["raw_chars"]) == (FIRST, len(FIRST))

    # Two failed generations: both outputs, in order; the second is the row's raw output and error too.
    assert int(twice["retries"]) == 1
    assert (twice["decision"], twice["rule"]) == ("error", TWO_FAILED_GENERATIONS)
    assert [a["raw_text"] for a in twice["attempts"]] == [BAD_1, BAD_2]
    assert [a["type"] for a in twice["attempts"]] == ["VerdictError", "VerdictError"]
    assert twice["raw_output"] == BAD_2
    assert twice["error"]["message"].startswith(twice["attempts"][1]["message"].rstrip("…"))


@pytest.mark.parametrize("entry", list(RUNS))
def test_a_failed_output_and_its_retry_are_on_the_records_row(tmp_path, entry):
    db = RUNS[entry](tmp_path)
    check_rows(rows_of(db))
    assert len(list(AuditLog(db).rows())) == 3  # a failed output is not a row of its own
    assert AuditLog(db).verify().ok


def test_a_batch_runs_output_rows_do_not_carry_the_attempts(tmp_path):
    run_batch(tmp_path)
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["retries"] for r in out] == [0, 1, 1]
    assert all("attempts" not in r for r in out)


def test_the_keyed_log_verifies_and_a_changed_attempt_is_tampering(tmp_path, capsys):
    key = key_file(tmp_path)
    db = run_batch(tmp_path, key)
    assert main(["audit", "verify", str(db), "--audit-key", str(key)]) == EXIT_OK
    seq = rows_of(db)["once"]["seq"]
    with sqlite3.connect(db) as con:
        stored = con.execute("SELECT attempts FROM evaluations WHERE seq = ?", (seq,)).fetchone()[0]
        # The failed output swapped for a harmless one, the JSON still well formed.
        con.execute("UPDATE evaluations SET attempts = ? WHERE seq = ?", (stored.replace("maybe", "true}"), seq))
    con.close()
    capsys.readouterr()
    assert main(["audit", "verify", str(db), "--audit-key", str(key)]) == EXIT_TAMPERED
    assert f"row {seq} was altered" in capsys.readouterr().err


@pytest.mark.parametrize(("column", "value"), [("attempts", "[]"), ("retries", 0)])
def test_dropping_the_trace_of_a_retry_is_tampering(tmp_path, column, value):
    key = key_file(tmp_path)
    db = run_batch(tmp_path, key)
    seq = rows_of(db)["once"]["seq"]
    with sqlite3.connect(db) as con:
        con.execute(f"UPDATE evaluations SET {column} = ? WHERE seq = ?", (value, seq))
    con.close()
    report = AuditLog(db, key=load_key(key)).verify()
    assert not report.ok and report.first_broken == seq


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_export_holds_the_retries_and_attempts(tmp_path, fmt):
    db = run_batch(tmp_path)
    out = tmp_path / f"rows.{fmt}"
    assert main(["audit", "export", str(db), "--format", fmt, "-o", str(out)]) == EXIT_OK
    text = out.read_text()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in text.splitlines()]
    else:
        table = list(csv.DictReader(io.StringIO(text, newline="")))
        assert {"retries", "attempts"} <= set(table[0])
        rows = [
            {k: json.loads(v) if k in (*JSON_COLUMNS, "reviews") and v else v or None for k, v in row.items()}
            for row in table
        ]
    check_rows({str(r["item_id"]): r for r in rows})


def test_a_cascades_row_holds_the_failed_outputs_of_both_passes():
    """``detail="auto"``: a record whose decision pass and full pass each failed once; its one row (the full
    verdict) counts both retries and holds both failed outputs, the decision pass's first."""

    class Flaky(CascadeEngine):
        def answer(self, request: GenerationRequest) -> str | Generation:
            content = request.messages[-1]["content"]
            if "Question 1?" in content and RETRIED not in content:
                return "{broken full" if request.constraint.matches(FULL) else "{broken decision"
            return super().answer(request)

    engine = Flaky({0: 0.95, 1: 0.2})
    judge = Judge(engine, config=JudgeConfig(detail="auto", cache=False))
    fine, flaky = judge.judge_batch([rec(0), rec(1)])
    assert (fine.retries, fine.attempts) == (0, ())
    assert flaky.ok and flaky.cascade is not None and flaky.cascade.detail == "full"
    assert flaky.retries == 2
    assert [a.raw_text for a in flaky.attempts] == ["{broken decision", "{broken full"]


def test_a_long_failed_output_is_kept_to_its_head_with_its_length():
    raw = "x" * (ATTEMPT_TEXT_CHARS * 3)
    attempt = FailedAttempt.from_exception(VerdictError("bad " * ATTEMPT_ERROR_CHARS, raw))
    # The model's text cut unmarked, its length kept; suffice's message marked where cut.
    assert attempt.raw_text == raw[:ATTEMPT_TEXT_CHARS]
    assert attempt.raw_chars == len(raw)
    assert attempt.message == ("bad " * ATTEMPT_ERROR_CHARS)[:ATTEMPT_ERROR_CHARS] + "…"


def test_a_format_6_log_is_refused_with_what_it_lacks(tmp_path):
    db = tmp_path / "a.db"
    AuditLog(db).close()
    with sqlite3.connect(db) as con:
        con.execute("UPDATE meta SET value = 'suffice-audit/6' WHERE key = 'format'")
    con.close()
    with pytest.raises(AuditError, match="suffice-audit/6: evaluation rows hold no retry count or failed outputs"):
        AuditLog(db)
    assert "suffice-audit/6" in EARLIER_FORMATS
