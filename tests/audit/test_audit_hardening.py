"""The audit log against its neighbours, for real: file modes of what it creates, key files others can read, and
rows removed by putting an older copy of the database back (caught only by the anchor each run writes)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from suffice.audit import AuditLog, load_key, save_anchor, write_key_file
from suffice.batch import BatchOptions, judge_file
from suffice.cli.audit_cmd import EXIT_TAMPERED
from suffice.cli.main import main
from suffice.exceptions import EXIT_OK, ConfigError
from tests.batch.test_runner import CONFIG, good, opener, record
from tests.fakes import ScriptedEngine


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_and_its_wal_are_the_owners_only(tmp_path, umask_022):
    db = tmp_path / "audit.db"
    log = AuditLog(db)
    log.record(item_id="q", gate="sufficiency", decision="deliver")
    log.enqueue_review(item_id="q", gate="sufficiency", reason="r", payload={"question": "private?"})
    assert _mode(db) == 0o600
    assert _mode(Path(f"{db}-wal")) == 0o600
    log.close()


def test_an_export_and_an_anchor_are_the_owners_only(tmp_path, umask_022):
    log = AuditLog(tmp_path / "audit.db")
    log.record(item_id="q", gate="sufficiency", decision="deliver")
    out, anchor = tmp_path / "rows.jsonl", tmp_path / "anchor.json"
    assert log.export(out) == 1
    save_anchor(log.anchor(), anchor)
    log.close()
    assert _mode(out) == 0o600
    assert _mode(anchor) == 0o600


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_key_file_others_may_read_is_refused_naming_chmod_600(tmp_path, mode):
    key = tmp_path / "audit.key"
    write_key_file(key)
    key.chmod(mode)
    with pytest.raises(ConfigError, match="chmod 600") as caught:
        load_key(key)
    assert caught.value.parameter == "audit_key"


def test_a_key_file_readable_by_its_owner_only_loads(tmp_path):
    key = tmp_path / "audit.key"
    write_key_file(key)
    assert _mode(key) == 0o600
    assert len(load_key(key)) == 32


def _judge(tmp_path: Path, first: int, options: BatchOptions) -> None:
    source = tmp_path / f"in{first}.jsonl"
    source.write_text("".join(json.dumps(record(i)) + "\n" for i in range(first, first + 2)))
    judge_file(CONFIG, source, tmp_path / f"out{first}.jsonl", options, open_judge=opener(ScriptedEngine(good)))


def test_each_run_anchors_the_log_so_a_restored_older_copy_fails_verification(tmp_path):
    """Rows deleted with their head put back as it was (an older copy restored) verify on their own; the anchor
    the last run wrote does not let them."""
    key_file, db, anchor = tmp_path / "audit.key", tmp_path / "audit.db", tmp_path / "safe" / "anchor.json"
    anchor.parent.mkdir()
    write_key_file(key_file)
    options = BatchOptions(audit_db=db, audit_key=load_key(key_file), anchor_file=anchor)
    _judge(tmp_path, 0, options)
    assert json.loads(anchor.read_text())["chains"]["evaluations"]["count"] == 2
    shutil.copy(db, tmp_path / "old.db")  # the WAL was checkpointed when the run closed the log
    _judge(tmp_path, 10, options)
    assert json.loads(anchor.read_text())["chains"]["evaluations"]["count"] == 4

    shutil.copy(tmp_path / "old.db", db)  # rows 3 and 4 gone, the head as it was before them
    assert main(["audit", "verify", str(db), "--audit-key", str(key_file)]) == EXIT_OK
    verdict = main(["audit", "verify", str(db), "--audit-key", str(key_file), "--anchor-file", str(anchor)])
    assert verdict == EXIT_TAMPERED


def test_an_anchor_file_needs_an_audit_db(tmp_path):
    with pytest.raises(ConfigError) as caught:
        BatchOptions(anchor_file=tmp_path / "anchor.json")
    assert caught.value.parameter == "anchor_file"
