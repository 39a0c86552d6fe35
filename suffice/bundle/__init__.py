"""What an air-gapped site needs, in one folder: wheels, a model, and a manifest of SHA-256 digests.

``write_bundle`` gathers a wheelhouse for suffice with the chosen extras (``pip download`` of wheels only, from
an index or from local folders alone), copies a model folder, and writes ``manifest.json`` last: every file's
size and SHA-256.  On the far side ``pip install --no-index --find-links DIR/wheels "suffice[EXTRAS]"`` installs
it and :func:`verify_bundle` (``suffice models verify DIR``) checks that what arrived is what left: a file
changed, missing or added is named.

The project's own wheel comes from the source tree of an editable install (``pip wheel --no-build-isolation``,
no download), else from the index or ``find_links`` like any other.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from suffice.exceptions import ConfigError, InputError
from suffice.files import replace_atomically, writing
from suffice.serving.models import ModelRef, resolve_model

#: The manifest's name in a bundle, and the value of its ``format`` key.
MANIFEST = "manifest.json"
FORMAT = "suffice-bundle/1"
WHEELS = "wheels"
MODEL = "model"
#: A bundle's own note on how to install it (listed in the manifest like every other file).
README = "INSTALL.txt"
_CHUNK = 1 << 20
#: How long one pip run may take (a GPU set is gigabytes from an index).
PIP_TIMEOUT_S = 3600
_EXTRA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class BundleFile:
    path: str
    sha256: str
    bytes: int


@dataclass
class Manifest:
    """What a bundle holds: the requirement its wheels install, the model folder (if any), every file's digest."""

    requirement: str
    extras: list[str]
    model: str | None
    files: list[BundleFile] = field(default_factory=list)
    python: str = field(default_factory=platform.python_version)
    platform: str = field(default_factory=lambda: f"{sys.platform}-{platform.machine()}")

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "requirement": self.requirement,
            "extras": self.extras,
            "model": self.model,
            "python": self.python,
            "platform": self.platform,
            "install": install_command(self.requirement),
            "files": {f.path: {"sha256": f.sha256, "bytes": f.bytes} for f in self.files},
        }


@dataclass(frozen=True)
class Problem:
    """One way a bundle differs from its manifest."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def install_command(requirement: str) -> str:
    return f'pip install --no-index --find-links {WHEELS} "{requirement}"'


def requirement_for(extras: Sequence[str]) -> str:
    """``suffice`` with ``extras``; an extra that is not a name is a :class:`ConfigError` naming ``extras``."""
    for extra in extras:
        if not _EXTRA.match(extra):
            raise ConfigError("extras", extra, "must be an extra's name, like cpu, gpu or langchain")
    return f"suffice[{','.join(extras)}]" if extras else "suffice"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def source_tree() -> Path | None:
    """The project folder of an editable install of suffice (where its wheel can be built), if this is one."""
    try:
        text = importlib.metadata.distribution("suffice").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    folder = Path(unquote(url.path)) if url.scheme == "file" else None
    return folder if folder is not None and (folder / "pyproject.toml").is_file() else None


def _pip(args: Sequence[str], what: str, parameter: str) -> None:
    command = [sys.executable, "-m", "pip", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(parameter, what, f"pip took over {PIP_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
        raise ConfigError(parameter, what, "pip could not gather it: " + " | ".join(tail))


def _gather_wheels(
    wheels: Path,
    requirement: str,
    find_links: Sequence[Path],
    no_index: bool,
    constraints: Path | None,
    source: Path | None,
) -> None:
    links = [str(Path(link).resolve()) for link in find_links]
    with tempfile.TemporaryDirectory(prefix="suffice-bundle-") as built:
        if source is not None:
            # The project's own wheel, built from its tree: no build isolation, so nothing is downloaded for it.
            _pip(["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", built, str(source)], str(source), "source")
            links.insert(0, built)
        args = ["download", "-q", "--only-binary=:all:", "--dest", str(wheels)]
        if no_index:
            args.append("--no-index")
        for link in links:
            args += ["--find-links", link]
        if constraints is not None:
            args += ["--constraint", str(constraints)]
        _pip([*args, requirement], requirement, "find_links" if no_index else "extras")


def _copy_model(model: ModelRef, target: Path) -> None:
    for file in sorted(p for p in model.path.rglob("*") if p.is_file()):
        relative = file.relative_to(model.path)
        if relative.parts[0].startswith(".suffice-"):
            continue  # the converter's own marker, not the model's
        destination = target / relative
        with writing(destination):
            destination.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(destination, _chunks(file), mode=0o644)


def _listing(folder: Path) -> list[str]:
    """Every file under ``folder`` but the manifest, as relative POSIX paths, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _readme(requirement: str, model: str | None) -> bytes:
    lines = [
        "A suffice bundle (written by `suffice bundle`). On the machine without a network:",
        "",
        "    python -m venv .venv && . .venv/bin/activate",
        f"    {install_command(requirement)}",
        "    suffice models verify .      # every file against manifest.json (exit 0: intact)",
    ]
    if model is not None:
        lines += ["", f"The model folder: {MODEL}/{model} (pass it as --model)."]
    return ("\n".join(lines) + "\n").encode()


def write_bundle(
    folder: str | os.PathLike[str],
    extras: Sequence[str] = (),
    *,
    find_links: Sequence[str | os.PathLike[str]] = (),
    no_index: bool = False,
    constraints: str | os.PathLike[str] | None = None,
    model: str | None = None,
    source: str | os.PathLike[str] | None = None,
    build_source: bool = True,
) -> Manifest:
    """Write a bundle into ``folder`` (new or empty): ``wheels/`` for ``suffice[extras]``, ``model/NAME/``
    (``model``: ``"embedded"`` or a local model folder; ``None``: no model, the client-only set), ``INSTALL.txt``
    and ``manifest.json``.  ``find_links``: local folders of wheels; ``no_index``: those alone, no index;
    ``source``: the project tree to build suffice's wheel from (default: an editable install's, if
    ``build_source``)."""
    target = Path(folder)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError("folder", str(target), "must be a new or empty folder (a bundle is written whole)")
    requirement = requirement_for(list(extras))
    if no_index and not find_links:
        raise ConfigError("find_links", [], "--no-index needs at least one --find-links folder of wheels")
    for link in find_links:
        if not Path(link).is_dir():
            raise ConfigError("find_links", str(link), "is not a folder")
    if constraints is not None and not Path(constraints).is_file():
        raise ConfigError("constraints", str(constraints), "is not a file")
    tree = Path(source) if source is not None else source_tree() if build_source else None
    if tree is not None and not (tree / "pyproject.toml").is_file():
        raise ConfigError("source", str(tree), "has no pyproject.toml (give suffice's project folder)")
    chosen = resolve_model(None if model == "embedded" else model) if model is not None else None
    with writing(target):
        (target / WHEELS).mkdir(parents=True, exist_ok=True)
    _gather_wheels(
        target / WHEELS,
        requirement,
        [Path(link) for link in find_links],
        no_index,
        Path(constraints) if constraints is not None else None,
        tree,
    )
    name = None
    if chosen is not None:
        name = chosen.path.name
        _copy_model(chosen, target / MODEL / name)
    replace_atomically(target / README, [_readme(requirement, name)], mode=0o644)
    manifest = Manifest(requirement=requirement, extras=list(extras), model=f"{MODEL}/{name}" if name else None)
    for relative in _listing(target):
        path = target / relative
        manifest.files.append(BundleFile(relative, sha256_of(path), path.stat().st_size))
    text = json.dumps(manifest.as_json(), indent=2, sort_keys=True) + "\n"
    replace_atomically(target / MANIFEST, [text.encode()], mode=0o644)
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the bundle in ``folder``; a missing or unreadable one is an :class:`InputError`."""
    path = folder / MANIFEST
    if not path.is_file():
        raise InputError("manifest", f"{path} does not exist: not a suffice bundle (suffice bundle DIR writes one)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError("manifest", f"{path} is not JSON: {exc}") from exc
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise InputError("manifest", f"{path} is not a {FORMAT} manifest")
    return manifest


def verify_bundle(folder: str | os.PathLike[str]) -> list[Problem]:
    """Every difference between the bundle in ``folder`` and its manifest: a file changed (its digest or size),
    missing, or there but not listed.  Empty: intact."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError("folder", f"{root} is not a folder")
    listed = read_manifest(root)["files"]
    problems = []
    for relative, expected in sorted(listed.items()):
        path = root / relative
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            problems.append(Problem(relative, "names a file outside the bundle"))
        elif not path.is_file():
            problems.append(Problem(relative, "is missing"))
        elif path.stat().st_size != expected.get("bytes"):
            problems.append(
                Problem(relative, f"is {path.stat().st_size} bytes, the manifest says {expected.get('bytes')}")
            )
        elif sha256_of(path) != expected.get("sha256"):
            problems.append(Problem(relative, "differs from the manifest (SHA-256)"))
    problems += [Problem(relative, "is not in the manifest") for relative in _listing(root) if relative not in listed]
    return problems
