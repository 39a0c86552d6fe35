"""A wheelhouse made from this environment's installed distributions, for installs with the network cut.

CI's environment was installed from wheels that pip does not keep (its cache holds HTTP responses, not
wheels), so each distribution a test needs is packed again from what is installed: the files its RECORD
lists inside site-packages, its ``.dist-info`` with the tags of the wheel it came from, and a new RECORD.
Scripts outside site-packages are left out (pip writes them again from ``entry_points.txt``).  The project
itself is built as a wheel from this tree (``pip wheel --no-build-isolation``: no network).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from suffice.bundle import repack

ROOT = Path(__file__).resolve().parents[2]


def closure(names: Iterable[str], extras: Iterable[str] = ()) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` need, themselves included (``extras``: of the first level only)."""
    wanted = list(names)
    chosen = set(extras)
    seen: dict[str, importlib.metadata.Distribution] = {}
    queue = [(name, chosen) for name in wanted]
    while queue:
        name, with_extras = queue.pop()
        key = canonicalize_name(name)
        if key in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker: Marker | None = requirement.marker
            if marker is not None and not any(
                marker.evaluate({"extra": extra}) for extra in ("", *sorted(with_extras))
            ):
                continue
            queue.append((requirement.name, set(requirement.extras)))
    return sorted(seen.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def build_project(folder: Path) -> Path:
    """This tree as a wheel in ``folder`` (no build isolation: setuptools is the environment's, no download)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(folder), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(folder.glob("suffice-*.whl"))


def wheelhouse(folder: Path, names: Iterable[str]) -> Path:
    """``folder`` holding the project's wheel and one for every installed distribution ``names`` need (the
    project's own dependencies with no extra included through ``suffice``)."""
    folder.mkdir(parents=True, exist_ok=True)
    build_project(folder)
    for dist in closure(names):
        if canonicalize_name(dist.metadata["Name"]) != "suffice":
            repack(dist, folder)
    return folder
