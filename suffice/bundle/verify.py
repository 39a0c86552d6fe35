"""Check a suffice bundle before anything from it is installed: this file is copied into every bundle as
``verify.py`` and runs on the far side's own Python (standard library only)::

    python3 verify.py DIR --expect-manifest-sha256 HEX    # HEX: what `suffice bundle` printed, carried apart
    python3 verify.py DIR --key FILE                      # a bundle written with `suffice bundle --sign-key FILE`

The manifest is authenticated first (its SHA-256 against HEX, or its HMAC-SHA256 in ``manifest.json.sig`` under
the key): a manifest neither authenticates is never trusted, as whoever swaps a file can rewrite it.  Then every
file is checked against it.  Exit 0: intact; 4: the manifest is not the one that left, or a file changed, is
missing, is not listed, or is a link (none is followed), each named; 2: no readable manifest, or no way given to
authenticate it.  ``suffice models verify DIR`` is the same check.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
#: The manifest's HMAC-SHA256 (hex) under the key of ``suffice bundle --sign-key``.
SIGNATURE = MANIFEST + ".sig"
FORMAT = "suffice-bundle/1"
_CHUNK = 1 << 20
#: A file is read where it is: a link or a FIFO put in its place fails the open instead of being followed or awaited.
_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class ManifestError(Exception):
    """No manifest, not one a bundle writes, or no way given to authenticate it."""


def _read(path: Path) -> Iterator[bytes]:
    fd = os.open(path, _OPEN)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        while chunk := handle.read(_CHUNK):
            yield chunk


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    for chunk in _read(path):
        digest.update(chunk)
    return digest.hexdigest()


def signature(manifest: bytes, key: bytes) -> str:
    return hmac.new(key, manifest, hashlib.sha256).hexdigest()


def entries(folder: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Every regular file under ``folder`` but the manifest and its signature (relative POSIX path: size), and
    everything else found there but folders (a link, a FIFO), as (path, reason).  Links are not followed."""
    files: dict[str, int] = {}
    others = []
    for top, folders, names in os.walk(folder):
        for name in folders + names:
            path = Path(top, name)
            relative, info = path.relative_to(folder).as_posix(), path.lstat()
            if stat.S_ISLNK(info.st_mode):
                others.append((relative, f"is a link (to {os.readlink(path)}): a bundle holds none"))
            elif stat.S_ISREG(info.st_mode) and relative not in (MANIFEST, SIGNATURE):
                files[relative] = info.st_size
            elif not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
                others.append((relative, "is not a regular file"))
    return files, others


def _authenticate(root: Path, manifest: bytes, expect_sha256: str | None, key: bytes | None) -> list[tuple[str, str]]:
    """Why the manifest is not the one that left (empty: it is), by ``expect_sha256`` and ``key``, both if given."""
    if expect_sha256 is None and key is None:
        raise ManifestError(
            f"{root / MANIFEST} is not authenticated: give --expect-manifest-sha256 HEX (the digest `suffice bundle` "
            "printed, carried apart from the bundle) or --key FILE (the key of `suffice bundle --sign-key`)"
        )
    if expect_sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", expect_sha256):
        raise ManifestError(f"--expect-manifest-sha256 {expect_sha256!r} is not a SHA-256 (64 hex digits)")
    if key is not None and not key:
        raise ManifestError("the key file is empty")
    found = []
    digest = hashlib.sha256(manifest).hexdigest()
    if expect_sha256 is not None and not hmac.compare_digest(digest, expect_sha256.lower()):
        found.append((MANIFEST, f"its SHA-256 is {digest}, not {expect_sha256.lower()}: not the manifest that left"))
    if key is not None:
        try:
            signed = b"".join(_read(root / SIGNATURE)).strip()
        except OSError as exc:
            found.append((SIGNATURE, f"cannot be read ({exc.strerror or exc}): the bundle is not signed"))
        else:
            if not hmac.compare_digest(signed, signature(manifest, key).encode()):
                found.append((SIGNATURE, f"is not {MANIFEST}'s signature under this key: a bad signature"))
    return found


def check(root: Path, expect_sha256: str | None = None, key: bytes | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The manifest's SHA-256 and every problem of the bundle in ``root`` as (path, reason): none, intact.  The
    files are checked only once the manifest is authenticated (``expect_sha256`` or ``key``, else a
    :class:`ManifestError`)."""
    try:
        manifest = b"".join(_read(root / MANIFEST))
    except OSError as exc:
        raise ManifestError(f"{root / MANIFEST}: {exc.strerror or exc}: not a suffice bundle") from exc
    digest = hashlib.sha256(manifest).hexdigest()
    found = _authenticate(root, manifest, expect_sha256, key)
    if found:
        return digest, found
    try:
        parsed = json.loads(manifest)
    except ValueError:
        parsed = None
    listed: Any = parsed.get("files") if isinstance(parsed, dict) and parsed.get("format") == FORMAT else None
    if not isinstance(listed, dict):
        raise ManifestError(f"{root / MANIFEST} is not a {FORMAT} manifest")
    files, found = entries(root)
    for relative, expected in sorted(listed.items()):
        if relative not in files:
            found.append((relative, "is missing"))
        elif files[relative] != expected.get("bytes"):
            found.append((relative, f"is {files[relative]} bytes, the manifest says {expected.get('bytes')}"))
        elif sha256_of(root / relative) != expected.get("sha256"):
            found.append((relative, "differs from the manifest (SHA-256)"))
    return digest, found + [
        (relative, "is not in the manifest") for relative in sorted(files) if relative not in listed
    ]


def _say(line: str) -> None:
    print(line if line.isprintable() else ascii(line), file=sys.stderr)  # a planted name's escapes stay text


def run(root: Path, expect_sha256: str | None, key: bytes | None) -> int:
    """Check the bundle in ``root``, saying each problem; the exit status (0 intact, 4 not, 2 unusable)."""
    try:
        digest, found = check(root, expect_sha256, key)
    except ManifestError as exc:
        _say(f"error: {exc}")
        return 2
    for path, reason in found:
        _say(f"FAILED {path}: {reason}")
    if found:
        _say(f"{len(found)} problem(s) in {root}: do not install anything from this bundle")
        return 4
    how = " and ".join(w for w, given in (("its expected SHA-256", expect_sha256), ("its signature", key)) if given)
    _say(f"ok: every file of {root} matches {MANIFEST} (sha256 {digest}, authenticated by {how})")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="verify.py", description="Check a suffice bundle before installing it.")
    parser.add_argument("folder", nargs="?", default=Path(__file__).resolve().parent, type=Path)
    parser.add_argument("--expect-manifest-sha256", metavar="HEX", help="the digest `suffice bundle` printed")
    parser.add_argument("--key", metavar="FILE", help="the key file of `suffice bundle --sign-key`")
    args = parser.parse_args(argv)
    try:
        key = Path(args.key).read_bytes().strip() if args.key else None
    except OSError as exc:
        _say(f"error: --key {args.key}: {exc.strerror or exc}")
        return 2
    return run(args.folder, args.expect_manifest_sha256, key)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
