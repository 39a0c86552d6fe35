"""What an air-gapped site needs, in one folder: wheels, a model, a manifest of SHA-256 digests and a verifier.

``write_bundle`` gathers a wheelhouse for suffice with the chosen extras (``pip download`` of wheels only, from
an index or from local folders alone), copies a model folder, copies :mod:`suffice.bundle.verify` as
``verify.py`` and writes ``manifest.json`` last: every file's size and SHA-256.  The manifest is authenticated by
its own SHA-256, written beside the bundle as ``DIR.manifest.sha256`` to be carried apart from it, and, with a key
the far side holds, by its HMAC-SHA256 in ``manifest.json.sig``.  On the far side ``python3 verify.py DIR
--expect-manifest-sha256 HEX`` (or ``--key FILE``) checks the bundle before anything from it is installed.

suffice is not on an index, so its own wheel comes from this install, whatever its kind: built from the project
tree of an editable install or of ``source`` (``pip wheel --no-build-isolation``: the environment's build tools,
checked first, no download), else repacked from the installed files of a wheel install.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from suffice.bundle import verify
from suffice.bundle.verify import FORMAT, entries, signature
from suffice.bundle.verify import MANIFEST as MANIFEST
from suffice.bundle.verify import SIGNATURE as SIGNATURE
from suffice.bundle.verify import sha256_of as sha256_of
from suffice.exceptions import ConfigError
from suffice.files import replace_atomically, writing
from suffice.network import read_key_file
from suffice.serving.weights import ModelRef, resolve_model

WHEELS = "wheels"
MODEL = "model"
#: A bundle's own note on how to install it (listed in the manifest like every other file).
README = "INSTALL.txt"
#: The bundle's own verifier (this package's verify.py), run on the far side before suffice is installed.
VERIFIER = "verify.py"
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


def install_command(requirement: str) -> str:
    return f'pip install --no-index --find-links {WHEELS} "{requirement}"'


def requirement_for(extras: Sequence[str]) -> str:
    """``suffice`` with ``extras``; an extra that is not a name is a :class:`ConfigError` naming ``extras``."""
    for extra in extras:
        if not _EXTRA.match(extra):
            raise ConfigError("extras", extra, "must be an extra's name, like cpu, gpu or langchain")
    return f"suffice[{','.join(extras)}]" if extras else "suffice"


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def source_tree() -> Path | None:
    """The project folder suffice runs from, where its wheel can be built: a source checkout's (the folder above the
    imported package holds suffice's pyproject.toml, as with ``PYTHONPATH`` or an editable install), else the one
    an editable install records; ``None`` for a wheel install."""
    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").is_file() and (here / "suffice" / "bundle" / "__init__.py").is_file():
        return here
    try:
        text = importlib.metadata.distribution("suffice").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    info = json.loads(text) if text else {}
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    folder = Path(unquote(url.path)) if url.scheme == "file" else None
    return folder if folder is not None and (folder / "pyproject.toml").is_file() else None


#: pip's own lines around a failure, which say nothing about its cause.
_PIP_NOISE = ("note:", "hint:", "[notice]", "╰─>", "×", "See above for output")


def _pip(args: Sequence[str], what: str, parameter: str) -> None:
    command = [sys.executable, "-m", "pip", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(parameter, what, f"pip took over {PIP_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines()]
        cause = [line for line in lines if line and not line.startswith(_PIP_NOISE)][-8:]
        raise ConfigError(parameter, what, "pip could not gather it: " + " | ".join(cause))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def check_build_tools(tree: Path) -> None:
    """A :class:`ConfigError` naming ``source`` and the tool to install when this environment cannot build the
    project in ``tree`` without a download: its ``build-system`` requirements (``name>=version``), and ``wheel``
    where setuptools is older than 70.1 (before that, its wheels are built by the ``wheel`` package)."""
    with (tree / "pyproject.toml").open("rb") as handle:
        requires = tomllib.load(handle).get("build-system", {}).get("requires", [])
    for requirement in [*requires, "wheel"]:
        name, _, least = (part.strip() for part in requirement.partition(">="))
        if name == "wheel" and _version(importlib.metadata.version("setuptools")) >= (70, 1):
            continue
        try:
            found = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found = None
        if found is None or (least and _version(found) < _version(least)):
            raise ConfigError(
                "source",
                str(tree),
                f"building suffice's wheel uses this environment's build tools (no download) and needs "
                f"{requirement}, found {found or 'none'}: pip install '{requirement}' first",
            )


def _wheel_name(name: str, version: str, tag: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-{tag}.whl"


def repack(dist: importlib.metadata.Distribution, folder: Path) -> Path:
    """``dist`` as a wheel in ``folder``, made from its installed files (its RECORD's, less what the installer
    wrote): how a wheel install of suffice, which no index holds, is carried."""
    info = next((p for p in dist.files or [] if p.parts[0].endswith(".dist-info")), None)
    if info is None:
        raise ConfigError("source", None, "this suffice is not a wheel install: give --source, its project folder")
    info_dir = info.parts[0]
    wheel_text = dist.read_text("WHEEL") or "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")]
    target = folder / _wheel_name(dist.metadata["Name"], dist.version, tags[0] if tags else "py3-none-any")
    records = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel:
        for relative in dist.files or []:
            parts = relative.parts
            if ".." in parts or "__pycache__" in parts or parts[-1] in ("RECORD", "INSTALLER", "REQUESTED"):
                continue
            if parts[0] == info_dir and parts[-1] == "direct_url.json":
                continue
            source = Path(str(dist.locate_file(relative)))
            if not source.is_file():
                continue
            data = source.read_bytes()
            wheel.writestr(relative.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{relative.as_posix()},sha256={digest},{len(data)}")
        records.append(f"{info_dir}/RECORD,,")
        wheel.writestr(f"{info_dir}/RECORD", "\n".join(records) + "\n")
    return target


def own_wheel(folder: Path, source: Path | None) -> Path:
    """suffice's own wheel, written into ``folder``: built from ``source`` (a project tree), else repacked from
    this installation."""
    if source is None:
        return repack(importlib.metadata.distribution("suffice"), folder)
    check_build_tools(source)
    _pip(["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(folder), str(source)], str(source), "source")
    return next(folder.glob("suffice-*.whl"))


def _gather_wheels(
    wheels: Path,
    extras: Sequence[str],
    find_links: Sequence[Path],
    no_index: bool,
    constraints: Path | None,
    source: Path | None,
) -> None:
    with tempfile.TemporaryDirectory(prefix="suffice-bundle-") as built:
        # suffice is named by its wheel's path, never looked up: an index's "suffice" would be someone else's.
        wheel = own_wheel(Path(built), source)
        requirement = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        args = ["download", "-q", "--only-binary=:all:", "--dest", str(wheels)]
        if no_index:
            args.append("--no-index")
        for link in find_links:
            args += ["--find-links", str(Path(link).resolve())]
        if constraints is not None:
            args += ["--constraint", str(constraints)]
        _pip([*args, requirement], requirement_for(extras), "find_links" if no_index else "extras")


def _copy_model(model: ModelRef, target: Path) -> None:
    for file in sorted(p for p in model.path.rglob("*") if p.is_file()):
        relative = file.relative_to(model.path)
        if relative.parts[0].startswith(".suffice-"):
            continue  # the converter's own marker, not the model's
        destination = target / relative
        with writing(destination):
            destination.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(destination, _chunks(file), mode=0o644)


def _readme(requirement: str, model: str | None) -> bytes:
    lines = [
        "A suffice bundle (written by `suffice bundle`). On the machine without a network, in this folder:",
        "",
        f"    python3 {VERIFIER} . --expect-manifest-sha256 HEX    # before anything is installed (exit 0: intact)",
        f"        (HEX: the {MANIFEST} SHA-256 `suffice bundle` printed, carried apart; or --key FILE if signed)",
        "    python -m venv .venv && . .venv/bin/activate",
        f"    {install_command(requirement)}",
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
    sign_key: str | os.PathLike[str] | None = None,
) -> Manifest:
    """Write a bundle into ``folder`` (new or empty): ``wheels/`` for ``suffice[extras]``, ``model/NAME/``
    (``model``: ``"embedded"`` or a local model folder; ``None``: no model, the client-only set), ``INSTALL.txt``
    and ``manifest.json``.  ``find_links``: local folders of wheels; ``no_index``: those alone, no index;
    ``source``: the project tree to build suffice's wheel from (default: an editable install's; a wheel install's
    own files otherwise); ``sign_key``: a key file to sign the manifest with (``manifest.json.sig``).  The manifest's
    SHA-256 is written beside the folder, as ``DIR.manifest.sha256`` (``sha256sum -c`` reads it there)."""
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
    tree = Path(source) if source is not None else source_tree()
    if tree is not None and not (tree / "pyproject.toml").is_file():
        raise ConfigError("source", str(tree), "has no pyproject.toml (give suffice's project folder)")
    key = read_key_file(sign_key, "sign_key", forging="sign a bundle the far side installs") if sign_key else None
    if key is not None and not key:
        raise ConfigError("sign_key", str(sign_key), "is empty: give a key (suffice audit keygen writes one)")
    chosen = resolve_model(None if model == "embedded" else model) if model is not None else None
    with writing(target):
        (target / WHEELS).mkdir(parents=True, exist_ok=True)
    _gather_wheels(
        target / WHEELS,
        list(extras),
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
    replace_atomically(target / VERIFIER, [Path(verify.__file__).read_bytes()], mode=0o644)
    manifest = Manifest(requirement=requirement, extras=list(extras), model=f"{MODEL}/{name}" if name else None)
    for relative, size in sorted(entries(target)[0].items()):
        manifest.files.append(BundleFile(relative, sha256_of(target / relative), size))
    text = (json.dumps(manifest.as_json(), indent=2, sort_keys=True) + "\n").encode()
    if key is not None:
        replace_atomically(target / SIGNATURE, [f"{signature(text, key)}\n".encode()], mode=0o644)
    replace_atomically(target / MANIFEST, [text], mode=0o644)
    whole = target.resolve()
    digest = f"{hashlib.sha256(text).hexdigest()}  {whole.name}/{MANIFEST}\n"
    replace_atomically(whole.parent / f"{whole.name}.manifest.sha256", [digest.encode()], mode=0o644)
    return manifest
