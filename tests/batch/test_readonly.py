"""An output on a filesystem that cannot be written: ``cannot write PATH``
(:class:`OutputWriteError`, exit 1), never a raw OSError traceback.

On a real read-only mount (a tmpfs mounted ``ro``, or written and then remounted
``ro``), where this machine lets the test mount one (root with CAP_SYS_ADMIN);
skipped elsewhere.  Why a mount and not ``chmod``: the tests run as root, whom
permissions do not stop; a read-only filesystem stops root too (EROFS).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.batch import BatchOptions, judge_file
from suffice.batch.answered import KeyIndex
from suffice.batch.journal import ResultFile
from suffice.cli import judge_cmd
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_FATAL, OutputWriteError
from suffice.judge import Judge
from tests.batch.test_runner import good, opener, record, write_lines
from tests.fakes import ScriptedEngine
from tests.setup_or_fail import need

CONFIG = JudgeConfig()


def _mount(where: Path, options: str) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"{options},size=1m", "tmpfs", str(where)], capture_output=True, check=False
    )
    need(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")


@contextlib.contextmanager
def _mounted(tmp_path: Path, options: str) -> Iterator[Path]:
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    _mount(mount, options)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """An empty read-only filesystem."""
    with _mounted(tmp_path, "ro") as mount:
        yield mount


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    write_lines(path, [json.dumps(record(i)).encode() for i in range(3)])
    return path


@pytest.fixture
def answered_read_only(tmp_path: Path, source: Path) -> Iterator[Path]:
    """A finished output of ``source`` (first two records), its filesystem then made read-only."""
    with _mounted(tmp_path, "rw") as mount:
        first = tmp_path / "first.jsonl"
        write_lines(first, source.read_bytes().splitlines()[:2])
        judge_file(CONFIG, first, mount / "out.jsonl", open_judge=opener(ScriptedEngine(good)))
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount / "out.jsonl"


def test_a_new_output_on_a_read_only_filesystem_cannot_be_written(read_only, source):
    with pytest.raises(OutputWriteError):
        judge_file(CONFIG, source, read_only / "out.jsonl", open_judge=opener(ScriptedEngine(good)))


def test_an_output_in_a_new_folder_on_a_read_only_filesystem_names_the_folder(read_only, source):
    with pytest.raises(OutputWriteError) as refused:
        judge_file(CONFIG, source, read_only / "sub" / "out.jsonl", open_judge=opener(ScriptedEngine(good)))
    assert refused.value.path == str(read_only / "sub")


def test_resuming_an_output_on_a_read_only_filesystem_cannot_be_written(answered_read_only, source):
    with pytest.raises(OutputWriteError):
        judge_file(CONFIG, source, answered_read_only, open_judge=opener(ScriptedEngine(good)))


def _cli(source: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(ScriptedEngine(good), config=config)))
    return judge_cmd.judge_file(CONFIG, source, out, BatchOptions(), progress=False)


def test_the_cli_exits_1_on_a_read_only_filesystem(read_only, source, monkeypatch):
    assert _cli(source, read_only / "out.jsonl", monkeypatch) == EXIT_FATAL


def test_the_cli_says_it_cannot_write_on_a_read_only_filesystem(read_only, source, monkeypatch, capsys):
    _cli(source, read_only / "out.jsonl", monkeypatch)
    assert "cannot write" in capsys.readouterr().err


def test_the_key_index_in_a_read_only_folder_names_the_folder(read_only):
    with pytest.raises(OutputWriteError) as refused:
        KeyIndex(read_only)
    assert refused.value.path == str(read_only)


def test_appending_to_an_output_on_a_read_only_filesystem_names_it(answered_read_only, tmp_path):
    index = KeyIndex(tmp_path)
    try:
        results = ResultFile(answered_read_only, index)
        with pytest.raises(OutputWriteError) as refused:
            results.start()
    finally:
        index.close()
    assert refused.value.path == str(answered_read_only)
