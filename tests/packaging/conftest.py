"""One wheelhouse of the client-only set for the packaging tests: the project's wheel, its dependencies with
no extra, and pytest (the plugin's host), packed from this environment (tests/packaging/wheelhouse.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.packaging.wheelhouse import wheelhouse

#: What an application that judges through ``suffice serve`` installs: suffice with no extra, and pytest.
CLIENT_SET = ("suffice", "pytest")


@pytest.fixture(scope="session")
def client_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheelhouse(tmp_path_factory.mktemp("wheelhouse") / "wheels", CLIENT_SET)
