"""One table (``suffice.exceptions.STATUS``) gives every suffice error its exit status and HTTP status, and both the
command line and the service read it: no command maps an error to an exit status by hand."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import suffice.cli
import suffice.exceptions as exceptions
import suffice.exceptions as exit_codes
from suffice.cli.errors import reports_errors
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import STATUS, AuditError, ConfigError, Status, SufficeError, status_of
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.batch.test_runner import good
from tests.cli.test_calibrate_edges import opened  # noqa: F401 - a fixture
from tests.fakes import ScriptedEngine

ERRORS = [
    cls
    for _, cls in inspect.getmembers(exceptions, inspect.isclass)
    if issubclass(cls, SufficeError) and cls.__module__ == exceptions.__name__
]
EXITS = {value for name, value in vars(exit_codes).items() if name.startswith("EXIT_")}

#: Where a command still says an error itself: nowhere.  Where a command's case differs from the general one, a
#: subclass has its own row (an export written whole or not at all is ExportWriteError: 2, where a run that stopped
#: part way exits 1 and resumes; a bundle is BundleWriteError: 1 with nothing to resume; calibrate's unreadable
#: verdicts are VerdictsFileError: 1, judge again), and bundle's --model is a ConfigError on it.
SAID_HERE: set[tuple[str, str]] = set()


def an(cls: type[SufficeError]) -> SufficeError:
    return exceptions._rebuild(cls, ("it went wrong",), {})


def test_every_suffice_error_has_one_exit_status_and_one_http_status():
    assert len(ERRORS) > 30
    missing = [cls.__name__ for cls in ERRORS if cls not in STATUS]
    assert missing == []
    for cls in ERRORS:
        status = STATUS[cls]
        assert status.exit in EXITS and status.exit != exit_codes.EXIT_OK, cls
        assert 400 <= status.http < 600, cls
        assert status_of(an(cls)) is status


def test_an_error_declared_elsewhere_takes_its_nearest_listed_base():
    from suffice.server.service import RequestError

    assert status_of(RequestError("rubric", "unknown")) == STATUS[exceptions.InputError]


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_a_command_exits_with_the_tables_status_and_says_what_to_do(cls, capsys):
    def command(args: object) -> int:
        raise an(cls)

    assert reports_errors(command)(object()) == STATUS[cls].exit
    err = capsys.readouterr().err
    assert err.startswith("error: it went wrong")
    assert STATUS[cls].then in err


def test_the_command_line_reads_the_table(tmp_path: Path, monkeypatch, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "1", "question": "q", "chunks": ["c"]}\n')
    monkeypatch.setitem(STATUS, ConfigError, Status(77, 500, "do this"))
    assert main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--timeout", "5"]) == 77
    assert "timeout=5.0: needs --server (do this)" in capsys.readouterr().err


def test_the_service_reads_the_table(monkeypatch):
    class Refusing(GateService):
        def judge(self, *args: object, **kwargs: object):  # type: ignore[override]
            raise AuditError("the log is held elsewhere")

    config = ServeConfig(judge=JudgeConfig(), gates=("sufficiency",))
    client = TestClient(create_app(Refusing(config, ScriptedEngine(good)), config), base_url="http://127.0.0.1")
    item = {"id": "1", "question": "q?", "chunks": ["c"]}
    assert client.post("/v1/judge/sufficiency", json=item).status_code == STATUS[AuditError].http == 503
    monkeypatch.setitem(STATUS, AuditError, Status(2, 409))
    answer = client.post("/v1/judge/sufficiency", json=item)
    assert answer.status_code == 409
    assert answer.json()["detail"] == "not answered: the log is held elsewhere"


@pytest.mark.usefixtures("opened")
def test_calibrate_whose_report_cannot_be_written_exits_with_the_tables_status_naming_its_verdicts(
    tmp_path: Path, monkeypatch, capsys
):
    from tests.cli.test_calibrate_edges import SEPARABLE

    def full(*args: object, **kwargs: object) -> None:
        raise exceptions.OutputWriteError(str(tmp_path / "calib" / "report.json"), "No space left on device")

    monkeypatch.setattr("suffice.cli.calibrate_cmd.write_report", full)
    # Exit 1: the run stopped part way, and its verdicts are named; the table's words say what to do.
    monkeypatch.setitem(STATUS, exceptions.OutputWriteError, Status(exit_codes.EXIT_FATAL, 500, "do this"))
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in SEPARABLE))
    assert main(["calibrate", str(golden), "-o", str(tmp_path / "calib"), "--no-progress"]) == exit_codes.EXIT_FATAL
    err = capsys.readouterr().err
    assert "No space left on device" in err
    assert f"results so far are in {tmp_path / 'calib' / 'verdicts.jsonl'}; do this" in err


def _hand_mapped(tree: ast.AST) -> set[str]:
    """The suffice errors an ``except`` of ``tree`` turns into an ``EXIT_*`` status itself."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        caught = [n.id for n in ast.walk(node.type) if isinstance(n, ast.Name) and n.id in vars(exceptions)]
        exits = [
            n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id.startswith("EXIT_")
        ]
        if caught and exits:
            found.update(caught)
    return found


def test_no_command_maps_an_error_to_an_exit_status_by_hand():
    mapped = set()
    for path in sorted(Path(suffice.cli.__file__).parent.glob("*.py")):
        mapped |= {(path.stem, name) for name in _hand_mapped(ast.parse(path.read_text(encoding="utf-8")))}
    assert mapped == SAID_HERE


@pytest.mark.usefixtures("opened")
def test_calibrate_whose_verdicts_cannot_be_read_back_exits_1_naming_them_with_the_tables_words(
    tmp_path: Path, monkeypatch, capsys
):
    from tests.cli.test_calibrate_edges import SEPARABLE

    def unreadable(*args: object, **kwargs: object) -> None:
        raise exceptions.InputError("verdict", "not a verdict of this gate")

    monkeypatch.setattr("suffice.cli.calibrate_cmd.build_report", unreadable)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in SEPARABLE))
    assert main(["calibrate", str(golden), "-o", str(tmp_path / "calib"), "--no-progress"]) == exit_codes.EXIT_FATAL
    err = capsys.readouterr().err
    assert f"{tmp_path / 'calib' / 'verdicts.jsonl'}: verdict: not a verdict of this gate" in err
    assert STATUS[exceptions.VerdictsFileError].then in err


def test_a_bundle_that_cannot_be_written_exits_1_and_a_missing_model_folder_is_a_usage_error(
    tmp_path: Path, monkeypatch, capsys
):
    def full(*args: object, **kwargs: object) -> None:
        raise exceptions.OutputWriteError(str(tmp_path / "b" / "MANIFEST"), "No space left on device")

    monkeypatch.setattr("suffice.cli.bundle_cmd.write_bundle", full)
    assert main(["bundle", str(tmp_path / "b")]) == exit_codes.EXIT_FATAL
    err = capsys.readouterr().err
    assert "No space left on device" in err and "resume" not in err  # written anew: nothing to resume

    def missing(*args: object, **kwargs: object) -> None:
        raise exceptions.ModelNotFoundError(str(tmp_path / "nowhere"), "no such folder")

    monkeypatch.setattr("suffice.cli.bundle_cmd.write_bundle", missing)
    assert main(["bundle", str(tmp_path / "b"), "--model", str(tmp_path / "nowhere")]) == exit_codes.EXIT_USAGE
    assert f"model={str(tmp_path / 'nowhere')!r}: no such folder" in capsys.readouterr().err
