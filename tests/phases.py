"""Where a test run's wall time goes: ``pytest --ci-phases PATH`` writes a JSON record that
``benchmarks/ci_phases.py`` reads (engine starts, engine tests, fast tests).

Recorded: each test's setup, call and teardown seconds and whether it is marked ``engine``; each session- or
module-scoped fixture's own setup seconds (what it builds, not what it requests); and every vLLM engine process
(``VLLM::EngineCore``) that appears under this run, with the test and phase it appeared in: an engine started by a
fixture, a test, a ``suffice`` subprocess or a Ray actor alike.  Counts of starts do not depend on the machine's
load; seconds do.  The hooks are imported by tests/conftest.py and do nothing without the option.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

#: Seconds between looks for new engine processes (a start takes tens of seconds; its process lives for all of it).
SAMPLE_S = 0.5
#: Fixture setups shorter than this are left out of the record (most fixtures are instant).
FIXTURE_MIN_S = 0.5

_KEY = pytest.StashKey["_Recorder"]()


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.monotonic()
        self.tests: dict[str, dict[str, Any]] = {}
        self.fixtures: list[dict[str, Any]] = []
        self.engine_starts: list[dict[str, Any]] = []
        self.where = ("", "collect")  # (nodeid, phase) now running
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watch_engines, name="ci-phases", daemon=True)
        self._watch.start()

    def _engine_pids(self) -> Iterator[int]:
        import psutil

        for child in psutil.Process(os.getpid()).children(recursive=True):
            try:
                name = child.name() + " " + " ".join(child.cmdline()[:1])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if "VLLM::EngineCor" in name:  # the kernel keeps 15 characters of a process name
                yield child.pid

    def _watch_engines(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                pids = set(self._engine_pids())
            except Exception:  # a process gone between listing and reading: look again next time
                continue
            for pid in sorted(pids - self._seen):
                nodeid, phase = self.where
                at = round(time.monotonic() - self.started, 1)
                self.engine_starts.append({"pid": pid, "test": nodeid, "phase": phase, "at_s": at})
            self._seen |= pids

    def write(self) -> None:
        self._stop.set()
        self._watch.join(timeout=5)
        record = {
            "format": 1,
            "wall_s": round(time.monotonic() - self.started, 2),
            "tests": [{"nodeid": k, **v} for k, v in self.tests.items()],
            "fixtures": self.fixtures,
            "engine_starts": self.engine_starts,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ci-phases",
        metavar="PATH",
        default=None,
        help="write each test's and each shared fixture's seconds and every engine start to PATH (JSON; "
        "benchmarks/ci_phases.py reads it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--ci-phases", default=None)
    if path and not hasattr(config, "workerinput"):
        recorder = _Recorder(Path(path))
        config.stash[_KEY] = recorder
        if config.getoption("numprocesses", default=None):
            # Under pytest-xdist the tests run in the workers; the controller hears each phase's report.
            config.pluginmanager.register(_ReportTimer(recorder), "ci-phases-reports")
        else:
            config.pluginmanager.register(_FixtureTimer(recorder), "ci-phases-fixtures")


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.write()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    recorder = item.config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.tests[item.nodeid] = {"engine": item.get_closest_marker("engine") is not None}
    return (yield)


def _phase(item: pytest.Item, phase: str) -> Generator[None, object, object]:
    recorder = item.config.stash.get(_KEY, None)
    if recorder is None:
        return (yield)
    recorder.where = (item.nodeid, phase)
    began = time.monotonic()
    try:
        return (yield)
    finally:
        recorder.tests.setdefault(item.nodeid, {})[phase] = round(time.monotonic() - began, 3)
        recorder.where = ("", "between")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    return (yield from _phase(item, "teardown"))


class _FixtureTimer:
    """Registered as a plugin, not a conftest hook: pytest calls a session-scoped fixture's ``pytest_fixture_setup``
    with the session's hooks, which leave out tests/conftest.py (it applies below tests/ only)."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        recorder = self.recorder
        if fixturedef.scope not in ("session", "package", "module"):
            return (yield)
        began = time.monotonic()
        try:
            return (yield)
        finally:
            seconds = time.monotonic() - began
            if seconds >= FIXTURE_MIN_S:
                param = getattr(request, "param", None)
                recorder.fixtures.append(
                    {
                        "name": fixturedef.argname,
                        "scope": fixturedef.scope,
                        "param": None if param is None else str(param),
                        "seconds": round(seconds, 3),
                        "test": recorder.where[0],
                        "began_s": round(began - recorder.started, 1),
                    }
                )


class _ReportTimer:
    """Each test's phases from the reports an xdist worker sends the controller (no fixture or engine-start record:
    the fast tests run this way, and they start no engine)."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.recorder.tests.setdefault(report.nodeid, {"engine": "engine" in report.keywords})
        test[report.when] = round(report.duration, 3)
