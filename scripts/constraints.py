"""Print constraints.txt: the tested version of every package pyproject.toml names, read from this environment.

The extras declare ranges (what an application's own pins may meet); this file is the one set CI and
``make dev`` install and test (``pip install -c constraints.txt``).  Regenerate after moving a version, from
an environment where the whole suite passed: ``make constraints``.  A package named but not installed here
(the GPU build ``vllm`` on a CPU machine) keeps the line it had, else the version its extra starts at.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
HEADER = """\
# The tested set: each package pyproject.toml names, at the version the whole suite passed with.
# `make dev` and CI install with `-c constraints.txt`; pyproject.toml's extras give the ranges an
# application may meet. Written by scripts/constraints.py (`make constraints`): do not edit by hand.
"""


def named_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """Every requirement of the project's dependencies and extras (the project itself left out)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    found = [Requirement(line) for line in lines]
    return [r for r in found if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def pinned(requirement: Requirement) -> str | None:
    """The version a requirement names exactly (``==X``), else its lower bound (``>=X``), if any."""
    for operator in ("==", ">="):
        found = [s.version for s in requirement.specifier if s.operator == operator]
        if found:
            return found[0]
    return None


def previous(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if match:
            out[canonicalize_name(match[1])] = match[2]
    return out


def constraints(old: dict[str, str]) -> str:
    versions: dict[str, str] = {}
    for requirement in named_requirements():
        name = canonicalize_name(requirement.name)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            version = old.get(name) or pinned(requirement) or ""
        if version:
            versions[name] = version
    return HEADER + "".join(f"{name}=={versions[name]}\n" for name in sorted(versions))


if __name__ == "__main__":
    sys.stdout.write(constraints(previous(ROOT / "constraints.txt")))
