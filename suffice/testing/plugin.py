"""suffice's pytest plugin (entry point ``pytest11``, loaded wherever suffice is installed beside pytest).

Fixtures:

* ``suffice_judge`` (session): the judge every test shares.  With ``--suffice-server URL`` a
  :class:`~suffice.Client` of that ``suffice serve`` (key: ``--suffice-api-key``, else ``$SUFFICE_API_KEY``);
  without it an in-process :class:`~suffice.Judge` (``--suffice-model PATH``: a local model folder, else the
  embedded one), started at the first test that asks for it and closed at the session's end.  A conftest.py
  that defines its own ``suffice_judge`` replaces it.
* ``suffice_gate`` (function): the helpers of :mod:`suffice.testing` bound to that judge and to the test, so
  each verdict lands in the JUnit XML report (``--junitxml``) as a property of the test.

Nothing here is imported until pytest loads the plugin, and nothing starts until a test asks for a fixture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from suffice import testing
from suffice.results import JudgeResult

#: The environment variable read for the service's key when ``--suffice-api-key`` is not given.
API_KEY_ENV = "SUFFICE_API_KEY"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("suffice", "suffice evidence gates")
    group.addoption(
        "--suffice-server",
        metavar="URL",
        default=None,
        help="judge through this suffice serve (a suffice.Client) instead of an in-process judge",
    )
    group.addoption(
        "--suffice-api-key", metavar="KEY", default=None, help=f"the service's bearer key (default: ${API_KEY_ENV})"
    )
    group.addoption(
        "--suffice-model",
        metavar="PATH",
        default=None,
        help="in process: a local Hugging Face model folder (default: the embedded model)",
    )


@pytest.fixture(scope="session")
def suffice_judge(pytestconfig: pytest.Config) -> Iterator[testing.JudgeLike]:
    """The session's judge: a client of ``--suffice-server``, else an in-process judge."""
    server = pytestconfig.getoption("suffice_server")
    if server:
        from suffice.client import Client

        given = pytestconfig.getoption("suffice_api_key")
        key = given or os.environ.get(API_KEY_ENV) or None
        # Where the key came from, as a 401 says it (or where to give one).
        source = "--suffice-api-key" if given else f"${API_KEY_ENV}" if key else f"--suffice-api-key or ${API_KEY_ENV}"
        with Client(server, api_key=key, api_key_source=source) as client:
            yield client
        return
    from suffice.config import JudgeConfig
    from suffice.judge import Judge
    from suffice.serving.engine_config import EngineConfig

    model = pytestconfig.getoption("suffice_model")
    judge = Judge.open(JudgeConfig(engine=EngineConfig(model=Path(model) if model else None)))
    try:
        yield judge
    finally:
        judge.close()


class GateChecks:
    """The helpers of :mod:`suffice.testing` on one judge, each verdict recorded as a property of one test."""

    def __init__(self, judge: testing.JudgeLike, node: pytest.Item) -> None:
        self.judge = judge
        self._node = node

    def _property(self, name: str, value: object) -> None:
        self._node.user_properties.append((name, value))

    def judge_records(
        self, records: list[object], gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        return testing.judge_records(self.judge, records, gate, options)

    def assert_passes(
        self, record: object, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        return testing.assert_passes(self.judge, record, gate, options, record_property=self._property)

    def assert_sufficient(self, record: object, options: Mapping[str, Any] | None = None) -> JudgeResult:
        return testing.assert_sufficient(self.judge, record, options, record_property=self._property)

    def assert_insufficient(self, record: object, options: Mapping[str, Any] | None = None) -> JudgeResult:
        return testing.assert_insufficient(self.judge, record, options, record_property=self._property)

    def assert_supported(
        self, record: object, options: Mapping[str, Any] | None = None, *, allow_unsupported: bool = False
    ) -> JudgeResult:
        return testing.assert_supported(
            self.judge, record, options, allow_unsupported=allow_unsupported, record_property=self._property
        )

    def assert_adequate(self, record: object, options: Mapping[str, Any] | None = None) -> JudgeResult:
        return testing.assert_adequate(self.judge, record, options, record_property=self._property)

    def assert_agreement(
        self,
        path: str | Path,
        gate: str = testing.SUFFICIENCY,
        options: Mapping[str, Any] | None = None,
        *,
        min_agreement: float | None = None,
        min_recall: float | None = None,
        min_precision: float | None = None,
        label: str = "sufficient",
        limit: int | None = None,
    ) -> testing.Agreement:
        return testing.assert_agreement(
            self.judge,
            path,
            gate,
            options,
            min_agreement=min_agreement,
            min_recall=min_recall,
            min_precision=min_precision,
            label=label,
            limit=limit,
            record_property=self._property,
        )


@pytest.fixture
def suffice_gate(suffice_judge: testing.JudgeLike, request: pytest.FixtureRequest) -> GateChecks:
    """The assertion helpers on the session's judge; each verdict becomes a JUnit XML property of this test."""
    return GateChecks(suffice_judge, request.node)
