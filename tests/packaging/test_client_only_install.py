"""``pip install suffice`` with no extra is the client, the integrations' common part and the pytest plugin,
without vLLM, torch or transformers: proven in a fresh virtual environment installed with ``--no-index``
from a local wheelhouse (no network), where a client judges through a running service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import ScriptedEngine
from tests.integrations.conftest import verdict_for
from tests.test_client import serve

#: What suffice must never import on the client's path: the engine's stack.
HEAVY = ("vllm", "torch", "transformers")


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_CONSTRAINT", "PIP_FIND_LINKS")}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, **kwargs)  # type: ignore[call-overload,no-any-return]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, client_wheels: Path) -> Path:
    """A new virtual environment with ``suffice`` and ``pytest`` installed from the wheelhouse alone."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    offline = ["--no-index", "--find-links", str(client_wheels)]
    installed = _run([str(python), "-m", "pip", "install", "-q", *offline, "suffice", "pytest"])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


#: What the client install leaves to extras: Parquet (``suffice[parquet]``) and the server (``suffice[serve]``).
EXTRAS_ONLY = ("pyarrow", "fastapi", "uvicorn", "prometheus_client")


def test_no_extra_installs_neither_the_engine_nor_parquet_nor_the_server(fresh: Path):
    probe = "import importlib.util, json; print(json.dumps({m: importlib.util.find_spec(m) is not None for m in %r}))"
    found = _run([str(fresh), "-c", probe % ((*HEAVY, *EXTRAS_ONLY),)])
    assert json.loads(found.stdout) == dict.fromkeys((*HEAVY, *EXTRAS_ONLY), False), found.stderr


def test_the_client_the_integrations_and_the_plugin_import_without_them(fresh: Path):
    code = f"HEAVY = {HEAVY!r}\n" + textwrap.dedent(
        """
        import json, sys
        import suffice
        from suffice import Client, AsyncClient
        import suffice.client, suffice.integrations, suffice.integrations.gating, suffice.testing
        import suffice.testing.plugin
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)))
        """
    )
    done = _run([str(fresh), "-c", code], cwd=fresh.parent)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_pytest_finds_the_plugin_by_its_entry_point(fresh: Path, tmp_path: Path):
    done = _run([str(fresh), "-m", "pytest", "--help"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--suffice-server=URL" in done.stdout


@pytest.fixture
def service() -> Iterator[str]:
    with serve(ScriptedEngine(verdict_for)) as url:
        yield url


def test_a_client_judges_through_a_service(fresh: Path, service: str):
    record = {"id": "a", "question": "Where did Apollo 11 land?", "chunks": [{"id": 0, "text": "On the Moon."}]}
    code = (
        "import json, sys, suffice\n"
        f"result = suffice.Client({service!r}).judge({record!r})\n"
        "print(json.dumps({'sufficient': result.verdict.is_sufficient, 'engine': 'vllm' in sys.modules}))"
    )
    done = _run([str(fresh), "-c", code])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"sufficient": True, "engine": False}
