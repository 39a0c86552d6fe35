"""A full disk, caused for real: ``/dev/full`` answers every write with ENOSPC, and a
tiny tmpfs fills up (where this machine lets the test mount one).

What must hold: the error names the file and says what happened (a typed
OutputWriteError, so the CLI stops with "rerun to resume"), the file being replaced
is as it was, no temporary file is left to take the room a rerun needs, and rows
written before the disk filled are kept.
"""

import contextlib
import errno
import json
import os
import re
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from suffice.audit import save_anchor
from suffice.batch.answered import DoneRow, KeyIndex
from suffice.batch.journal import ResultFile
from suffice.batch.run_settings import RunSettings, settings_path
from suffice.exceptions import ConfigError, OutputWriteError
from suffice.files import replace_atomically
from suffice.gates.adequacy.store import RubricStore, save_rubric_version
from suffice.gates.sufficiency.calibration import GateConfig
from tests.cli.test_calibrate_edges import opened  # noqa: F401 - a fixture
from tests.setup_or_fail import need

FULL = Path("/dev/full")


@pytest.fixture(autouse=True)
def _dev_full() -> None:
    need(FULL.exists(), "/dev/full is Linux's; this fault needs it")


@pytest.fixture
def full_temporaries(monkeypatch):
    """Every temporary file suffice makes (``mkstemp``, an unguessable name) is made, then swapped for a link to
    /dev/full: whatever is written to it fails with ENOSPC, as on a full disk."""
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        os.close(fd)
        os.unlink(name)
        os.symlink(FULL, name)
        return os.open(name, os.O_WRONLY), name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _left_beside(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _index(directory: Path) -> KeyIndex:
    directory.mkdir(exist_ok=True)
    return KeyIndex(directory)


@pytest.fixture
def index(tmp_path):
    keys = _index(tmp_path / "index")
    yield keys
    keys.close()


def test_a_replacement_that_hits_a_full_disk_names_the_file(tmp_path, full_temporaries):
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    with pytest.raises(OutputWriteError) as caught:
        replace_atomically(target, [b"new\n" * 10_000])
    assert caught.value.path == str(target)
    assert caught.value.reason == os.strerror(errno.ENOSPC)


def test_a_replacement_that_hits_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, full_temporaries):
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    with pytest.raises(OutputWriteError):
        replace_atomically(target, [b"new\n" * 10_000])
    assert target.read_bytes() == b"old\n"
    assert _left_beside(tmp_path) == []


def test_a_failure_producing_the_content_passes_through_and_cleans_up(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")

    def lines():
        yield b"one\n"
        raise ValueError("the source broke")

    with pytest.raises(ValueError, match="the source broke"):
        replace_atomically(target, lines())
    assert target.read_bytes() == b"old\n"
    assert _left_beside(tmp_path) == []


def test_a_result_file_rewrite_on_a_full_disk_keeps_the_rows(tmp_path, index, full_temporaries):
    out = tmp_path / "out.jsonl"
    rows = [
        {"id": "a", "line": 1, "error": {"type": "GenerationError", "message": "x", "final": False}},
        {"id": "b", "line": 2, "error": None},
    ]
    before = "".join(json.dumps(r) + "\n" for r in rows).encode()
    out.write_bytes(before)
    results = ResultFile(out, index)
    with pytest.raises(OutputWriteError):
        results.start()  # the non-final row is dropped by a rewrite
    assert out.read_bytes() == before
    assert _left_beside(tmp_path) == []


def test_run_settings_on_a_full_disk(tmp_path, full_temporaries):
    output = tmp_path / "out.jsonl"
    with pytest.raises(OutputWriteError) as caught:
        RunSettings({"model": "m"}).write(output)
    assert caught.value.path == str(settings_path(output))
    assert not settings_path(output).exists()
    assert _left_beside(tmp_path) == []


def test_an_audit_anchor_on_a_full_disk_keeps_the_old_anchor(tmp_path, full_temporaries):
    anchor = tmp_path / "anchor.json"
    anchor.write_text('{"head": "old"}\n')
    with pytest.raises(OutputWriteError):
        save_anchor({"head": "new"}, anchor)
    assert json.loads(anchor.read_text()) == {"head": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["anchor.json"]


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs, where this machine lets the test mount one (root with
    CAP_SYS_ADMIN); skipped elsewhere, the /dev/full tests above still run."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, check=False
    )
    need(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def test_rows_appended_until_the_disk_is_full_are_kept_and_the_run_resumes(small_disk, index, tmp_path):
    out = small_disk / "out.jsonl"
    results = ResultFile(out, index)
    written = 0
    with pytest.raises(OutputWriteError) as caught:
        for batch in range(10_000):
            results.write({"id": f"r{batch}-{k}", "line": batch * 4 + k + 1, "pad": "x" * 200} for k in range(4))
            written += 4
    results.close()
    assert caught.value.path == str(out)
    assert caught.value.reason == os.strerror(errno.ENOSPC)
    assert written > 0
    complete = out.read_bytes().count(b"\n")
    assert complete >= written  # nothing flushed before the disk filled is lost
    # The user makes room, then reruns: the torn last row is cut, the rest is known.
    subprocess.run(["mount", "-o", "remount,size=256k", str(small_disk)], check=True)
    resumed = _index(tmp_path / "index-2")
    try:
        again = ResultFile(out, resumed)
        assert resumed.done_count == complete
        again.write([{"id": "after", "line": 99_999, "pad": ""}])
        again.close()
    finally:
        resumed.close()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == complete + 1
    assert rows[-1]["id"] == "after"


def test_a_batch_run_stopped_by_a_full_disk_resumes_with_nothing_lost(small_disk, tmp_path):
    from suffice.batch import BatchOptions, judge_file
    from suffice.config import JudgeConfig
    from tests.batch.test_runner import good, opener, record, rows, write_lines
    from tests.fakes import ScriptedEngine

    source, out = tmp_path / "in.jsonl", small_disk / "out.jsonl"
    total = 400  # about 250 KB of rows: more than the 64 KiB disk holds
    write_lines(source, [json.dumps(record(i)).encode() for i in range(total)])
    options = BatchOptions(batch_size=16)
    with pytest.raises(OutputWriteError) as caught:
        judge_file(JudgeConfig(), source, out, options, open_judge=opener(ScriptedEngine(good)))
    assert caught.value.path == str(out)
    kept = out.read_bytes().count(b"\n")
    assert kept > 0
    assert _left_beside(small_disk) == []
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    engine = ScriptedEngine(good)
    report = judge_file(JudgeConfig(), source, out, options, open_judge=opener(engine))
    assert report.errors == 0
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(total)]
    assert sum(engine.calls) == total - kept  # the rows kept were not judged again


def test_a_result_file_refuses_to_append_after_a_failed_write(small_disk, index):
    out = small_disk / "out.jsonl"
    results = ResultFile(out, index)
    with pytest.raises(OutputWriteError):
        for batch in range(10_000):
            results.write({"id": f"r{batch}-{k}", "line": batch * 4 + k + 1, "pad": "x" * 200} for k in range(4))
    subprocess.run(["mount", "-o", "remount,size=256k", str(small_disk)], check=True)
    size = out.stat().st_size
    with pytest.raises(OutputWriteError, match="an earlier write"):
        results.write([{"id": "late", "line": 10**6}])
    assert out.stat().st_size == size
    results.close()


def _fill(keys: KeyIndex) -> OutputWriteError:
    """Add rows to ``keys`` until its disk is full."""
    with pytest.raises(OutputWriteError) as caught:
        for batch in range(100_000):
            keys.add_done(
                [DoneRow(f"i:{batch}-{k}-" + "x" * 100, 0, 1, batch * 50 + k, None, False) for k in range(50)]
            )
    return caught.value


def test_a_key_index_on_a_full_disk_names_its_file(small_disk):
    """The index is scratch (journal off, rebuilt from the output on the next run): a
    full disk under it stops the run with the same typed error as the output's."""
    keys = KeyIndex(small_disk)
    try:
        error = _fill(keys)
        assert error.path == str(keys.path)
        assert "full" in error.reason
    finally:
        keys.close()


def test_a_full_disk_under_the_index_keeps_every_row_of_the_output(small_disk, tmp_path):
    """The output on a disk with room, the index on a full one: the run stops naming
    the index, closing adds nothing, and a rerun finds every row the file holds."""
    out = tmp_path / "out.jsonl"
    keys = KeyIndex(small_disk)
    results = ResultFile(out, keys)
    with pytest.raises(OutputWriteError) as caught:
        for batch in range(10_000):
            results.write({"id": f"r{batch}-{k}-" + "x" * 100, "line": batch * 4 + k + 1} for k in range(4))
    results.close()
    keys.close()
    assert caught.value.path == str(keys.path)
    rows = out.read_bytes().count(b"\n")
    resumed = _index(tmp_path / "index-2")
    try:
        ResultFile(out, resumed).close()
        assert resumed.done_count == rows
    finally:
        resumed.close()


def _fill_disk(mount: Path) -> None:
    """Write a filler file until ``mount`` has no room left."""
    with pytest.raises(OSError) as caught, (mount / "filler").open("wb") as handle:
        while True:
            handle.write(b"x" * 4096)
            handle.flush()
    assert caught.value.errno == errno.ENOSPC


@pytest.fixture
def full_rubric_folder(small_disk):
    """A rubric folder holding customer-support's base version, on a disk now full."""
    base = RubricStore().get("customer-support")
    folder = small_disk / "rubrics"
    folder.mkdir()
    (folder / f"{base.ref}.json").write_text(base.model_dump_json(indent=2) + "\n", encoding="utf-8")
    _fill_disk(small_disk)
    return base, folder


def test_a_rubric_version_saved_onto_a_full_disk_is_a_config_error_naming_save_rubric(full_rubric_folder):
    base, folder = full_rubric_folder
    with pytest.raises(ConfigError) as caught:
        save_rubric_version(base, {"threshold": 0.7}, folder)
    assert caught.value.parameter == "save_rubric"


def test_a_rubric_version_saved_onto_a_full_disk_leaves_the_store_on_the_previous_version(full_rubric_folder):
    """An empty customer-support@1.0.1.json was left: the newest version, unreadable,
    so every later judge with --rubric customer-support failed."""
    base, folder = full_rubric_folder
    with contextlib.suppress(ConfigError):
        save_rubric_version(base, {"threshold": 0.7}, folder)
    assert RubricStore(folder).get("customer-support").ref == base.ref


def test_a_rubric_version_saved_onto_a_full_disk_is_saved_once_there_is_room(full_rubric_folder, small_disk):
    """The empty file was taken for a version that exists already, and refused."""
    base, folder = full_rubric_folder
    with contextlib.suppress(ConfigError):
        save_rubric_version(base, {"threshold": 0.7}, folder)
    (small_disk / "filler").unlink()
    path = save_rubric_version(base, {"threshold": 0.7}, folder)
    assert RubricStore(folder).get(path.stem).calibrated_threshold == 0.7


def _calibrate_onto(out: Path, tmp_path: Path) -> int:
    from suffice.cli.main import main
    from tests.cli.test_calibrate_edges import SEPARABLE

    golden = tmp_path / "golden-in.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in SEPARABLE))
    return main(["calibrate", str(golden), "-o", str(out), "--no-progress"])


@pytest.mark.usefixtures("opened")
def test_calibrate_whose_report_fills_the_disk_stops_with_exit_1(small_disk, tmp_path):
    """64 KiB hold the verdicts and one plot, not the second: the report is written
    after all the judging (it was an OSError traceback from matplotlib)."""
    assert _calibrate_onto(small_disk / "calib", tmp_path) == 1


@pytest.mark.usefixtures("opened")
def test_calibrate_whose_report_fills_the_disk_names_the_file_and_how_to_resume(small_disk, tmp_path, capsys):
    _calibrate_onto(small_disk / "calib", tmp_path)
    err = capsys.readouterr().err
    assert re.search(rf"cannot write {re.escape(str(small_disk / 'calib'))}/\S+: No space left on device", err)
    assert "rerun the same command" in err


@pytest.mark.usefixtures("opened")
def test_calibrate_whose_report_filled_the_disk_writes_it_once_there_is_room(small_disk, tmp_path):
    _calibrate_onto(small_disk / "calib", tmp_path)
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    assert _calibrate_onto(small_disk / "calib", tmp_path) == 0
    assert json.loads((small_disk / "calib" / "report.json").read_text())["items"] == 3


def _gate_config(threshold: float, metrics: dict[str, object] | None = None) -> GateConfig:
    return GateConfig(gate="sufficiency", score="p_sufficient", threshold=threshold, metrics=metrics or {})


def test_a_gate_config_saved_again_onto_a_full_disk_keeps_the_old_one(small_disk):
    """The old config is small and the new one larger: rewritten in place, the file was
    truncated, then could not be filled, and the gate that reads it could not start."""
    path = small_disk / "gate.json"
    _gate_config(0.5).save(path)
    _fill_disk(small_disk)
    with contextlib.suppress(ConfigError):
        _gate_config(0.7, {"note": "x" * 8192}).save(path)
    assert GateConfig.load(path).threshold == 0.5


def test_a_gate_config_saved_onto_a_full_disk_is_a_config_error_naming_save_config(small_disk):
    path = small_disk / "gate.json"
    _gate_config(0.5).save(path)
    _fill_disk(small_disk)
    with pytest.raises(ConfigError) as caught:
        _gate_config(0.7, {"note": "x" * 8192}).save(path)
    assert caught.value.parameter == "save_config"


def test_a_gate_config_saved_onto_a_full_disk_leaves_no_temporary(small_disk):
    path = small_disk / "gate.json"
    _gate_config(0.5).save(path)
    _fill_disk(small_disk)
    with contextlib.suppress(ConfigError):
        _gate_config(0.7, {"note": "x" * 8192}).save(path)
    assert _left_beside(small_disk) == []
