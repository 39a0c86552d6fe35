"""suffice's pytest plugin (entry point ``pytest11``, loaded wherever suffice is installed beside pytest).

Fixtures:

* ``suffice_judge`` (session): the judge every test shares.  With ``--suffice-server URL`` a
  :class:`~suffice.Client` of that ``suffice serve`` (key: read from ``--suffice-api-key-file``, else
  ``$SUFFICE_API_KEY``; never on the command line, where other users' ``ps`` would show it);
  without it an in-process :class:`~suffice.Judge` (``--suffice-model PATH``: a local model folder, else the
  embedded one), started at the first test that asks for it and closed at the session's end.  A conftest.py
  that defines its own ``suffice_judge`` replaces it.
* ``suffice_gate`` (function): the helpers of :mod:`suffice.testing` bound to that judge and to the test, so
  each verdict lands in the JUnit XML report (``--junitxml``) as a property of the test.

A test fails when the gate says no (an :class:`AssertionError`); it is an error when the gate could not answer: a
service that cannot be reached or refuses the key (found once, before the first test), an engine this install
lacks, a bad record (any suffice error in a test using these fixtures), each said as what to fix.

Nothing here is imported until pytest loads the plugin, and nothing starts until a test asks for a fixture.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import pytest

from suffice import testing
from suffice.exceptions import (
    AuthenticationError,
    GateFailedError,
    InsufficientContextError,
    MissingExtraError,
    ServiceError,
    SufficeError,
)
from suffice.network import read_key_file
from suffice.results import JudgeResult
from suffice.testing import assertions, labels

if TYPE_CHECKING:
    from suffice.client import Client
    from suffice.judge import Judge

#: The environment variable read for the service's key when ``--suffice-api-key-file`` is not given.
API_KEY_ENV = "SUFFICE_API_KEY"

P = ParamSpec("P")
R = TypeVar("R")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("suffice", "suffice evidence gates")
    group.addoption(
        "--suffice-server",
        metavar="URL",
        default=None,
        help="judge through this suffice serve (a suffice.Client) instead of an in-process judge",
    )
    group.addoption(
        "--suffice-api-key-file",
        metavar="PATH",
        default=None,
        help=f"file holding the service's bearer key (default: ${API_KEY_ENV})",
    )
    group.addoption(
        "--suffice-model",
        metavar="PATH",
        default=None,
        help="in process: a local Hugging Face model folder (default: the embedded model)",
    )


def _opened(config: pytest.Config) -> Judge | Client:
    """A client of ``--suffice-server`` that reached the service with its key, else an in-process judge."""
    server = config.getoption("suffice_server")
    if not server:
        from suffice.config import JudgeConfig
        from suffice.judge import Judge
        from suffice.serving.engine_config import EngineConfig

        model = config.getoption("suffice_model")
        return Judge.open(JudgeConfig(engine=EngineConfig(model=Path(model) if model else None)))
    from suffice.client import Client

    given = config.getoption("suffice_api_key_file")
    key = read_key_file(given, "suffice_api_key_file", forging=None).decode() if given else None
    key = key or os.environ.get(API_KEY_ENV) or None
    # Where the key came from, as a 401 says it (or where to give one).
    flag = "--suffice-api-key-file"
    source = flag if given else f"${API_KEY_ENV}" if key else f"{flag} or ${API_KEY_ENV}"
    client = Client(server, api_key=key, api_key_source=source)
    try:
        client.settings()  # one request before any test: the service answers, and takes the key
    except ServiceError as exc:
        # A gate it does not serve, or an engine still loading, is for the tests to meet.
        if exc.status is None or isinstance(exc, AuthenticationError):
            client.close()
            raise
    return client


@pytest.fixture(scope="session")
def suffice_judge(pytestconfig: pytest.Config) -> Iterator[testing.JudgeLike]:
    """The session's judge, started at the first test that asks; one that cannot be had is every such test's
    error, in one line saying what to fix."""
    try:
        judge = _opened(pytestconfig)
    except SufficeError as exc:
        then = ""
        if isinstance(exc, MissingExtraError):
            then = "; with pytest: --suffice-server URL"
        elif isinstance(exc, ServiceError) and exc.status is None:
            then = "; start suffice serve there, or give its URL with --suffice-server"
        failed = f"suffice_judge: {exc}{then}"
    else:
        with judge:
            yield judge
        return
    pytest.fail(failed, pytrace=False)  # out of the except: the message alone, not the chain of causes


def _on_judge(helper: Callable[Concatenate[testing.JudgeLike, P], R]) -> Callable[Concatenate[GateChecks, P], R]:
    """``helper`` as a method of :class:`GateChecks`: on its judge, each verdict a property of its test."""

    def method(self: GateChecks, /, *args: P.args, **kwargs: P.kwargs) -> R:
        __tracebackhide__ = True
        kwargs.setdefault("record_property", self.record_property)
        return helper(self.judge, *args, **kwargs)

    method.__doc__ = helper.__doc__
    return method


class GateChecks:
    """The helpers of :mod:`suffice.testing` on one judge, each verdict recorded as a property of one test."""

    def __init__(self, judge: testing.JudgeLike, node: pytest.Item) -> None:
        self.judge = judge
        self._node = node

    def record_property(self, name: str, value: object) -> None:
        self._node.user_properties.append((name, value))

    def judge_records(
        self, records: list[object], gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        return testing.judge_records(self.judge, records, gate, options)

    assert_passes = _on_judge(assertions.assert_passes)
    assert_sufficient = _on_judge(assertions.assert_sufficient)
    assert_insufficient = _on_judge(assertions.assert_insufficient)
    assert_supported = _on_judge(assertions.assert_supported)
    assert_adequate = _on_judge(assertions.assert_adequate)
    assert_agreement = _on_judge(labels.assert_agreement)


@pytest.fixture
def suffice_gate(suffice_judge: testing.JudgeLike, request: pytest.FixtureRequest) -> GateChecks:
    """The assertion helpers on the session's judge; each verdict becomes a JUnit XML property of this test."""
    return GateChecks(suffice_judge, request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # A suffice error is the judge unable to answer (the service, its key, the record); these two are its answer.
    answer = (InsufficientContextError, GateFailedError)
    error = call.excinfo
    if error is not None and error.errisinstance(SufficeError) and not error.errisinstance(answer):
        could_not = "suffice_judge" in getattr(item, "fixturenames", ())
        report.suffice_could_not_judge = could_not  # type: ignore[attr-defined]
    return report


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """A test a suffice error ended is an error, as one whose fixture failed is."""
    return ("error", "E", "ERROR") if getattr(report, "suffice_could_not_judge", False) else None
