"""What suffice writes to, or reads its own state from, is its user's own (issue 52): a verdict cache, an audit
database, a key or an output that another user made (planted empty, mode 0666, in a folder both can write) or that
others may write is refused with an error naming it, never used and filled with this user's records.  The neighbour
is a real second user (``useradd``, as tests/test_planted_links.py makes one); in CI not being able to make one
fails the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.audit import AuditLog, load_key, write_key_file
from suffice.cache import VerdictCache
from suffice.cli.main import main
from suffice.exceptions import EXIT_OK, AuditError, ConfigError
from tests.test_planted_links import _golden, _judge, _neighbour_uid, scripted_judge  # noqa: F401


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="suffice-shared-"))  # under /tmp: pytest's own folder is 0700
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def planted(folder: Path, name: str, mode: int = 0o666, data: bytes = b"") -> Path:
    """A file the neighbour made at ``name`` (empty, ``mode``)."""
    uid = _neighbour_uid()
    path = folder / name
    subprocess.run(["sh", "-c", f"umask 0; printf '' > {path}"], check=True, user=uid)
    if data:
        path.write_bytes(data)  # root writes the neighbour's file: its owner stays the neighbour
    os.chown(path, uid, -1)
    path.chmod(mode)
    return path


def test_a_verdict_cache_another_user_planted_is_refused(folder: Path):
    path = planted(folder, "verdicts.sqlite3")
    with pytest.raises(ConfigError, match="belongs to another user") as caught:
        VerdictCache(path)
    assert caught.value.parameter == "cache"
    assert path.read_bytes() == b""  # not made a cache, nothing of ours in it


def test_a_verdict_cache_of_ours_others_may_write_is_refused(folder: Path):
    path = folder / "verdicts.sqlite3"
    VerdictCache(path).close()
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="may be written by other users") as caught:
        VerdictCache(path)
    assert caught.value.parameter == "cache"


def test_an_audit_database_another_user_planted_is_refused(folder: Path, scripted_judge: None):  # noqa: F811
    db = planted(folder, "audit.sqlite")
    with pytest.raises(AuditError, match="belongs to another user"):
        AuditLog(db)
    source, out = _golden(folder), folder / "out.jsonl"
    assert _judge(source, out, "--audit-db", str(db)) != EXIT_OK
    assert db.read_bytes() == b""  # the neighbour reads no row of ours


def test_an_audit_key_another_user_owns_is_refused(folder: Path):
    key = folder / "audit.key"
    write_key_file(key)
    os.chown(key, _neighbour_uid(), -1)  # mode 0600, the neighbour's: they can read it and forge the log
    with pytest.raises(ConfigError, match="belongs to another user") as caught:
        load_key(key)
    assert caught.value.parameter == "audit_key"


def test_an_output_another_user_owns_is_not_resumed_into(folder: Path, scripted_judge: None):  # noqa: F811
    source = _golden(folder)
    line = json.dumps({"id": "planted", "verdict": None}) + "\n"
    out = planted(folder, "out.jsonl", data=line.encode())
    assert _judge(source, out) != EXIT_OK
    assert out.read_text() == line
    assert main(["audit", "keygen", "-o", str(folder / "fresh.key")]) == EXIT_OK  # a file of our own is fine
