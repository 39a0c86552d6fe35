import json
import sqlite3
import subprocess
import sys

import pytest

from suffice.exceptions import SufficeError
from suffice.harness.audit import AuditLog, weights_hash


def filled(path, n=4):
    log = AuditLog(path)
    for i in range(n):
        log.record(item_id=f"q{i}", gate="sufficiency", verdict={"is_sufficient": i % 2 == 0}, round=1, latency_ms=1.5)
    return log


def test_wal_mode_and_intact_chain(tmp_path):
    log = filled(tmp_path / "a.db")
    assert log._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    report = log.verify()
    assert report.ok and report.rows == 4


@pytest.mark.parametrize(
    ("sql", "broken"),
    [
        ("UPDATE evaluations SET decision = 'deliver' WHERE seq = 2", 2),
        ("UPDATE evaluations SET verdict = '{\"is_sufficient\": false}' WHERE seq = 3", 3),
        ("DELETE FROM evaluations WHERE seq = 2", 2),
        ("DELETE FROM evaluations WHERE seq = 4", 4),  # the last row: the chain head notices
        ("UPDATE evaluations SET latency_ms = 9 WHERE seq = 1", 1),
    ],
)
def test_any_edit_or_deletion_is_detected_and_named(tmp_path, sql, broken):
    path = tmp_path / "a.db"
    filled(path).close()
    with sqlite3.connect(path) as db:
        db.execute(sql)
    report = AuditLog(path).verify()
    assert not report.ok and report.first_broken == broken


def test_rewriting_a_row_and_its_hash_breaks_the_next_link(tmp_path):
    path = tmp_path / "a.db"
    log = filled(path)
    rows = list(log.rows())
    log.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE evaluations SET row_hash = ? WHERE seq = 2", ("f" * 64,))
    report = AuditLog(path).verify()
    assert not report.ok and report.first_broken in (2, 3)
    assert rows[1]["prev_hash"] == rows[0]["row_hash"]


def test_cli_verify_export_and_review_queue(tmp_path):
    path = tmp_path / "a.db"
    log = filled(path)
    rid = log.enqueue_review(item_id="q1", gate="adequacy", reason="budget spent", payload={"question": "?"})
    log.close()

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "suffice.cli.main", *args], capture_output=True, text=True)

    assert cli("audit", "verify", str(path)).returncode == 0
    out = tmp_path / "rows.jsonl"
    assert cli("audit", "export", str(path), "-o", str(out)).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["item_id"] for r in rows] == ["q0", "q1", "q2", "q3"] and rows[0]["verdict"] == {"is_sufficient": True}

    listed = cli("review", "list", "--db", str(path), "--json")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [rid]
    done = cli("review", "resolve", str(rid), "--decision", "unanswerable", "--by", "ada", "--db", str(path))
    assert done.returncode == 0
    again = cli("review", "resolve", str(rid), "--decision", "answer", "--by", "bob", "--db", str(path))
    assert again.returncode != 0 and "already resolved" in again.stderr
    [row] = AuditLog(path).reviews(None)
    assert row["status"] == "resolved" and row["resolved_by"] == "ada" and row["resolved_at"]

    with sqlite3.connect(path) as db:
        db.execute("UPDATE evaluations SET item_id = 'x' WHERE seq = 3")
    broken = cli("audit", "verify", str(path))
    assert broken.returncode == 4 and "row 3" in broken.stderr


def test_resolve_rejects_unknown_decisions_and_ids(tmp_path):
    log = AuditLog(tmp_path / "a.db")
    with pytest.raises(SufficeError, match="no such review"):
        log.resolve_review(99, decision="answer", by="ada")
    with pytest.raises(SufficeError, match="decision='maybe'"):
        log.resolve_review(1, decision="maybe", by="ada")


def test_weights_hash_changes_with_the_file_list(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    first = weights_hash(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"x" * 11)
    assert weights_hash(tmp_path) != first and weights_hash(None) is None


def test_a_killed_writer_leaves_a_database_that_verifies(tmp_path):
    path = tmp_path / "killed.db"
    script = (
        "import sys\n"
        "from suffice.harness.audit import AuditLog\n"
        "log = AuditLog(sys.argv[1])\n"
        "i = 0\n"
        "while True:\n"
        "    log.record(item_id=f'q{i}', gate='sufficiency', raw_output='x' * 500, round=1)\n"
        "    i += 1\n"
        "    if i == 50:\n"
        "        print('ready', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.kill()  # SIGKILL mid-run: no cleanup, no checkpoint
    proc.wait()
    report = AuditLog(path).verify()
    assert report.ok and report.rows >= 50
