"""A record that kills the engine every time it is judged (issue 9's poison record),
on a scripted engine that dies whenever that record is in its batch: the run must
become finishable, with one error row for that record and verdicts for the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.batch.suspects import suspects_path
from suffice.config import JudgeConfig
from suffice.exceptions import EngineDeadError, EngineUnreachableError
from suffice.judge import Judge
from suffice.rows.shaping import ENGINE_CRASH
from tests.batch.test_runner import good, record, rows, write_lines
from tests.fakes import ScriptedEngine

POISON = "Who wrote 5?"


class Dying(ScriptedEngine):
    """Dies (EngineDeadError) whenever the poison record is in the batch it is given."""

    def __init__(self) -> None:
        super().__init__(good)
        self.batches: list[int] = []

    def generate(self, requests, progress=None, cancel=None):  # type: ignore[no-untyped-def]
        self.batches.append(len(requests))
        if any(POISON in r.messages[-1]["content"] for r in requests):
            raise EngineDeadError("the engine process 1234 exited (scripted)")
        return super().generate(requests, progress, cancel)


def _run(source: Path, out: Path, engine: Dying, **options: object):
    return judge_file(
        JudgeConfig(),
        source,
        out,
        BatchOptions(batch_size=4, **options),  # type: ignore[arg-type]
        open_judge=lambda config: Judge(engine, config=config),
    )


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(12)])
    return source, out


def _ids(out: Path) -> list[str]:
    return [str(row["id"]) for row in rows(out)]


def test_the_first_death_keeps_the_rows_before_it_and_notes_the_batch(files):
    source, out = files
    with pytest.raises(EngineDeadError):
        _run(source, out, Dying())
    assert _ids(out) == ["r0", "r1", "r2", "r3"]
    noted = json.loads(suspects_path(out).read_text())
    assert noted["suspects"] == ["i:r4", "i:r5", "i:r6", "i:r7"]


def test_the_rerun_judges_the_suspects_alone_and_finds_the_culprit(files):
    source, out = files
    with pytest.raises(EngineDeadError):
        _run(source, out, Dying())
    engine = Dying()
    with pytest.raises(EngineDeadError):
        _run(source, out, engine)
    assert engine.batches == [1, 1]  # r4 alone (a verdict), then r5 alone (dies)
    noted = json.loads(suspects_path(out).read_text())
    assert noted["culprits"] == ["i:r5"]


def test_the_third_run_finishes_with_one_error_row_for_the_culprit(files):
    source, out = files
    for _ in range(2):
        with pytest.raises(EngineDeadError):
            _run(source, out, Dying())
    report = _run(source, out, Dying())
    assert report.errors == 1
    assert _ids(out) == [f"r{i}" for i in range(12)]
    errors = {row["id"]: row["error"]["type"] for row in rows(out) if row["error"] is not None}
    assert errors == {"r5": ENGINE_CRASH}
    assert not suspects_path(out).exists()


def test_retry_errors_judges_the_culprit_again(files):
    source, out = files
    for _ in range(2):
        with pytest.raises(EngineDeadError):
            _run(source, out, Dying())
    _run(source, out, Dying())
    engine = Dying()
    with pytest.raises(EngineDeadError):
        _run(source, out, engine, retry_errors=True)
    assert engine.batches == [1]


def test_overwrite_forgets_the_suspects(files):
    source, out = files
    with pytest.raises(EngineDeadError):
        _run(source, out, Dying())
    engine = Dying()
    with pytest.raises(EngineDeadError):
        _run(source, out, engine, overwrite=True)
    assert engine.batches == [4, 4]  # r0-r3, then the batch with r5: not alone


def test_an_engine_that_never_started_implicates_no_record(files):
    source, out = files

    def refuse(config: JudgeConfig) -> Judge:
        raise EngineDeadError("the engine process 99 exited while loading (scripted)")

    with pytest.raises(EngineDeadError):
        judge_file(JudgeConfig(), source, out, BatchOptions(batch_size=4), open_judge=refuse)
    assert not suspects_path(out).exists()


class Unreachable(Dying):
    """A server that goes away while the poison's batch is in flight: not its fault."""

    def generate(self, requests, progress=None, cancel=None):  # type: ignore[no-untyped-def]
        if any(POISON in r.messages[-1]["content"] for r in requests):
            raise EngineUnreachableError("the server at http://x cannot be reached (scripted)")
        return super().generate(requests, progress, cancel)


def test_a_server_that_went_away_implicates_no_record(files):
    source, out = files
    with pytest.raises(EngineUnreachableError):
        _run(source, out, Unreachable())
    assert _ids(out) == ["r0", "r1", "r2", "r3"]
    assert not suspects_path(out).exists()


def test_a_suspect_no_longer_in_the_input_is_forgotten(files, tmp_path):
    source, out = files
    with pytest.raises(EngineDeadError):
        _run(source, out, Dying())
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])  # r4-r7 gone
    _run(source, out, Dying())
    assert not suspects_path(out).exists()


class Recording(Dying):
    """:class:`Dying`, keeping the questions it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[str] = []

    def generate(self, requests, progress=None, cancel=None):  # type: ignore[no-untyped-def]
        self.prompts += [r.messages[-1]["content"] for r in requests]
        return super().generate(requests, progress, cancel)


def _traces(count: int, skip: int | None = None) -> list[bytes]:
    """RAGAS traces without ids (keyed by position); ``skip``: the one the user deleted."""
    return [
        json.dumps({"user_input": f"Who wrote {i}?", "retrieved_contexts": ["Ada wrote it."]}).encode()
        for i in range(count)
        if i != skip
    ]


@pytest.fixture
def culprit_deleted(tmp_path: Path) -> tuple[Path, Path]:
    """Trace 5 (line 6) stopped the engine alone (noted as the culprit at ``l:6``), then
    the user deleted it: trace 6 now sits on line 6."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, _traces(8))
    for _ in range(2):
        with pytest.raises(EngineDeadError):
            _run(source, out, Dying())
    assert json.loads(suspects_path(out).read_text())["culprits"] == ["l:6"]
    write_lines(source, _traces(8, skip=5))
    return source, out


def test_the_record_that_takes_a_deleted_culprits_position_is_judged(culprit_deleted):
    source, out = culprit_deleted
    engine = Recording()
    _run(source, out, engine)
    assert any("Who wrote 6?" in prompt for prompt in engine.prompts)


def test_the_record_that_takes_a_deleted_culprits_position_gets_no_crash_row(culprit_deleted):
    source, out = culprit_deleted
    report = _run(source, out, Dying())
    assert report.errors == 0


@pytest.fixture
def old_culprit_file(tmp_path: Path) -> tuple[Path, Path]:
    """Id-less traces (trace 5 deleted) and a suspects file of a suffice before digests
    naming a culprit by position, ``l:6``, which may now hold another record."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, _traces(8, skip=5))
    suspects_path(out).write_text(json.dumps({"suspects": [], "culprits": ["l:6"]}))
    return source, out


def test_a_positional_culprit_noted_without_a_digest_gets_a_verdict(old_culprit_file):
    source, out = old_culprit_file
    _run(source, out, Dying())
    assert rows(out)[5]["verdict"] is not None


def test_a_positional_culprit_noted_without_a_digest_is_judged_alone(old_culprit_file):
    source, out = old_culprit_file
    engine = Dying()
    _run(source, out, engine)
    assert engine.batches == [4, 1, 2]  # lines 1-4; line 6 alone; lines 5 and 7
