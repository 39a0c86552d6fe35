"""The audit log: chains, keys, anchors, review chaining, canonical encoding.

Tampering comes in two strengths here.  *Naive* tampering edits the database with
SQL and leaves the hashes as they were; every kind is detected with and without
a key.  A *forger* also recomputes every hash and head with this module's own
(public) code but has no key; that is detected with a key or an anchor, and,
documented by a test below, not by a keyless chain alone.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suffice.audit import AuditLog, VerifyReport, key_id, load_key, write_key_file
from suffice.audit.encoding import GENESIS, canonical_json, head_digest, row_digest
from suffice.audit.recording import audit_values, weights_hash
from suffice.audit.schema import COLUMNS, EVALUATIONS, REVIEW_EVENTS, Chain
from suffice.exceptions import AuditError, ConfigError, SufficeError
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from suffice.records.item import Chunk, Item
from suffice.results import ErrorInfo, JudgeResult

KEY = bytes.fromhex("5a" * 32)
SETTINGS = {"gate": "sufficiency", "model": "m", "weights": "w"}


@pytest.fixture(params=[None, KEY], ids=["unkeyed", "keyed"])
def key(request: pytest.FixtureRequest) -> bytes | None:
    return request.param


def filled(path: Path, n: int = 4, key: bytes | None = None) -> AuditLog:
    log = AuditLog(path, key=key)
    for i in range(n):
        log.record(item_id=f"q{i}", gate="sufficiency", verdict={"is_sufficient": i % 2 == 0}, round=1, latency_ms=1.5)
    return log


def with_reviews(path: Path, key: bytes | None = None) -> None:
    """Four rows, two reviews, the first resolved: three review events."""
    log = filled(path, key=key)
    first = log.enqueue_review(item_id="q1", gate="sufficiency", reason="budget spent", payload={"q": "¿qué?"})
    log.enqueue_review(item_id="q2", gate="sufficiency", reason="gate asked", payload={}, evaluation_seq=2)
    log.resolve_review(first, decision="unanswerable", by="ada", note="no source")
    log.close()


def sql(path: Path, *statements: str) -> None:
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)
    db.close()


def verify(path: Path, key: bytes | None = None, anchor: dict | None = None) -> VerifyReport:
    log = AuditLog(path, key=key)
    try:
        return log.verify(anchor)
    finally:
        log.close()


def take_anchor(path: Path, key: bytes | None = None) -> dict:
    log = AuditLog(path, key=key)
    try:
        return log.anchor()
    finally:
        log.close()


def rechain(path: Path, start: int = 1, chain: Chain = EVALUATIONS) -> None:
    """What a forger with write access but no key does: recompute the hashes from row
    ``start`` on, and the head, with the module's own code (plain SHA-256: no key)."""
    names = [name for name, _ in chain.columns]
    with sqlite3.connect(path) as db:
        (db_id,) = db.execute("SELECT value FROM meta WHERE key = 'db_id'").fetchone()
        before = db.execute(f"SELECT seq, row_hash FROM {chain.table} WHERE seq < ? ORDER BY seq DESC", (start,))
        count, prev = before.fetchone() or (0, GENESIS)
        query = f"SELECT seq, {', '.join(names)} FROM {chain.table} WHERE seq >= ? ORDER BY seq"
        for seq, *values in db.execute(query, (start,)).fetchall():
            digest = row_digest(None, chain.name, db_id, seq, prev, dict(zip(names, values, strict=True)))
            db.execute(f"UPDATE {chain.table} SET prev_hash = ?, row_hash = ? WHERE seq = ?", (prev, digest, seq))
            prev, count = digest, seq
        db.execute(
            "INSERT OR REPLACE INTO chain_heads (chain, count, last_hash, mac) VALUES (?, ?, ?, ?)",
            (chain.name, count, prev, head_digest(None, chain.name, db_id, count, prev)),
        )
    db.close()


# -- intact databases ---------------------------------------------------------------------


def test_wal_mode_and_intact_chain(tmp_path, key):
    log = filled(tmp_path / "a.db", key=key)
    assert log._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    report = log.verify()
    assert report.ok
    assert report.rows == 4
    assert report.keyed is (key is not None)


def test_integer_latency_verifies_clean(tmp_path, key):
    """SQLite hands back 5.0 for a 5 stored as REAL: the hash must not care."""
    log = AuditLog(tmp_path / "a.db", key=key)
    log.record(item_id="q", latency_ms=5, round=2.0)
    log.close()
    assert verify(tmp_path / "a.db", key).ok


def test_values_of_any_type_verify_clean(tmp_path):
    log = AuditLog(tmp_path / "a.db")
    log.record(item_id=7, gate=True, scores={"p": 0.1 + 0.2, "n": None, "nan": float("nan")}, latency_ms=0.1 + 0.2)
    log.record(raw_output='naïve 中文 🙂 \x00 \\ "quoted"', chunks=[{"id": 3, "sha256": "ab"}], round=True)
    log.close()
    assert verify(tmp_path / "a.db").ok


def test_values_that_cannot_be_stored_exactly_are_refused(tmp_path):
    log = AuditLog(tmp_path / "a.db")
    with pytest.raises(AuditError, match="latency_ms"):
        log.record(latency_ms=float("nan"))  # SQLite would store NULL: the row could never verify
    with pytest.raises(AuditError, match="round"):
        log.record(round=1.5)
    with pytest.raises(AuditError, match="unknown audit columns"):
        log.record(colour="blue")
    assert log.verify().rows == 0


def test_canonical_json_writes_5_and_5_0_alike():
    assert canonical_json({"b": 5.0, "a": [1, None]}) == canonical_json({"a": [1, None], "b": 5})


def mixed_rows(n: int) -> list[dict]:
    """Verdicts and errors as the judge records them, plus raw rows with ints, floats,
    None and non-ASCII text."""
    item = Item(
        id="ü-1", question="Wer schrieb »Faust«? 誰が", chunks=(Chunk(0, "Goethe…", "de.wiki"), Chunk("c1", "x"))
    )
    verdict = SufficiencyVerdict(
        is_sufficient=True,
        required_entities=["Faust"],
        coverage={"Faust": True},
        missing_information=[],
        contradictions=[],
        confidence=1.0,
        reasoning="Der Text nennt Goethe ✓",
        useful_chunk_ids=[0],
        prompt_version="sufficiency/v2",
        p_sufficient=0.8125,
    )
    ok = JudgeResult(id="ü-1", gate="sufficiency", verdict=verdict, model="m", backend="outlines", prompt_version="v2")
    failed = JudgeResult(
        id="e-1",
        gate="sufficiency",
        error=ErrorInfo(type="VerdictError", message="bad JSON «»", raw_text='{"is_suff'),
        model="m",
        backend="outlines",
        prompt_version="v2",
    )
    rows = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            rows.append(
                audit_values(
                    SufficiencyGate(), ok, item, run_id="r", round=1, latency_ms=i, weights_hash=None, settings=SETTINGS
                )
            )
        elif kind == 1:
            rows.append(
                audit_values(
                    SufficiencyGate(),
                    failed,
                    None,
                    run_id="r",
                    round=2,
                    latency_ms=i / 7,
                    weights_hash="w",
                    settings=SETTINGS,
                )
            )
        elif kind == 2:
            rows.append({"item_id": i, "latency_ms": i, "round": 3, "scores": {"s": i / 3, "z": None}})
        else:
            rows.append({"item_id": f"ключ-{i}", "raw_output": None, "decision": "deliver", "latency_ms": None})
    return rows


def test_ten_thousand_mixed_rows_verify_clean_and_fast(tmp_path):
    rows = mixed_rows(10_000)
    started = time.perf_counter()
    log = AuditLog(tmp_path / "a.db", key=KEY)
    for start in range(0, len(rows), 2_500):  # batches, as the judge records them
        log.record_many(rows[start : start + 2_500])
    report = log.verify()
    elapsed = time.perf_counter() - started
    assert report.ok
    assert report.rows == 10_000
    assert elapsed < 10


def test_record_many_numbers_rows_in_order(tmp_path):
    log = filled(tmp_path / "a.db", n=2)
    assert log.record_many([{"item_id": "a"}, {"item_id": "b"}]) == [3, 4]


# -- naive tampering: detected with and without a key --------------------------------------


@pytest.mark.parametrize(
    ("statements", "broken"),
    [
        (["UPDATE evaluations SET decision = 'deliver' WHERE seq = 2"], 2),
        (["UPDATE evaluations SET verdict = '{\"is_sufficient\": false}' WHERE seq = 3"], 3),
        (["UPDATE evaluations SET latency_ms = 9 WHERE seq = 1"], 1),
        (["DELETE FROM evaluations WHERE seq = 2"], 2),  # a middle row
        (["DELETE FROM evaluations WHERE seq = 4"], 4),  # the last row: the head notices
        (["DELETE FROM evaluations WHERE seq >= 3", "UPDATE chain_heads SET count = 2 WHERE chain = 'evaluations'"], 2),
        (["DELETE FROM evaluations", "DELETE FROM chain_heads"], 1),  # a wipe of both tables
        (  # insert a row in the middle: later rows renumbered, a copy of row 2 put in at 3
            [
                "UPDATE evaluations SET seq = seq + 10 WHERE seq >= 3",
                "UPDATE evaluations SET seq = seq - 9 WHERE seq >= 13",
                f"INSERT INTO evaluations SELECT 3, {', '.join(COLUMNS)}, prev_hash, row_hash "
                "FROM evaluations WHERE seq = 2",
            ],
            3,
        ),
        (  # reorder: rows 2 and 3 swapped, each with its hashes
            [
                "UPDATE evaluations SET seq = -2 WHERE seq = 2",
                "UPDATE evaluations SET seq = 2 WHERE seq = 3",
                "UPDATE evaluations SET seq = 3 WHERE seq = -2",
            ],
            2,
        ),
        (["UPDATE evaluations SET row_hash = '" + "f" * 64 + "' WHERE seq = 2"], 2),
    ],
    ids=[
        "edit-decision",
        "edit-verdict",
        "edit-latency",
        "delete-middle",
        "delete-last",
        "delete-tail-fix-count",
        "wipe",
        "insert-middle",
        "reorder",
        "overwrite-hash",
    ],
)
def test_naive_tampering_is_detected_and_named(tmp_path, key, statements, broken):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    sql(path, *statements)
    report = verify(path, key)
    assert not report.ok
    assert report.first_broken == broken


def test_a_wipe_names_the_missing_head(tmp_path, key):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    sql(path, "DELETE FROM evaluations", "DELETE FROM chain_heads")
    assert "head is missing" in verify(path, key).reason


# -- a forger who recomputes every hash but has no key -------------------------------------


def rewrite_suffix(path: Path) -> None:
    sql(path, "UPDATE evaluations SET decision = 'deliver', item_id = 'other' WHERE seq >= 3")
    rechain(path, start=3)


def cut_tail_and_fix_head(path: Path) -> None:
    sql(path, "DELETE FROM evaluations WHERE seq >= 3")
    rechain(path, start=3)


def append_forged_row(path: Path) -> None:
    sql(
        path,
        "INSERT INTO evaluations (seq, ts, item_id, decision, prev_hash, row_hash) "
        "VALUES (5, 't', 'x', 'deliver', '', '')",
    )
    rechain(path, start=5)


def wipe_and_fix_head(path: Path) -> None:
    sql(path, "DELETE FROM evaluations")
    rechain(path)


FORGERIES = [rewrite_suffix, cut_tail_and_fix_head, append_forged_row, wipe_and_fix_head]


@pytest.mark.parametrize("forge", FORGERIES)
def test_a_forger_without_the_key_is_detected_with_it(tmp_path, forge):
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    forge(path)
    assert not verify(path, KEY).ok


@pytest.mark.parametrize("forge", FORGERIES)
def test_without_a_key_a_forger_who_recomputes_is_not_detected(tmp_path, forge):
    """The documented limit of a keyless chain: it catches accidents, not forgers."""
    path = tmp_path / "a.db"
    filled(path).close()
    forge(path)
    assert verify(path).ok


@pytest.mark.parametrize("forge", [rewrite_suffix, cut_tail_and_fix_head, wipe_and_fix_head])
def test_an_anchor_detects_a_forger_even_without_a_key(tmp_path, key, forge):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    anchor = take_anchor(path, key)
    forge(path)
    assert not verify(path, key, anchor).ok


def test_appending_after_a_forged_head_is_refused(tmp_path):
    """Extending a chain whose head was rewritten would seal the damage with a valid MAC."""
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    cut_tail_and_fix_head(path)
    log = AuditLog(path, key=KEY)
    with pytest.raises(AuditError, match="head does not verify"):
        log.record(item_id="next")


# -- anchors --------------------------------------------------------------------------------


def test_anchor_reports_truncation_with_both_counts(tmp_path, key):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    anchor = take_anchor(path, key)
    cut_tail_and_fix_head(path)
    report = verify(path, key, anchor)
    assert report.reason == "truncated: anchor has 4 rows, database has 2"
    assert report.first_broken == 3


def test_anchor_reports_a_wipe_as_truncation_to_zero(tmp_path, key):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    anchor = take_anchor(path, key)
    sql(path, "DELETE FROM evaluations", "DELETE FROM chain_heads")
    assert verify(path, key, anchor).reason == "truncated: anchor has 4 rows, database has 0"


def test_anchor_detects_a_database_recreated_from_scratch(tmp_path, key):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    anchor = take_anchor(path, key)
    for leftover in tmp_path.glob("a.db*"):
        leftover.unlink()
    filled(path, key=key).close()
    assert "another database" in verify(path, key, anchor).reason


def test_anchor_detects_truncated_review_events(tmp_path, key):
    path = tmp_path / "a.db"
    with_reviews(path, key)
    anchor = take_anchor(path, key)
    sql(
        path,
        "DELETE FROM review_events WHERE seq = 3",
        "UPDATE reviews SET status = 'open', decision = NULL, "
        "resolved_by = NULL, resolved_at = NULL, note = NULL WHERE id = 1",
    )
    rechain(path, start=3, chain=REVIEW_EVENTS)
    assert verify(path, key, anchor).reason == "truncated: anchor has 3 review events, database has 2"


def test_rows_appended_after_the_anchor_still_verify(tmp_path, key):
    path = tmp_path / "a.db"
    filled(path, key=key).close()
    anchor = take_anchor(path, key)
    filled(path, n=2, key=key).close()
    report = verify(path, key, anchor)
    assert report.ok
    assert report.rows == 6
    assert report.anchored_rows == 4


@pytest.mark.parametrize(
    "edit",
    [
        lambda a: a["chains"]["evaluations"].update(count=2),
        lambda a: a.update(mac="0" * 64),
        lambda a: a.pop("mac"),
        lambda a: a.update(keyed=False, mac=None),
    ],
    ids=["count-lowered", "mac-replaced", "mac-removed", "claims-no-key"],
)
def test_a_forged_anchor_is_reported(tmp_path, edit):
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    anchor = take_anchor(path, KEY)
    edit(anchor)
    report = verify(path, KEY, anchor)
    assert report.reason == "the anchor is forged: its MAC does not verify with this key"
    assert report.part == "anchor"


def test_an_anchor_made_with_another_key_is_forged(tmp_path):
    other = tmp_path / "b.db"
    filled(other, key=bytes(32)).close()
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    assert "forged" in verify(path, KEY, take_anchor(other, bytes(32))).reason


def test_an_unkeyed_database_rejects_a_keyed_anchor(tmp_path):
    keyed = tmp_path / "k.db"
    filled(keyed, key=KEY).close()
    path = tmp_path / "a.db"
    filled(path).close()
    assert "made for a keyed database" in verify(path, None, take_anchor(keyed, KEY)).reason


def test_an_unkeyed_anchor_has_no_mac(tmp_path):
    path = tmp_path / "a.db"
    filled(path).close()
    assert take_anchor(path)["mac"] is None


def test_a_broken_chain_is_not_anchored(tmp_path):
    path = tmp_path / "a.db"
    filled(path).close()
    sql(path, "UPDATE evaluations SET decision = 'deliver' WHERE seq = 2")
    with pytest.raises(AuditError, match="refusing to anchor"):
        take_anchor(path)


# -- the review queue is chained -----------------------------------------------------------


def test_reviews_are_chained_as_events(tmp_path, key):
    path = tmp_path / "a.db"
    with_reviews(path, key)
    report = verify(path, key)
    assert report.ok
    assert report.review_events == 3


@pytest.mark.parametrize(
    ("statement", "part", "words"),
    [
        ("UPDATE reviews SET decision = 'answer' WHERE id = 1", "reviews", "review 1 was altered (decision"),
        ("UPDATE reviews SET resolved_by = 'mallory' WHERE id = 1", "reviews", "resolved_by"),
        ("UPDATE reviews SET status = 'resolved', decision = 'answer' WHERE id = 2", "reviews", "review 2"),
        ("DELETE FROM reviews WHERE id = 2", "reviews", "review 2 was deleted"),
        ("DELETE FROM reviews WHERE id = 1", "reviews", "review 1 was deleted"),
        ("INSERT INTO reviews (id, created_at, payload) VALUES (9, 't', '{}')", "reviews", "review 9 is not in"),
        ("UPDATE review_events SET data = replace(data, 'ada', 'bob') WHERE seq = 3", "review_events", "event 3"),
        ("DELETE FROM review_events WHERE seq = 2", "review_events", "review event 2 is missing"),
    ],
    ids=["resolution", "reviewer", "resolve-open", "delete", "delete-first", "insert", "event-edit", "event-delete"],
)
def test_tampering_with_reviews_is_detected(tmp_path, key, statement, part, words):
    path = tmp_path / "a.db"
    with_reviews(path, key)
    sql(path, statement)
    report = verify(path, key)
    assert report.part == part
    assert words in report.reason


def test_of_two_altered_reviews_the_lower_is_reported(tmp_path, key):
    path = tmp_path / "a.db"
    with_reviews(path, key)
    sql(path, "UPDATE reviews SET reason = 'x' WHERE id = 2", "UPDATE reviews SET note = 'x' WHERE id = 1")
    assert verify(path, key).first_broken == 1


def test_many_reviews_verify_against_their_events(tmp_path, key):
    log = AuditLog(tmp_path / "a.db", key=key)
    ids = [log.enqueue_review(item_id=f"q{i}", gate="sufficiency", reason="r", payload={"i": i}) for i in range(50)]
    for review_id in ids[::3]:
        log.resolve_review(review_id, decision="answer", by="ada")
    report = log.verify()
    log.close()
    assert report.ok


def test_a_forged_resolution_is_detected_with_the_key(tmp_path):
    path = tmp_path / "a.db"
    with_reviews(path, KEY)
    sql(
        path,
        "UPDATE reviews SET decision = 'answer' WHERE id = 1",
        "UPDATE review_events SET data = replace(data, 'unanswerable', 'answer') WHERE seq = 3",
    )
    rechain(path, start=3, chain=REVIEW_EVENTS)
    report = verify(path, KEY)
    assert report.part == "review_events"
    assert not report.ok


def test_resolve_rejects_unknown_decisions_and_ids(tmp_path):
    log = AuditLog(tmp_path / "a.db")
    with pytest.raises(SufficeError, match="no such review"):
        log.resolve_review(99, decision="answer", by="ada")
    with pytest.raises(SufficeError, match="decision='maybe'"):
        log.resolve_review(1, decision="maybe", by="ada")
    assert log.verify().review_events == 0


def test_resolving_twice_leaves_one_event(tmp_path):
    path = tmp_path / "a.db"
    with_reviews(path)
    log = AuditLog(path)
    with pytest.raises(SufficeError, match="already resolved"):
        log.resolve_review(1, decision="answer", by="bob")
    assert log.verify().review_events == 3


# -- keys -----------------------------------------------------------------------------------


def test_keygen_writes_a_private_key_and_never_overwrites(tmp_path):
    path = tmp_path / "audit.key"
    kid = write_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key_id(load_key(path)) == kid
    assert len(load_key(path)) == 32
    before = path.read_text()
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        write_key_file(path)
    assert path.read_text() == before


@pytest.mark.parametrize(
    ("content", "words"),
    [(None, "no such key file"), ("ab" * 16, "16 bytes"), ("not hex at all", "not a hex key"), ("", "0 bytes")],
    ids=["missing", "short", "malformed", "empty"],
)
def test_a_bad_key_file_names_audit_key(tmp_path, content, words):
    path = tmp_path / "audit.key"
    if content is not None:
        path.write_text(content)
        path.chmod(0o600)
    with pytest.raises(ConfigError, match=words) as info:
        load_key(path)
    assert info.value.parameter == "audit_key"


def test_a_keyed_database_needs_its_key_to_write_or_verify(tmp_path):
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    log = AuditLog(path)  # reading is fine
    assert len(list(log.rows())) == 4
    with pytest.raises(ConfigError, match="audit_key"):
        log.record(item_id="x")
    with pytest.raises(ConfigError, match="audit_key"):
        log.verify()
    with pytest.raises(ConfigError, match="audit_key"):
        log.enqueue_review(item_id="x", gate="g", reason="r", payload={})


def test_the_wrong_key_is_refused_for_writing(tmp_path):
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    with pytest.raises(ConfigError, match="is not the key"):
        AuditLog(path, key=bytes(32)).record(item_id="x")


def test_the_wrong_key_fails_verification(tmp_path):
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    assert AuditLog(path, key=bytes(32)).verify().ok is False


def test_a_key_cannot_be_added_to_an_unkeyed_database(tmp_path):
    path = tmp_path / "a.db"
    filled(path).close()
    with pytest.raises(ConfigError, match="created without a key"):
        AuditLog(path, key=KEY).record(item_id="x")


def test_a_short_key_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        AuditLog(tmp_path / "a.db", key=b"short")


def test_downgrading_a_keyed_database_to_sha256_is_caught_by_the_key(tmp_path):
    path = tmp_path / "a.db"
    filled(path, key=KEY).close()
    sql(path, "UPDATE meta SET value = 'sha256' WHERE key = 'mac'")
    sql(path, "UPDATE meta SET value = '' WHERE key = 'key_id'")
    rewrite_suffix(path)
    report = AuditLog(path, key=KEY).verify()
    assert report.reason is not None
    assert "without a key" in report.reason


def test_a_non_ascii_hash_is_reported_not_a_crash(tmp_path):
    path = tmp_path / "a.db"
    filled(path).close()
    sql(path, "UPDATE evaluations SET row_hash = 'é' WHERE seq = 1")
    assert AuditLog(path).verify().ok is False


def test_a_lone_surrogate_in_an_id_is_recorded_and_verifies(tmp_path):
    log = AuditLog(tmp_path / "a.db", key=KEY)
    log.record(item_id="x\ud800", verdict={"reasoning": "y\udfff"})
    assert log.verify().ok is True


# -- older databases ------------------------------------------------------------------------


def test_a_database_of_the_previous_format_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "old.db"
    sql(
        path,
        "CREATE TABLE evaluations (seq INTEGER PRIMARY KEY, ts TEXT, prev_hash TEXT, row_hash TEXT)",
        "CREATE TABLE chain_head (id INTEGER PRIMARY KEY, count INTEGER, last_hash TEXT)",
    )
    with pytest.raises(AuditError, match="earlier suffice"):
        AuditLog(path)


# -- the rest ---------------------------------------------------------------------------------


def test_cli_verify_export_and_review_queue(tmp_path):
    path = tmp_path / "a.db"
    log = filled(path)
    rid = log.enqueue_review(item_id="q1", gate="adequacy", reason="budget spent", payload={"question": "?"})
    log.close()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "suffice.cli.main", *args], capture_output=True, text=True)

    assert cli("audit", "verify", str(path)).returncode == 5  # intact, but unkeyed: accidental edits only
    out = tmp_path / "rows.jsonl"
    assert cli("audit", "export", str(path), "-o", str(out)).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["item_id"] for r in rows] == ["q0", "q1", "q2", "q3"]
    assert rows[0]["verdict"] == {"is_sufficient": True}

    listed = cli("review", "list", "--audit-db", str(path), "--json")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [rid]
    done = cli("review", "resolve", str(rid), "--decision", "unanswerable", "--by", "ada", "--audit-db", str(path))
    assert done.returncode == 0
    again = cli("review", "resolve", str(rid), "--decision", "answer", "--by", "bob", "--audit-db", str(path))
    assert again.returncode != 0
    assert "already resolved" in again.stderr
    [row] = AuditLog(path).reviews(None)
    assert row["status"] == "resolved"
    assert row["resolved_by"] == "ada"
    assert row["resolved_at"]


def test_weights_hash_changes_with_the_file_list(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    first = weights_hash(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"x" * 11)
    assert weights_hash(tmp_path) != first
    assert weights_hash(None) is None


def test_a_killed_writer_leaves_a_database_that_verifies(tmp_path):
    path = tmp_path / "killed.db"
    script = (
        "import sys\n"
        "from suffice.audit import AuditLog\n"
        "log = AuditLog(sys.argv[1], key=bytes.fromhex(sys.argv[2]))\n"
        "i = 0\n"
        "while True:\n"
        "    log.record(item_id=f'q{i}', gate='sufficiency', raw_output='x' * 500, round=1)\n"
        "    if i % 10 == 0:\n"
        "        log.enqueue_review(item_id=f'q{i}', gate='sufficiency', reason='r', payload={'i': i})\n"
        "    i += 1\n"
        "    if i == 50:\n"
        "        print('ready', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(path), KEY.hex()], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.kill()  # SIGKILL mid-run: no cleanup, no checkpoint
    proc.wait()
    report = verify(path, KEY)
    assert report.ok
    assert report.rows >= 50


def test_a_folder_given_as_the_log_is_an_audit_error_naming_it(tmp_path):
    """sqlite3's own OperationalError ("unable to open database file") came out."""
    with pytest.raises(AuditError, match=str(tmp_path)):
        AuditLog(tmp_path)


def test_a_log_under_a_file_is_an_audit_error(tmp_path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(AuditError):
        AuditLog(tmp_path / "plain" / "audit.db")


def test_a_log_opened_to_be_read_is_not_created(tmp_path):
    missing = tmp_path / "typo" / "audit.db"
    with pytest.raises(AuditError):
        AuditLog(missing, create=False)
    assert not (tmp_path / "typo").exists()
