"""Check a suffice bundle against its manifest, before suffice is installed: this file is copied into every bundle
as ``verify.py`` and runs on the far side's bare Python (standard library only)::

    python3 verify.py            # in the bundle's folder, or: python3 verify.py DIR

Exit 0: every file is what left (the manifest's own SHA-256 is printed, to compare with the one ``suffice bundle``
printed where the bundle was made); 4: a file changed, missing or added, each named; 2: no readable manifest.
``suffice models verify DIR`` is the same check (:func:`suffice.bundle.verify_bundle` calls :func:`problems`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
FORMAT = "suffice-bundle/1"
_CHUNK = 1 << 20


class ManifestError(Exception):
    """No manifest, or not one a bundle writes."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def listing(folder: Path) -> list[str]:
    """Every file under ``folder`` but the manifest, as relative POSIX paths, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        raise ManifestError(f"{path} does not exist: not a suffice bundle (suffice bundle DIR writes one)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path} is not JSON: {exc}") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != FORMAT:
        raise ManifestError(f"{path} is not a {FORMAT} manifest")
    read: dict[str, Any] = manifest
    return read


def problems(root: Path) -> list[tuple[str, str]]:
    """Every difference between the bundle in ``root`` and its manifest, as (path, reason); empty: intact."""
    listed = read_manifest(root)["files"]
    found = []
    for relative, expected in sorted(listed.items()):
        path = root / relative
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            found.append((relative, "names a file outside the bundle"))
        elif not path.is_file():
            found.append((relative, "is missing"))
        elif path.stat().st_size != expected.get("bytes"):
            found.append((relative, f"is {path.stat().st_size} bytes, the manifest says {expected.get('bytes')}"))
        elif sha256_of(path) != expected.get("sha256"):
            found.append((relative, "differs from the manifest (SHA-256)"))
    return found + [(relative, "is not in the manifest") for relative in listing(root) if relative not in listed]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent
    try:
        found = problems(root)
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path, reason in found:
        print(f"FAILED {path}: {reason}", file=sys.stderr)
    if found:
        print(f"{len(found)} file(s) differ from {root / MANIFEST}: do not install this bundle", file=sys.stderr)
        return 4
    count = len(read_manifest(root)["files"])
    print(f"ok: every file of {count} matches {MANIFEST} (sha256 {sha256_of(root / MANIFEST)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
