"""The verdict cache (issue 41): a verdict is never paid twice, any change to what it depends on misses, a hit is
the identical row marked as a hit, and a damaged, foreign or shared cache never gives a wrong verdict."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import multiprocessing
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from suffice.cache import FORMAT, VerdictCache
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.judge import Judge
from suffice.rows.shaping import result_row
from suffice.serving.base import Generation, GenerationRequest
from tests.fakes import ScriptedEngine
from tests.test_judge import GOOD, good, rec


class CachedEngine(ScriptedEngine):
    """A scripted engine whose verdicts may be reused, as a local model folder's are."""

    cacheable = True


def judge_with(path: Path | str | bool | None, script=good, **config: object) -> tuple[Judge, CachedEngine]:
    engine = CachedEngine(script)
    return Judge(engine, config=JudgeConfig(cache=path, **config)), engine  # type: ignore[arg-type]


def rows(results, gate=None):
    gate = gate or SufficiencyGate()
    return [result_row(r, gate, "suffice", i + 1) for i, r in enumerate(results)]


def test_a_second_judging_of_the_same_records_calls_no_engine_and_gives_the_identical_rows(tmp_path):
    records = [rec(0), rec(1)]
    first, engine = judge_with(tmp_path / "c.sqlite3")
    before = first.judge_batch(records)
    assert engine.calls == [2]
    second, again = judge_with(tmp_path / "c.sqlite3")
    after = second.judge_batch(records)
    assert again.calls == []
    assert all(r.cached is not None and r.cached.first_judged for r in after)
    assert all(r.cached is None for r in before)
    stripped = [{k: v for k, v in row.items() if k != "cached"} for row in rows(after)]
    assert stripped == rows(before)
    assert second.stats.cache_hits == 2


def test_a_hit_keeps_the_new_records_id(tmp_path):
    judge, _ = judge_with(tmp_path / "c.sqlite3")
    judge.judge_batch([rec(0)])
    again, engine = judge_with(tmp_path / "c.sqlite3")
    (result,) = again.judge_batch([{**rec(0), "id": "another"}])
    assert engine.calls == [] and result.id == "another" and result.cached is not None


@pytest.mark.parametrize(
    "change",
    [
        {"record": {"question": "Question 0, reworded?"}},
        {"record": {"chunks": [{"id": 5, "text": "Ada wrote it, in 1843."}]}},
        {"config": {"detail": "decision"}},
        {"config": {"options": {"reasoning_chars": 100}}},
        {"config": {"max_question_tokens": 17}},
    ],
    ids=["question", "chunk", "detail", "gate-option", "fitting"],
)
def test_any_change_to_what_a_verdict_depends_on_misses(tmp_path, change):
    judge, _ = judge_with(tmp_path / "c.sqlite3")
    judge.judge_batch([rec(0)])

    def script(request: GenerationRequest) -> str | Generation:
        if request.constraint.matches(json.dumps(GOOD, separators=(",", ":"))):
            return good(request)
        # A decision-only verdict, with the decision token's log-probabilities as the engines report them.
        tokens = ('{"is_sufficient":', "true", "}")
        top = ({}, {"true": math.log(0.9), "false": math.log(0.1)}, {})
        return Generation('{"is_sufficient":true}', "stop", 10, 3, tokens=tokens, top_logprobs=top)

    changed, engine = judge_with(tmp_path / "c.sqlite3", script, **change.get("config", {}))
    (result,) = changed.judge_batch([{**rec(0), **change.get("record", {})}])
    assert result.error is None, result.error
    assert engine.calls == [1] and result.cached is None


def test_another_model_misses(tmp_path, monkeypatch):
    judge, _ = judge_with(tmp_path / "c.sqlite3")
    judge.judge_batch([rec(0)])
    monkeypatch.setattr(
        CachedEngine,
        "settings_of",
        classmethod(lambda cls, config: {"model": "other", "weights": "w2", "engine": "scripted", "backend": "x"}),
    )
    changed, engine = judge_with(tmp_path / "c.sqlite3")
    changed.judge_batch([rec(0)])
    assert engine.calls == [1]


def test_errors_are_never_cached(tmp_path):
    judge, _ = judge_with(tmp_path / "c.sqlite3", lambda request: "not json")
    (result,) = judge.judge_batch([rec(0)])
    assert result.error is not None
    again, engine = judge_with(tmp_path / "c.sqlite3")
    (result,) = again.judge_batch([rec(0)])
    assert engine.calls == [1] and result.verdict is not None and result.cached is None


def test_off_and_an_engine_whose_verdicts_cannot_be_reused_judge_every_time(tmp_path):
    for _ in range(2):
        judge, engine = judge_with(False)
        judge.judge_batch([rec(0)])
        assert engine.calls == [1] and judge.cache is None
    plain = ScriptedEngine(good)  # not cacheable: a script is not a weights fingerprint
    assert Judge(plain, config=JudgeConfig(cache=tmp_path / "c.sqlite3")).cache is None


def test_the_environment_turns_it_off_or_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SUFFICE_VERDICT_CACHE", "off")
    assert JudgeConfig().cache_path() is None
    monkeypatch.setenv("SUFFICE_VERDICT_CACHE", str(tmp_path / "env.sqlite3"))
    assert JudgeConfig().cache_path() == tmp_path / "env.sqlite3"
    monkeypatch.delenv("SUFFICE_VERDICT_CACHE")
    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path / "folder"))
    assert JudgeConfig().cache_path() == tmp_path / "folder" / "verdicts.sqlite3"  # on by default


def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path):
    path = tmp_path / "c.sqlite3"
    judge, _ = judge_with(path)
    judge.judge_batch([rec(0)])
    db = sqlite3.connect(path)
    value = json.loads(db.execute("SELECT value FROM verdicts").fetchone()[0])
    value["verdict"]["is_sufficient"] = False  # a wrong verdict planted under the right key
    db.execute("UPDATE verdicts SET value = ?", (json.dumps(value),))
    db.commit()
    db.close()
    again, engine = judge_with(path)
    (result,) = again.judge_batch([rec(0)])
    assert engine.calls == [1] and result.verdict.is_sufficient is True and result.cached is None
    third, engine = judge_with(path)
    (result,) = third.judge_batch([rec(0)])
    assert engine.calls == [] and result.verdict.is_sufficient is True


def test_a_forged_entry_with_its_digest_recomputed_is_a_miss_and_is_counted(tmp_path):
    """Key and value are in the row: whoever can write the file can recompute a plain hash of them, but not the
    MAC under the owner's secret (``c.sqlite3.key``, mode 0600)."""
    path = tmp_path / "c.sqlite3"
    judge, _ = judge_with(path)
    judge.judge_batch([rec(0)])
    assert stat.S_IMODE(path.with_name("c.sqlite3.key").stat().st_mode) == 0o600
    db = sqlite3.connect(path)
    key, raw = db.execute("SELECT key, value FROM verdicts").fetchone()
    value = json.loads(raw)
    value["verdict"]["is_sufficient"] = False
    forged = json.dumps(value)
    for digest in (
        hashlib.sha256(f"{key}\0{forged}".encode()).hexdigest(),
        hmac.new(b"guess", forged.encode(), "sha256").hexdigest(),
    ):
        db.execute("UPDATE verdicts SET value = ?, digest = ?", (forged, digest))
        db.commit()
        again, engine = judge_with(path)
        assert again.cache is not None
        before = again.cache.stats()["rejected"]
        (result,) = again.judge_batch([rec(0)])
        assert engine.calls == [1] and result.verdict.is_sufficient is True and result.cached is None
        assert again.cache.stats()["rejected"] == before + 1
    db.close()


def test_a_file_that_is_not_a_verdict_cache_is_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("my notes, not a database\n" * 100)
    with pytest.raises(ConfigError) as caught:
        VerdictCache(text)
    assert caught.value.parameter == "cache"
    assert text.read_text().startswith("my notes")
    other = tmp_path / "app.sqlite3"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="not a suffice-verdict-cache"):
        VerdictCache(other)
    newer = tmp_path / "newer.sqlite3"
    VerdictCache(newer).close()
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = 'suffice-verdict-cache/99' WHERE key = 'format'")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="suffice-verdict-cache/99"):
        VerdictCache(newer)


def test_a_planted_link_is_refused_and_a_new_file_is_owner_only(tmp_path):
    target = tmp_path / "victim"
    link = tmp_path / "c.sqlite3"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link"):
        VerdictCache(link)
    assert not target.exists()
    fresh = tmp_path / "fresh.sqlite3"
    VerdictCache(fresh).close()
    assert fresh.stat().st_mode & 0o777 == 0o600


def test_the_least_recently_used_verdicts_go_past_the_bound(tmp_path):
    path = tmp_path / "c.sqlite3"
    judge, _ = judge_with(path, cache_max_bytes=1 << 16)
    records = [rec(i, chunks=[{"id": 5, "text": f"Ada wrote it. {i} " + "x" * 2000}]) for i in range(150)]
    judge.judge_batch(records[:2])
    judge.judge_batch(records[2:])
    judge.judge_batch(records[:1])  # a hit: now recently used
    stats = judge.cache.stats()  # type: ignore[union-attr]
    assert stats["bytes"] <= 1 << 16 and 0 < stats["entries"] < 150
    again, engine = judge_with(path, cache_max_bytes=1 << 16)
    again.judge_batch(records[-1:])
    assert engine.calls == []  # the newest stayed
    again.judge_batch(records[1:2])
    assert engine.calls == [1]  # an old one went


def _fill(path: str, start: int) -> None:
    engine = CachedEngine(good)
    judge = Judge(engine, config=JudgeConfig(cache=path))
    for i in range(start, start + 20):
        judge.judge_batch([rec(i)])


def test_processes_sharing_one_cache_lose_nothing(tmp_path):
    path = str(tmp_path / "c.sqlite3")
    VerdictCache(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_fill, args=(path, start)) for start in (0, 20, 40)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert VerdictCache(path).stats()["entries"] == 60


def test_the_cache_command_reports_and_clears(tmp_path, capsys):
    path = tmp_path / "c.sqlite3"
    judge, _ = judge_with(path)
    judge.judge_batch([rec(0), rec(1)])
    judge.cache.close()  # type: ignore[union-attr]
    assert main(["cache", "stats", "--verdict-cache", str(path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["entries"] == 2 and stats["path"] == str(path)
    assert main(["cache", "clear", "--verdict-cache", str(path)]) == 0
    assert "removed 2" in capsys.readouterr().err
    assert main(["cache", "stats", "--verdict-cache", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_the_cache_file_records_its_format():
    assert FORMAT == "suffice-verdict-cache/1"


def test_judge_refuses_cache_and_no_cache_together(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(rec(0)) + "\n")
    flags = ["--verdict-cache", str(tmp_path / "c.sqlite3"), "--no-verdict-cache"]
    code = subprocess.run(
        [sys.executable, "-m", "suffice.cli.main", "judge", str(source), "-o", str(tmp_path / "o.jsonl"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert code.returncode == 2 and "--no-verdict-cache and --verdict-cache" in code.stderr


def test_a_batch_run_says_which_rows_came_from_the_cache_in_its_output_and_its_audit_log(tmp_path):
    from suffice.audit import AuditLog
    from suffice.batch import BatchOptions, judge_file

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(rec(i)) + "\n" for i in range(3)))
    config = JudgeConfig(cache=tmp_path / "c.sqlite3")
    engines: list[CachedEngine] = []

    def open_judge(config: JudgeConfig) -> Judge:
        engines.append(CachedEngine(good))
        return Judge(engines[-1], config=config)

    options = BatchOptions(audit_db=tmp_path / "audit.db")
    judge_file(config, source, tmp_path / "a.jsonl", options, open_judge=open_judge)
    judge_file(config, source, tmp_path / "b.jsonl", options, open_judge=open_judge)
    assert engines[0].calls == [3] and engines[1].calls == []
    first = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    second = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert all("cached" not in row for row in first)
    assert all(row.pop("cached")["first_judged"] for row in second)
    assert second == first
    log = AuditLog(tmp_path / "audit.db")
    marks = [row["cached_from"] for row in log.rows()]
    assert marks[:3] == [None] * 3 and all(marks[3:]) and len(marks) == 6
