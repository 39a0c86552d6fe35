"""Every test has a time limit (pytest-timeout, set in pyproject.toml): a test that hangs, as one waiting on an
engine that never answers does, fails alone and the run goes on."""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]

HANGING = """
import threading

import pytest


@pytest.fixture(scope="session")
def engine():
    return threading.Event()  # never set: an engine that never answers


def test_hangs(engine):
    engine.wait()


def test_after(engine):
    assert not engine.is_set()
"""


def test_the_suite_has_a_time_limit_above_the_slowest_engine_start():
    assert SETTINGS["timeout"] >= 600  # an engine start under load (~90 s) counts toward its first test
    assert SETTINGS["timeout_method"] == "signal"  # "thread" ends the whole run at the first hang
    assert any(dep.startswith("pytest-timeout") for dep in _dev_extra())


def test_a_hanging_test_fails_alone_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_hang.py").write_text(HANGING, encoding="utf-8")
    # The project's settings, with the limit shortened so the test takes seconds, not 15 minutes.
    ini = {**SETTINGS, "timeout": 2, "testpaths": ["."], "markers": []}
    lines = ["[pytest]", *(f"{key} = {value}" for key, value in ini.items() if not isinstance(value, list))]
    (tmp_path / "pytest.ini").write_text("\n".join(lines) + "\n", encoding="utf-8")
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hang.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - began
    assert run.returncode == 1, run.stdout[-2000:]
    assert "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
    assert "Timeout" in run.stdout
    assert took < 60


def _dev_extra() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["optional-dependencies"]["dev"])
