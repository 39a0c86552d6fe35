"""Files an output's neighbours can plant, for real: symlinks and hard links beside the output, at the names a run
used to write through (``OUT.tmp``, ``OUT.lock``), and a power cut after a rename (the folder must be synced)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow as pa
import pytest

from suffice.audit import save_anchor
from suffice.exceptions import OutputWriteError
from suffice.files import lock_path, output_lock, replace_atomically
from suffice.rows.tables import ParquetRows


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's that a neighbour wants destroyed."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_bytes(b"precious\n")
    return path


@pytest.mark.parametrize("planted", ["out.jsonl.tmp", ".out.jsonl.tmp"])
def test_a_symlink_planted_at_a_temporary_name_is_not_written_through(tmp_path, victim, planted):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old\n")
    (tmp_path / planted).symlink_to(victim)
    replace_atomically(out, [b"new\n"])
    assert victim.read_bytes() == b"precious\n"
    assert out.read_bytes() == b"new\n"
    assert not out.is_symlink()


def test_a_symlink_planted_at_the_anchors_temporary_name_is_not_written_through(tmp_path, victim):
    anchor = tmp_path / "anchor.json"
    (tmp_path / f".anchor.json.{os.getpid()}.tmp").symlink_to(victim)
    save_anchor({"head": "new"}, anchor)
    assert victim.read_bytes() == b"precious\n"
    assert not anchor.is_symlink()


def test_a_symlink_planted_at_a_parquet_temporary_name_is_not_written_through(tmp_path, victim):
    out = tmp_path / "out.parquet"
    (tmp_path / "out.parquet.tmp").symlink_to(victim)
    with ParquetRows(out, pa.schema([("a", pa.int64())])) as writer:
        writer.write([{"a": 1}])
    assert victim.read_bytes() == b"precious\n"
    assert not out.is_symlink()


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umasks(tmp_path):
    """mkstemp's 0600 is the temporary's: the output's readers still read it afterwards."""
    kept, new = tmp_path / "kept.jsonl", tmp_path / "new.jsonl"
    kept.write_bytes(b"old\n")
    kept.chmod(0o640)
    old_umask = os.umask(0o022)
    try:
        replace_atomically(kept, [b"x\n"])
        replace_atomically(new, [b"x\n"])
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    assert stat.S_IMODE(new.stat().st_mode) == 0o644


def test_a_lock_planted_as_a_symlink_is_refused_and_the_target_untouched(tmp_path, victim):
    out = tmp_path / "out.jsonl"
    lock_path(out).symlink_to(victim)
    with pytest.raises(OutputWriteError, match="symbolic link"), output_lock(out):
        pass
    assert victim.read_bytes() == b"precious\n"


def test_a_lock_planted_as_a_hard_link_is_refused_and_the_target_untouched(tmp_path, victim):
    out = tmp_path / "out.jsonl"
    os.link(victim, lock_path(out))
    with pytest.raises(OutputWriteError, match="second link"), output_lock(out):
        pass
    assert victim.read_bytes() == b"precious\n"


def test_a_lock_planted_as_a_fifo_is_refused_at_once(tmp_path):
    out = tmp_path / "out.jsonl"
    os.mkfifo(lock_path(out))
    with pytest.raises(OutputWriteError, match="not a regular file"), output_lock(out):
        pass


def test_the_lock_file_is_the_owners_only(tmp_path):
    out = tmp_path / "out.jsonl"
    old_umask = os.umask(0o022)
    try:
        with output_lock(out):
            mode = stat.S_IMODE(lock_path(out).stat().st_mode)
    finally:
        os.umask(old_umask)
    assert mode == 0o600


class _Syncs:
    """Records, in order, each ``os.replace`` and each ``os.fsync`` (of a directory: its identity)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, object]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            info = os.fstat(fd)
            self.events.append(("fsync-dir" if stat.S_ISDIR(info.st_mode) else "fsync", (info.st_dev, info.st_ino)))
            real_fsync(fd)

        def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
            real_replace(src, dst)
            self.events.append(("replace", Path(dst)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def folder_synced_after_replace(self, target: Path) -> bool:
        folder = target.parent.stat()
        renamed = [i for i, (kind, what) in enumerate(self.events) if kind == "replace" and what == target]
        return bool(renamed) and ("fsync-dir", (folder.st_dev, folder.st_ino)) in self.events[renamed[-1] :]


def test_the_folder_is_synced_after_a_file_is_replaced(tmp_path, monkeypatch):
    """Without it a power cut after the run finished can bring back the old file."""
    syncs = _Syncs(monkeypatch)
    out = tmp_path / "out.jsonl"
    replace_atomically(out, [b"new\n"])
    assert syncs.folder_synced_after_replace(out)


def test_the_folder_is_synced_after_a_parquet_file_is_moved_into_place(tmp_path, monkeypatch):
    syncs = _Syncs(monkeypatch)
    out = tmp_path / "out.parquet"
    with ParquetRows(out, pa.schema([("a", pa.int64())])) as writer:
        writer.write([{"a": 1}])
    assert syncs.folder_synced_after_replace(out)
