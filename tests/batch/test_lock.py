"""Two runs on one output: the second is refused at once, naming the first; a killed
run never blocks its resume.

The first run is a real process (a scripted engine that stalls after two batches), so
the lock is held by another process as in two shells or a retried cron job, and is
released by the kernel when that process is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.cli import judge_cmd
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_BUSY, OutputBusyError
from suffice.judge import Judge
from tests.batch.test_runner import good, opener, record, rows, write_lines
from tests.fakes import ScriptedEngine

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 8

#: A run that writes two rows (batches of one), then stalls in its third batch; with a
#: third argument it first forks a child that sleeps (as an engine process started by
#: fork would live on) and writes the child's pid there.
_STALLING_RUN = """
import os, sys, time
from pathlib import Path
from suffice.batch import BatchOptions, judge_file
from suffice.config import JudgeConfig
from suffice.judge import Judge
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine

class Stalling(ScriptedEngine):
    def generate(self, requests, progress=None, cancel=None):
        if len(sys.argv) > 3 and not self.calls:
            child = os.fork()
            if child == 0:
                time.sleep(600)
                os._exit(0)
            Path(sys.argv[3]).write_text(str(child))
        if len(self.calls) >= 2:
            time.sleep(600)
        return super().generate(requests, progress, cancel)

engine = Stalling(good)
judge_file(JudgeConfig(), Path(sys.argv[1]), Path(sys.argv[2]), BatchOptions(batch_size=1),
           open_judge=lambda config: Judge(engine, config=config))
"""


def _lines(out: Path) -> int:
    return out.read_bytes().count(b"\n") if out.exists() else 0


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(RECORDS)])
    return source, out


@contextlib.contextmanager
def _stalled_run(
    source: Path, out: Path, rows_in: Path | None = None, child_pid: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A run in another process, holding ``out`` with two rows written (in ``rows_in``:
    a Parquet output's journal; ``child_pid``: fork a sleeping child, its pid there);
    killed after."""
    rows_in = rows_in or out
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLING_RUN, str(source), str(out), *([str(child_pid)] if child_pid else [])],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while _lines(rows_in) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "the first run wrote nothing in time"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


def test_a_second_run_on_an_output_being_written_is_refused_naming_the_first(files):
    source, out = files
    with _stalled_run(source, out) as first, pytest.raises(OutputBusyError) as refused:
        judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
    assert refused.value.pid == first.pid


def test_a_refused_second_run_leaves_the_first_runs_rows_as_they_are(files):
    source, out = files
    with _stalled_run(source, out):
        before = out.read_bytes()
        with contextlib.suppress(OutputBusyError):
            judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
        assert out.read_bytes() == before


def test_the_cli_exits_4_naming_the_pid_of_the_run_writing_the_output(files, monkeypatch, capsys):
    source, out = files
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(ScriptedEngine(good), config=config)))
    with _stalled_run(source, out) as first:
        status = judge_cmd.judge_file(JudgeConfig(), source, out, BatchOptions(), progress=False)
    assert status == EXIT_BUSY
    assert f"pid {first.pid}" in capsys.readouterr().err


def test_a_run_killed_with_sigkill_does_not_block_its_resume(files):
    """The kernel drops a ``flock`` with its process: the rerun takes the lock and
    finishes.  (Old code had no lock; this guards that the lock cannot outlive a
    killed run, as a lock file checked for existence would.)"""
    source, out = files
    with _stalled_run(source, out) as first:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(RECORDS)]


def test_a_parquet_output_is_locked_too(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.parquet"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(RECORDS)])
    with (
        _stalled_run(source, out, out.with_name(out.name + ".journal.jsonl")) as first,
        pytest.raises(OutputBusyError) as refused,
    ):
        judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
    assert refused.value.pid == first.pid


def test_a_forked_child_outliving_its_killed_run_does_not_block_the_resume(files, tmp_path):
    """An engine process started by ``fork`` shares the lock's descriptor; it is closed
    in the child, so only the run itself holds the lock."""
    source, out = files
    child_pid = tmp_path / "child.pid"
    with _stalled_run(source, out, child_pid=child_pid) as first:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    child = int(child_pid.read_text())
    try:
        judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(RECORDS)]


def _no_locks(fd: int, operation: int) -> None:
    """``flock`` as a filesystem without locks answers it (NFS without lockd)."""
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


def test_an_output_on_a_filesystem_without_locks_is_still_judged(files, monkeypatch):
    """No real filesystem here refuses ``flock`` (the kernel emulates it for local
    ones), so the refusal is made in ``flock`` itself, with the errno NFS gives."""
    source, out = files
    monkeypatch.setattr(fcntl, "flock", _no_locks)
    with pytest.warns(UserWarning):
        judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(RECORDS)]


def test_the_warning_names_the_lock_file_and_the_reason(files, monkeypatch):
    source, out = files
    monkeypatch.setattr(fcntl, "flock", _no_locks)
    with pytest.warns(UserWarning) as caught:
        judge_file(JudgeConfig(), source, out, open_judge=opener(ScriptedEngine(good)))
    assert str(caught[0].message).startswith(f"cannot lock {out}.lock (No locks available)")
