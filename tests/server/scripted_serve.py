"""``suffice serve`` as its own process with a scripted engine, for tests that attack the process.

Everything but the engine is the real thing: the command line, the settings, the uvicorn server
and its protocol, the guards and the routes.  Run as
``python -m tests.server.scripted_serve serve --port N ...``; ``SCRIPTED_GENERATION_S`` (default
0.05) is what one generation takes, so a judge request costs about what a small real one does;
``SCRIPTED_START_S`` (default 0) is what the engine's start takes, and ``SCRIPTED_START_FAILS`` set makes
the start fail with a :class:`~suffice.exceptions.ConfigError` naming ``model``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from suffice.cli.main import main
from suffice.exceptions import ConfigError
from suffice.server import service
from suffice.serving.base import GenerationRequest
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine

GENERATION_S = float(os.environ.get("SCRIPTED_GENERATION_S", "0.05"))
START_S = float(os.environ.get("SCRIPTED_START_S", "0"))
START_FAILS = bool(os.environ.get("SCRIPTED_START_FAILS"))


def _slow_good(request: GenerationRequest) -> str:
    time.sleep(GENERATION_S)
    return good(request)


def _start(config: object) -> ScriptedEngine:
    time.sleep(START_S)
    if START_FAILS:
        raise ConfigError("model", "scripted", "the scripted engine was told to fail its start")
    return ScriptedEngine(_slow_good)


def wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until the service started as ``process`` on ``port`` answers ``/ready`` (its output in ``log``, shown if it
    exits or is not ready within two minutes)."""
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            pytest.fail(f"suffice serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"suffice serve not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def run(argv: list[str]) -> int:
    service.make_engine = _start  # type: ignore[assignment]
    service.engine_settings = ScriptedEngine.settings_of  # type: ignore[assignment]
    return main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
