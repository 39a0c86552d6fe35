"""``suffice bundle DIR``: wheels, a model and an authenticated manifest of SHA-256 digests, to carry across an air
gap."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.bundle import MANIFEST, SIGNATURE, WHEELS, sha256_of, write_bundle
from suffice.cli.errors import command
from suffice.exceptions import EXIT_OK, BundleWriteError, ConfigError, ModelNotFoundError, OutputWriteError
from suffice.records.text import terminal_text
from suffice.settings import setting


@dataclass(frozen=True)
class BundleSettings:
    """``suffice bundle``'s settings."""

    folder: str | None = setting(None, "a new or empty folder", positional=True, metavar="DIR")
    extras: tuple[str, ...] = setting(
        (),
        "an extra to include (repeat: --extra cpu --extra langchain; none: the client-only set)",
        flag="--extra",
        metavar="NAME",
    )
    model: str | None = setting(
        None,
        "copy a model folder into the bundle: the embedded model, or a local Hugging Face folder",
        metavar="embedded|PATH",
    )
    find_links: tuple[str, ...] = setting(
        (), "a local folder of wheels to take packages from (repeatable)", metavar="FOLDER"
    )
    no_index: bool = setting(False, "take packages from --find-links folders only")
    constraints: str | None = setting(None, "pip constraints", flag="--constraint", also=("-c",), metavar="FILE")
    source: str | None = setting(
        None,
        "suffice's project folder to build its wheel from (default: an editable install's)",
        metavar="PATH",
    )
    sign_key: str | None = setting(
        None,
        "sign the manifest with this key file (manifest.json.sig, HMAC-SHA256): the far side verifies with --key",
        metavar="FILE",
    )


def add_parser(sub: Any) -> None:
    command(
        sub,
        "bundle",
        run,
        BundleSettings,
        help="write what an air-gapped site needs: wheels, a model, a manifest of digests",
    )


def run(args: argparse.Namespace) -> int:
    """Write DIR/wheels (suffice with the chosen extras and every dependency, wheels only), DIR/model/NAME (with
    --model), DIR/verify.py, DIR/INSTALL.txt, DIR/manifest.json (each file's SHA-256; DIR/manifest.json.sig with
    --sign-key) and DIR.manifest.sha256 (the manifest's own digest, also printed). On the far side, before anything
    is installed: `python3 DIR/verify.py DIR --expect-manifest-sha256 HEX` (or --key FILE), then
    pip install --no-index --find-links DIR/wheels "suffice[EXTRAS]"."""
    try:
        manifest = write_bundle(
            args.folder,
            args.extras,
            find_links=args.find_links,
            no_index=args.no_index,
            constraints=args.constraints,
            model=args.model,
            source=args.source,
            sign_key=args.sign_key,
        )
    except ModelNotFoundError as exc:  # --model names a folder to copy: the command must change (a run's is exit 1)
        raise ConfigError("model", exc.path, exc.reason) from exc
    except OutputWriteError as exc:  # a bundle is written anew: nothing to resume, as the table's hint would say
        raise BundleWriteError(exc.path, exc.reason) from exc
    wheels = sum(1 for f in manifest.files if f.path.startswith(f"{WHEELS}/"))
    size = sum(f.bytes for f in manifest.files)
    print(
        f"wrote {terminal_text(args.folder)}: {wheels} wheels for {manifest.requirement}"
        + (f", {manifest.model}" if manifest.model else "")
        + f", {len(manifest.files)} files, {size / (1 << 20):.1f} MiB, digests in {MANIFEST}"
        + (f", signed ({SIGNATURE})" if args.sign_key else ""),
        file=sys.stderr,
    )
    digest = sha256_of(Path(args.folder) / MANIFEST)
    print(
        f"{MANIFEST} sha256 {digest} (also in {terminal_text(Path(args.folder).resolve())}.manifest.sha256): carry it "
        f"apart from the bundle. On the far side, in its folder, before installing anything: "
        f"python3 verify.py . --expect-manifest-sha256 {digest}",
        file=sys.stderr,
    )
    return EXIT_OK
