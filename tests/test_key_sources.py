"""A service's key is never said, and a 401 says where the key came from: ``suffice judge --server`` names the flag,
the variable or the settings file it read the key file from (and the file), the pytest plugin ``--suffice-api-key-file``
or ``$SUFFICE_API_KEY``; a key read with its newline is the key without it."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.cli.main import main
from suffice.exceptions import EXIT_USAGE
from tests.batch.test_runner import good, record
from tests.fakes import ScriptedEngine
from tests.test_client import KEY, serve

pytest_plugins = ["pytester"]

WRONG = "w" * 32


@pytest.fixture
def keyed() -> Iterator[str]:
    with serve(ScriptedEngine(good), key=KEY) as url:
        yield url


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(record(0)) + "\n")
    return path


def _judge(source: Path, url: str, *flags: str) -> int:
    return main(["judge", str(source), "-o", str(source.with_name("out.jsonl")), "--server", url, *flags])


def test_a_refused_key_names_the_flag_and_the_file_never_the_key(keyed, source, tmp_path, capsys):
    key = tmp_path / "key"
    key.write_text(WRONG + "\n")
    assert _judge(source, keyed, "--api-key-file", str(key)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"the service refused the key from --api-key-file ({key})" in err
    assert WRONG not in err and KEY not in err


def test_a_refused_key_read_through_the_variable_names_the_variable(keyed, source, tmp_path, capsys, monkeypatch):
    key = tmp_path / "key"
    key.write_text(WRONG + "\n")
    monkeypatch.setenv("SUFFICE_API_KEY_FILE", str(key))
    assert _judge(source, keyed) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"the service refused the key from $SUFFICE_API_KEY_FILE ({key})" in err
    assert WRONG not in err


def test_no_key_says_which_flag_gives_one(keyed, source, capsys):
    assert _judge(source, keyed) == EXIT_USAGE
    assert (
        "no key was sent, and the service wants one: give its key with --api-key-file PATH" in capsys.readouterr().err
    )


def _plugin_args() -> list[str]:
    installed = any(ep.value == "suffice.testing.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "suffice.testing.plugin"]


TEAM_TEST = """
def test_judged(suffice_judge):
    suffice_judge.judge({"id": "a", "question": "Who?", "chunks": [{"id": "c", "text": "Ada."}]})
"""


@pytest.mark.parametrize(
    ("flag", "variable", "said"),
    [
        (True, False, "the service refused the key from --suffice-api-key-file"),
        (False, True, "the service refused the key from $SUFFICE_API_KEY"),
        (False, False, "give its key with --suffice-api-key-file or $SUFFICE_API_KEY"),
    ],
)
def test_the_plugins_401_names_its_option_or_variable(pytester, monkeypatch, keyed, flag, variable, said):
    monkeypatch.delenv("SUFFICE_API_KEY", raising=False)
    if variable:
        monkeypatch.setenv("SUFFICE_API_KEY", WRONG + "\n")
    pytester.makepyfile(test_team=TEAM_TEST)
    args = [*_plugin_args(), "-p", "no:cacheprovider", f"--suffice-server={keyed}"]
    key_file = pytester.path / "wrong.key"
    key_file.write_text(WRONG + "\n")
    result = pytester.runpytest_subprocess(*args, *([f"--suffice-api-key-file={key_file}"] if flag else []))
    output = result.stdout.str() + result.stderr.str()
    assert said in output, output[-3000:]
    assert WRONG not in output


def test_the_401_judge_md_shows_is_the_one_the_client_says():
    from suffice.client import _KeySource

    docs = " ".join((Path(__file__).resolve().parent.parent / "docs" / "judge.md").read_text(encoding="utf-8").split())
    said = _KeySource(True, "--api-key-file (/etc/suffice/key)").refused()
    assert f"error: HTTP 401: wrong bearer token: {said}" in docs
    assert _KeySource(False, "--api-key-file PATH").refused().split(": ", 1)[1] in docs
