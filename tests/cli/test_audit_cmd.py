"""``suffice audit keygen|anchor|verify`` and ``review resolve`` with a key, in-process."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
from pathlib import Path

import pytest

from suffice.audit import AuditLog, load_key
from suffice.audit.keys import key_id
from suffice.cli.audit_cmd import EXIT_TAMPERED, EXIT_UNKEYED
from suffice.cli.main import main
from suffice.exceptions import EXIT_OK, EXIT_USAGE, STATUS, ExportWriteError, Status
from tests.setup_or_fail import need


def sql(path: Path, *statements: str) -> None:
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)
    db.close()


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    path = tmp_path / "audit.key"
    assert main(["audit", "keygen", "-o", str(path)]) == EXIT_OK
    return path


@pytest.fixture
def db(tmp_path: Path, keyfile: Path) -> Path:
    """Four rows and one open review, chained with the key."""
    path = tmp_path / "audit.db"
    log = AuditLog(path, key=load_key(keyfile))
    for i in range(4):
        log.record(item_id=f"q{i}", gate="sufficiency", decision="deliver", round=1, latency_ms=i)
    log.enqueue_review(item_id="q1", gate="sufficiency", reason="budget spent", payload={"question": "?"})
    log.close()
    return path


def test_keygen_writes_a_0600_hex_key(keyfile):
    assert stat.S_IMODE(keyfile.stat().st_mode) == 0o600
    assert len(keyfile.read_text().strip()) == 64


def test_keygen_refuses_to_overwrite(keyfile, capsys):
    before = keyfile.read_text()
    assert main(["audit", "keygen", "-o", str(keyfile)]) == EXIT_USAGE
    assert "refusing to overwrite" in capsys.readouterr().err
    assert keyfile.read_text() == before


def test_verify_with_the_key(db, keyfile, capsys):
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile)]) == EXIT_OK
    assert "intact: 4 rows, 1 review events" in capsys.readouterr().out


def test_verify_a_keyed_database_without_the_key_is_a_usage_error(db, capsys):
    assert main(["audit", "verify", str(db)]) == EXIT_USAGE
    assert "audit_key" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "words"),
    [(None, "no such key file"), ("abcd", "2 bytes"), ("zz" * 32, "not a hex key")],
    ids=["missing", "short", "malformed"],
)
def test_a_bad_key_file_is_a_usage_error(db, tmp_path, capsys, content, words):
    bad = tmp_path / "bad.key"
    if content is not None:
        bad.write_text(content)
        bad.chmod(0o600)
    assert main(["audit", "verify", str(db), "--audit-key", str(bad)]) == EXIT_USAGE
    assert words in capsys.readouterr().err


def test_an_edited_row_is_named(db, keyfile, capsys):
    sql(db, "UPDATE evaluations SET item_id = 'x' WHERE seq = 3")
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile)]) == EXIT_TAMPERED
    assert "row 3 was altered" in capsys.readouterr().err


def test_anchor_then_truncation(db, keyfile, tmp_path, capsys):
    anchor = tmp_path / "anchor.json"
    assert main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)]) == EXIT_OK
    sql(db, "DELETE FROM evaluations WHERE seq >= 3")
    code = main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)])
    assert code == EXIT_TAMPERED
    assert "truncated: anchor has 4 rows, database has 2" in capsys.readouterr().err


def test_anchor_then_wipe(db, keyfile, tmp_path, capsys):
    anchor = tmp_path / "anchor.json"
    assert main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)]) == EXIT_OK
    sql(db, "DELETE FROM evaluations", "DELETE FROM chain_heads")
    code = main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)])
    assert code == EXIT_TAMPERED
    assert "truncated: anchor has 4 rows, database has 0" in capsys.readouterr().err


def test_an_intact_database_matches_its_anchor(db, keyfile, tmp_path, capsys):
    anchor = tmp_path / "anchor.json"
    main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)])
    code = main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)])
    assert code == EXIT_OK
    assert "all 4 anchored rows present and unchanged" in capsys.readouterr().out


def test_a_forged_anchor_is_reported(db, keyfile, tmp_path, capsys):
    anchor = tmp_path / "anchor.json"
    main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)])
    body = json.loads(anchor.read_text())
    body["chains"]["evaluations"]["count"] = 2
    anchor.write_text(json.dumps(body))
    code = main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)])
    assert code == EXIT_TAMPERED
    assert "the anchor is forged" in capsys.readouterr().err


def test_an_anchor_that_is_not_json_is_a_usage_error(db, keyfile, tmp_path, capsys):
    anchor = tmp_path / "anchor.json"
    anchor.write_text("{not json")
    code = main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)])
    assert code == EXIT_USAGE
    assert "not readable JSON" in capsys.readouterr().err


def test_a_broken_chain_is_not_anchored(db, keyfile, tmp_path, capsys):
    sql(db, "UPDATE evaluations SET decision = 'abstain' WHERE seq = 2")
    anchor = tmp_path / "anchor.json"
    assert main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)]) == EXIT_TAMPERED
    assert "refusing to anchor" in capsys.readouterr().err
    assert not anchor.exists()


def test_an_unkeyed_database_anchors_without_a_mac(tmp_path, capsys):
    path = tmp_path / "plain.db"
    AuditLog(path).record(item_id="q")
    anchor = tmp_path / "anchor.json"
    assert main(["audit", "anchor", str(path), "-o", str(anchor)]) == EXIT_OK
    assert "no MAC" in capsys.readouterr().err
    assert json.loads(anchor.read_text())["mac"] is None


def test_resolving_with_the_key_then_tampering_with_the_resolution(db, keyfile, capsys):
    resolve = ["review", "resolve", "1", "--decision", "unanswerable", "--by", "ada", "--audit-db", str(db)]
    assert main([*resolve, "--audit-key", str(keyfile)]) == EXIT_OK
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile)]) == EXIT_OK
    sql(db, "UPDATE reviews SET decision = 'answer' WHERE id = 1")
    capsys.readouterr()
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile)]) == EXIT_TAMPERED
    assert "review 1 was altered (decision" in capsys.readouterr().err


def test_resolving_a_keyed_database_without_the_key_fails(db, capsys):
    code = main(["review", "resolve", "1", "--decision", "answer", "--by", "ada", "--audit-db", str(db)])
    assert code != EXIT_OK
    assert "audit_key" in capsys.readouterr().err


def test_listing_and_exporting_need_no_key(db, tmp_path):
    assert main(["review", "list", "--audit-db", str(db)]) == EXIT_OK
    assert main(["audit", "export", str(db), "-o", str(tmp_path / "rows.jsonl")]) == EXIT_OK


def test_a_database_of_the_previous_format_is_a_usage_error(tmp_path, capsys):
    old = tmp_path / "old.db"
    sql(old, "CREATE TABLE evaluations (seq INTEGER PRIMARY KEY)", "CREATE TABLE chain_head (id INTEGER PRIMARY KEY)")
    assert main(["audit", "verify", str(old)]) == EXIT_USAGE
    assert "earlier suffice" in capsys.readouterr().err


def test_a_missing_database_is_not_created(tmp_path, capsys):
    missing = tmp_path / "nope.db"
    assert main(["audit", "verify", str(missing)]) == EXIT_USAGE
    assert not missing.exists()


def _log_with_rows(path: Path) -> None:
    log = AuditLog(path)
    log.record_many([{"gate": "sufficiency", "item_id": "a"}])
    log.close()


@pytest.mark.parametrize("command", ["anchor", "export"])
def test_an_output_onto_the_audit_database_is_refused_and_the_log_kept(tmp_path, command):
    db = tmp_path / "audit.db"
    _log_with_rows(db)
    assert main(["audit", command, str(db), "-o", str(db)]) == 2
    assert main(["audit", "verify", str(db)]) == EXIT_UNKEYED


def test_verify_refuses_an_empty_file_and_leaves_it_empty(tmp_path):
    db = tmp_path / "audit.db"
    db.write_bytes(b"")
    assert main(["audit", "verify", str(db)]) == 2
    assert db.read_bytes() == b""


def test_verify_of_a_file_that_is_not_a_database_is_a_usage_error_naming_it(tmp_path, capsys):
    db = tmp_path / "audit.db"
    db.write_text("not sqlite at all, " * 300)
    assert main(["audit", "verify", str(db)]) == 2
    assert "not an SQLite audit database" in capsys.readouterr().err


# -- damaged or altered logs read by export and review list ---------------------------------


def _damage_table(path: Path, table: str) -> None:
    """Overwrite the page type of ``table``'s root page: SQLite then reads the table as
    "database disk image is malformed" while the schema, and so opening, still works
    (a flipped byte on disk, a bad sector)."""
    with sqlite3.connect(path) as db:
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    assert not Path(f"{path}-wal").exists(), "every page is in the main file"
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\x00")


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A log whose evaluations and reviews tables are both damaged on disk."""
    path = tmp_path / "damaged.db"
    log = AuditLog(path)
    log.record_many([{"item_id": f"q{i}", "raw_output": "x" * 300, "round": 1} for i in range(100)])
    for i in range(30):
        log.enqueue_review(item_id=f"q{i}", gate="sufficiency", reason="r" * 200, payload={"i": i})
    log.close()
    _damage_table(path, "evaluations")
    _damage_table(path, "reviews")
    return path


def test_exporting_a_damaged_log_is_a_usage_error(damaged, tmp_path):
    assert main(["audit", "export", str(damaged), "-o", str(tmp_path / "rows.jsonl")]) == EXIT_USAGE


def test_exporting_a_damaged_log_names_it_as_damaged(damaged, tmp_path, capsys):
    main(["audit", "export", str(damaged), "-o", str(tmp_path / "rows.jsonl")])
    assert f"{damaged} cannot be used: it is not an SQLite audit database, or it is damaged" in capsys.readouterr().err


def test_listing_the_reviews_of_a_damaged_log_is_a_usage_error(damaged):
    assert main(["review", "list", "--audit-db", str(damaged)]) == EXIT_USAGE


def test_listing_the_reviews_of_a_damaged_log_names_it_as_damaged(damaged, capsys):
    main(["review", "list", "--audit-db", str(damaged)])
    assert f"{damaged} cannot be used: it is not an SQLite audit database, or it is damaged" in capsys.readouterr().err


def test_exporting_a_row_whose_json_cell_was_altered_is_a_usage_error(db, tmp_path):
    sql(db, "UPDATE evaluations SET scores = '{oops' WHERE seq = 2")
    assert main(["audit", "export", str(db), "-o", str(tmp_path / "rows.jsonl")]) == EXIT_USAGE


def test_exporting_a_row_whose_json_cell_was_altered_names_the_row_and_the_column(db, tmp_path, capsys):
    sql(db, "UPDATE evaluations SET scores = '{oops' WHERE seq = 2")
    main(["audit", "export", str(db), "-o", str(tmp_path / "rows.jsonl")])
    assert "row 2: scores is not JSON" in capsys.readouterr().err


def test_exporting_a_row_with_bytes_that_are_not_utf8_succeeds(db, tmp_path):
    sql(db, "UPDATE evaluations SET item_id = CAST(X'71ff' AS TEXT) WHERE seq = 2")
    assert main(["audit", "export", str(db), "-o", str(tmp_path / "rows.jsonl")]) == EXIT_OK


def test_exporting_a_row_with_bytes_that_are_not_utf8_writes_them_escaped(db, tmp_path):
    """The escape reads back as the text the log hands out for those bytes."""
    sql(db, "UPDATE evaluations SET item_id = CAST(X'71ff' AS TEXT) WHERE seq = 2")
    out = tmp_path / "rows.jsonl"
    main(["audit", "export", str(db), "-o", str(out)])
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows[1]["item_id"] == "q\udcff"


def test_exporting_into_a_missing_folder_is_a_usage_error(db, tmp_path):
    assert main(["audit", "export", str(db), "-o", str(tmp_path / "no" / "rows.jsonl")]) == EXIT_USAGE


def test_exporting_into_a_missing_folder_names_the_file(db, tmp_path, capsys):
    out = tmp_path / "no" / "rows.jsonl"
    main(["audit", "export", str(db), "-o", str(out)])
    assert f"cannot write {out}" in capsys.readouterr().err


def test_an_export_that_cannot_be_written_exits_with_the_tables_status(db, tmp_path, monkeypatch, capsys):
    """An export is written whole or not at all: its error's status is the table's (ExportWriteError), not the
    command's own."""
    monkeypatch.setitem(STATUS, ExportWriteError, Status(77, 500, "do this"))
    assert main(["audit", "export", str(db), "-o", str(tmp_path / "no" / "rows.jsonl")]) == 77
    assert "(do this)" in capsys.readouterr().err


def test_listing_a_review_whose_payload_was_altered_as_json_is_a_usage_error(db):
    sql(db, "UPDATE reviews SET payload = '{oops' WHERE id = 1")
    assert main(["review", "list", "--json", "--audit-db", str(db)]) == EXIT_USAGE


def test_listing_a_review_whose_payload_was_altered_as_json_names_the_review(db, capsys):
    sql(db, "UPDATE reviews SET payload = '{oops' WHERE id = 1")
    main(["review", "list", "--json", "--audit-db", str(db)])
    assert "review 1: payload is not JSON" in capsys.readouterr().err


def test_exporting_onto_a_full_disk_is_a_usage_error_naming_the_file(db, tmp_path, capsys, monkeypatch):
    """/dev/full answers every write with ENOSPC: a full disk, for real (the export's temporary is made a link
    to it once created)."""
    need(Path("/dev/full").exists(), "/dev/full is Linux's; this fault needs it")
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        os.close(fd)
        os.unlink(name)
        os.symlink("/dev/full", name)
        return os.open(name, os.O_WRONLY), name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    out = tmp_path / "rows.jsonl"
    assert main(["audit", "export", str(db), "-o", str(out)]) == EXIT_USAGE
    assert f"cannot write {out}: No space left on device" in capsys.readouterr().err


def test_anchoring_a_damaged_log_is_a_usage_error_as_verifying_it_is(damaged, tmp_path):
    """Damage is not tampering: verify says 2 for this file, so must anchor."""
    assert main(["audit", "anchor", str(damaged), "-o", str(tmp_path / "anchor.json")]) == EXIT_USAGE


def test_anchoring_a_damaged_log_names_it_as_damaged(damaged, tmp_path, capsys):
    main(["audit", "anchor", str(damaged), "-o", str(tmp_path / "anchor.json")])
    assert f"{damaged} cannot be used: it is not an SQLite audit database, or it is damaged" in capsys.readouterr().err


@pytest.fixture
def nameless(monkeypatch: pytest.MonkeyPatch) -> int:
    """This process as a container user often is: no login name in the environment and
    a uid the password database does not know, so getpass.getuser() fails for real."""
    import pwd

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    known = {entry.pw_uid for entry in pwd.getpwall()}
    uid = next(u for u in range(54321, 60000) if u not in known)
    monkeypatch.setattr("os.getuid", lambda: uid)
    return uid


def test_resolving_without_by_when_there_is_no_login_name_is_a_usage_error(db, keyfile, nameless):
    args = ["review", "resolve", "1", "--decision", "answer", "--audit-db", str(db), "--audit-key", str(keyfile)]
    assert main(args) == EXIT_USAGE


def test_resolving_without_by_when_there_is_no_login_name_asks_for_by(db, keyfile, nameless, capsys):
    main(["review", "resolve", "1", "--decision", "answer", "--audit-db", str(db), "--audit-key", str(keyfile)])
    assert "pass --by NAME" in capsys.readouterr().err


def test_resolving_without_by_when_there_is_no_login_name_leaves_the_review_open(db, keyfile, nameless):
    main(["review", "resolve", "1", "--decision", "answer", "--audit-db", str(db), "--audit-key", str(keyfile)])
    assert [r["id"] for r in AuditLog(db).reviews("open")] == [1]


def _rewrite_without_the_key(db: Path, *edits: str) -> None:
    """What a writer without the key can do to a keyed log: declare it unkeyed, run ``edits`` (SQL), and rechain
    every row, review event and head with plain SHA-256, which anyone can compute."""
    from suffice.audit.encoding import GENESIS, head_digest, row_digest
    from suffice.audit.schema import CHAINS

    with sqlite3.connect(db) as con:
        db_id = dict(con.execute("SELECT key, value FROM meta"))["db_id"]
        for edit in edits:
            con.execute(edit)
        con.execute("UPDATE meta SET value = 'sha256' WHERE key = 'mac'")
        con.execute("UPDATE meta SET value = '' WHERE key = 'key_id'")
        for chain in CHAINS:
            names = [name for name, _ in chain.columns]
            prev = GENESIS
            rows = con.execute(f"SELECT seq, {', '.join(names)} FROM {chain.table} ORDER BY seq").fetchall()
            for seq, *values in rows:
                digest = row_digest(None, chain.name, db_id, seq, prev, dict(zip(names, values, strict=True)))
                con.execute(f"UPDATE {chain.table} SET prev_hash = ?, row_hash = ? WHERE seq = ?", (prev, digest, seq))
                prev = digest
            mac = head_digest(None, chain.name, db_id, len(rows), prev)
            con.execute("UPDATE chain_heads SET last_hash = ?, mac = ? WHERE chain = ?", (prev, mac, chain.name))
    con.close()


def test_verify_without_the_key_says_it_cannot_verify(db, capsys):
    assert main(["audit", "verify", str(db)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "cannot verify" in err
    assert "intact" not in err


def test_a_keyed_log_rewritten_as_unkeyed_fails_verification_with_the_key(db, keyfile, capsys):
    _rewrite_without_the_key(db)
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile)]) == EXIT_TAMPERED
    assert "BROKEN" in capsys.readouterr().err


def test_a_keyed_log_rewritten_as_unkeyed_fails_against_its_anchor_even_without_the_key(db, keyfile, tmp_path):
    anchor = tmp_path / "anchor.json"
    assert main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)]) == EXIT_OK
    _rewrite_without_the_key(db)
    assert main(["audit", "verify", str(db), "--anchor-file", str(anchor)]) == EXIT_TAMPERED


#: The attack of issue 38: a verdict changed, the log downgraded to SHA-256 and rechained, without the key.
FORGED_VERDICT = "UPDATE evaluations SET decision = 'refuse' WHERE seq = 2"


def test_the_downgrade_attack_is_not_reported_intact_without_the_key(db, capsys):
    _rewrite_without_the_key(db, FORGED_VERDICT)
    assert [row["decision"] for row in AuditLog(db).rows()][1] == "refuse"  # the forged verdict is in the log
    assert main(["audit", "verify", str(db)]) == EXIT_UNKEYED
    out = capsys.readouterr().out
    assert out.startswith("unkeyed:") and not out.startswith("intact")
    assert "accidental edits only" in out
    assert "--expect-keyed" in out


def test_the_downgrade_attack_fails_with_expect_keyed(db, capsys):
    _rewrite_without_the_key(db, FORGED_VERDICT)
    assert main(["audit", "verify", str(db), "--expect-keyed"]) == EXIT_TAMPERED
    err = capsys.readouterr().err
    assert "BROKEN" in err and "downgrade" in err


def test_the_downgrade_attack_fails_with_the_key(db, keyfile, capsys):
    _rewrite_without_the_key(db, FORGED_VERDICT)
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile)]) == EXIT_TAMPERED
    assert "created without a key" in capsys.readouterr().err


def test_the_downgrade_attack_fails_against_the_runs_anchor_without_the_key(db, keyfile, tmp_path, capsys):
    anchor = tmp_path / "anchor.json"
    assert main(["audit", "anchor", str(db), "--audit-key", str(keyfile), "-o", str(anchor)]) == EXIT_OK
    saved = json.loads(anchor.read_text())
    assert (saved["chain_mac"], saved["key_id"]) == ("hmac-sha256", key_id(load_key(keyfile)))
    _rewrite_without_the_key(db, FORGED_VERDICT)
    assert main(["audit", "verify", str(db), "--anchor-file", str(anchor)]) == EXIT_TAMPERED
    err = capsys.readouterr().err
    assert "made for a keyed database" in err and saved["key_id"] in err


def test_an_intact_keyed_log_passes_expect_keyed_with_exit_0(db, keyfile, capsys):
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--expect-keyed"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("intact: 4 rows")


HOSTILE = "\x1b]0;owned\x07\u202egnp.exe\x9b31m\x7f"


def test_review_list_prints_hostile_ids_and_reasons_as_text(tmp_path, capsys):
    db = tmp_path / "audit.db"
    log = AuditLog(db)
    log.enqueue_review(item_id=HOSTILE, gate="sufficiency", reason=f"why {HOSTILE}", payload={})
    log.close()
    assert main(["review", "list", "--audit-db", str(db)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "\\x1b]0;owned\\x07\\u202egnp.exe\\x9b31m\\x7f" in out
    for raw in ("\x1b", "\x07", "\u202e", "\x9b", "\x7f"):
        assert raw not in out


def test_an_error_naming_a_hostile_path_prints_it_as_text(tmp_path, capsys):
    assert main(["audit", "verify", str(tmp_path / HOSTILE)]) != EXIT_OK
    err = capsys.readouterr().err
    assert "\\x1b]0;owned\\x07" in err
    assert "\x1b" not in err and "\u202e" not in err


def test_serve_writes_an_anchor_when_it_shuts_down(tmp_path, keyfile, monkeypatch):
    import suffice.server.run

    db, anchor = tmp_path / "serve.db", tmp_path / "anchor.json"

    def serve(config, notify):  # the service: records while it runs, then shuts down
        log = AuditLog(config.audit_db, key=config.audit_key)
        log.record(item_id="q", gate="sufficiency", decision="deliver")
        log.close()
        return EXIT_OK

    monkeypatch.setattr(suffice.server.run, "serve", serve)
    argv = ["serve", "--audit-db", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)]
    assert main(argv) == EXIT_OK
    assert json.loads(anchor.read_text())["chains"]["evaluations"]["count"] == 1
    assert main(["audit", "verify", str(db), "--audit-key", str(keyfile), "--anchor-file", str(anchor)]) == EXIT_OK
