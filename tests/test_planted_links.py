"""Every command's writes in a folder a neighbour can write to (issue 38, attack 4): a symlink planted at a name
suffice writes is never written through, a dangling one never creates its target, and a file the neighbour made
there is not appended to.  Each write is tried with links planted by this process and, where a second user can be
made (root: ``useradd``), by that user; in CI (``CI=true``) not being able to make one fails the test."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.audit import AuditLog
from suffice.cli.main import main
from suffice.exceptions import EXIT_OK, AuditError, ConfigError, OutputWriteError
from suffice.files import open_output, replace_atomically
from suffice.gates.adequacy.store import RubricStore, next_rubric_path, save_rubric_version
from suffice.judge import Judge
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from suffice.serving import machine
from tests.batch.test_runner import good
from tests.cli.test_calibrate_edges import SEPARABLE, scripted
from tests.fakes import ScriptedEngine

NEIGHBOUR = "suffice-neighbour"
PRECIOUS = b"precious\n"


def _neighbour_uid() -> int:
    """The second user's uid, made if need be; skips (fails in CI) where it cannot be made."""
    try:
        return pwd.getpwnam(NEIGHBOUR).pw_uid
    except KeyError:
        pass
    problem = None
    if os.geteuid() != 0:
        problem = "not root: no second user can be made"
    elif shutil.which("useradd") is None:
        problem = "useradd is not installed"
    else:
        made = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", NEIGHBOUR], capture_output=True, text=True
        )
        if made.returncode != 0:
            problem = f"useradd failed: {made.stderr.strip()}"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"a second user is needed for the neighbour tests: {problem}")
        pytest.skip(problem)
    return pwd.getpwnam(NEIGHBOUR).pw_uid


class Folder:
    """A folder others may write to (mode 0777, no sticky bit: a team's shared folder), and the victim's file."""

    def __init__(self, path: Path, victim: Path, uid: int | None) -> None:
        self.path, self.victim, self.uid = path, victim, uid

    def plant(self, name: str, target: Path | None = None) -> Path:
        """A symlink at ``name`` to ``target`` (default: the victim), made by the neighbour where there is one."""
        link = self.path / name
        if not link.parent.exists():
            link.parent.mkdir(parents=True)
            link.parent.chmod(0o777)
        target = self.victim if target is None else target
        if self.uid is None:
            link.symlink_to(target)
        else:
            subprocess.run(["ln", "-s", str(target), str(link)], check=True, user=self.uid)
        return link

    def untouched(self) -> bool:
        return self.victim.read_bytes() == PRECIOUS and stat.S_IMODE(self.victim.stat().st_mode) == 0o644


@pytest.fixture(params=["self", "neighbour"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Folder]:
    uid = _neighbour_uid() if request.param == "neighbour" else None
    # Under /tmp itself: pytest's own folder is 0700, which a second user cannot enter.
    path = Path(tempfile.mkdtemp(prefix="suffice-shared-"))
    try:
        path.chmod(0o777)
        victim = tmp_path / "home" / ".bashrc"
        victim.parent.mkdir()
        victim.write_bytes(PRECIOUS)
        victim.chmod(0o644)
        yield Folder(path, victim, uid)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scripted_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    def open_scripted(cls: type[Judge], config: object) -> Judge:
        return cls(ScriptedEngine(scripted), config=config)  # type: ignore[arg-type]

    monkeypatch.setattr(Judge, "open", classmethod(open_scripted))


def _golden(folder: Path) -> Path:
    path = folder.parent / f"{folder.name}-golden.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SEPARABLE))
    return path


def _judge(source: Path, out: Path, *extra: str) -> int:
    return main(["judge", str(source), "-o", str(out), "--no-progress", *extra])


def _judged_then_damaged(folder: Path) -> tuple[Path, Path]:
    """(source, output) where the output holds a finished run and a damaged last line, which the resume sets
    aside in ``OUT.rejected``."""
    source, out = _golden(folder), folder / "out.jsonl"
    assert _judge(source, out) == EXIT_OK
    with out.open("ab") as handle:  # a test's own file
        handle.write(b"a damaged line, set aside on resume\n")
    return source, out


# -- suffice judge: the output, its rejected lines, the audit database -----------------------------------------


def test_rejected_lines_are_not_appended_through_a_planted_link(shared, scripted_judge, capsys):
    source, out = _judged_then_damaged(shared.path)
    shared.plant("out.jsonl.rejected")
    assert _judge(source, out) != EXIT_OK
    assert "symbolic link" in capsys.readouterr().err
    assert shared.untouched()


def test_an_output_that_is_a_dangling_link_does_not_create_its_target(shared, scripted_judge):
    target = shared.victim.parent / "created-by-the-run"
    out = shared.plant("out.jsonl", target)
    _judge(_golden(shared.path), out)
    assert not target.exists()


def test_an_output_linked_to_the_victim_leaves_the_victim_as_it_was(shared, scripted_judge):
    out = shared.plant("out.jsonl")
    _judge(_golden(shared.path), out)
    assert shared.untouched()


def test_a_dangling_link_at_the_audit_db_is_refused_not_followed(shared, scripted_judge):
    target = shared.victim.parent / "audit.db"
    db = shared.plant("audit.db", target)
    code = _judge(_golden(shared.path), shared.path / "out.jsonl", "--audit-db", str(db))
    assert code != EXIT_OK
    assert not target.exists()
    with pytest.raises(AuditError, match="symbolic link"):
        AuditLog(db)
    assert not target.exists()


def test_serves_audit_db_at_a_dangling_link_is_refused(shared):
    target = shared.victim.parent / "audit.db"
    db = shared.plant("served-audit.db", target)
    config = ServeConfig(audit_db=db)
    with pytest.raises(AuditError, match="symbolic link"):
        GateService(config, ScriptedEngine(good))
    assert not target.exists()


def test_a_file_a_neighbour_made_at_the_rejected_name_is_not_appended_to(shared, scripted_judge):
    if shared.uid is None:
        pytest.skip("needs a second user: a file of one's own is one's own")
    source, out = _judged_then_damaged(shared.path)
    rejected = shared.path / "out.jsonl.rejected"
    subprocess.run(["sh", "-c", f"umask 0; : > {rejected}"], check=True, user=shared.uid)
    assert _judge(source, out) != EXIT_OK
    assert rejected.read_bytes() == b""  # what the run set aside did not go to the neighbour's file


def test_new_outputs_holding_records_are_the_owners_only(shared, scripted_judge):
    old = os.umask(0o022)
    try:
        source, out = _judged_then_damaged(shared.path)
        assert _judge(source, out) == EXIT_OK
    finally:
        os.umask(old)
    for path in (out, shared.path / "out.jsonl.rejected"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


# -- suffice calibrate -o DIR --------------------------------------------------------------------------------------


def test_calibrate_replaces_planted_links_and_leaves_their_targets(shared, scripted_judge):
    out = shared.path / "calib"
    for name in ("golden.jsonl", "report.json", "report.md", "confidence.png", "p_sufficient.png"):
        shared.plant(f"calib/{name}")
    code = main(["calibrate", str(_golden(shared.path)), "-o", str(out), "--no-progress"])
    assert code == EXIT_OK
    assert shared.untouched()
    for name in ("golden.jsonl", "report.json", "report.md"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0, name
    assert stat.S_IMODE((out / "golden.jsonl").stat().st_mode) == 0o600


# -- suffice audit: export, anchor, keygen -------------------------------------------------------------------------


@pytest.fixture
def audit_db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    log = AuditLog(path)
    log.record(item_id="q0", gate="sufficiency", decision="deliver", round=1, latency_ms=1)
    log.close()
    return path


@pytest.mark.parametrize("command", ["export", "anchor"])
def test_audit_outputs_replace_a_planted_link(shared, audit_db, command):
    link = shared.plant(f"{command}.out")
    assert main(["audit", command, str(audit_db), "-o", str(link)]) == EXIT_OK
    assert shared.untouched()
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600


@pytest.mark.parametrize("dangling", [False, True])
def test_keygen_refuses_a_planted_link(shared, dangling):
    target = shared.victim.parent / "new.key" if dangling else None
    link = shared.plant("audit.key", target)
    assert main(["audit", "keygen", "-o", str(link)]) != EXIT_OK
    assert shared.untouched()
    assert target is None or not target.exists()


# -- rubric saves, the engine's log, any whole-file write ---------------------------------------------------------


def test_a_rubric_save_refuses_a_planted_link_at_its_next_version(shared):
    store = RubricStore()
    base = store.get("customer-support")
    shared.plant(next_rubric_path(base, shared.path).name)
    with pytest.raises(ConfigError, match="symbolic link") as caught:
        save_rubric_version(base, {"threshold": 0.5}, shared.path)
    assert caught.value.parameter == "save_rubric"
    assert shared.untouched()


def test_the_engine_log_is_not_written_through_a_planted_link(shared, monkeypatch):
    monkeypatch.setenv("SUFFICE_CACHE", str(shared.path))
    planted = shared.plant(f"logs/engine-{os.getpid()}.log")
    assert machine.engine_log_path() != planted  # the next folder's, or none (with a warning)
    assert shared.untouched()


@pytest.mark.parametrize("writer", ["replace", "append-refused"])
def test_the_helper_never_writes_through_a_link(shared, writer: str):
    link = shared.plant("settings.json")
    if writer == "replace":
        replace_atomically(link, [b"{}\n"])
        assert not link.is_symlink()
    else:
        with pytest.raises(OutputWriteError, match="symbolic link"):
            open_output(link, "append")
    assert shared.untouched()
