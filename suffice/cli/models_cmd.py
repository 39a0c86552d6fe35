"""``suffice models verify DIR``: a bundle's manifest authenticated, then its files against the manifest's digests."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.bundle import verify
from suffice.cli.errors import command
from suffice.network import read_key_file
from suffice.settings import setting


@dataclass(frozen=True)
class ModelsSettings:
    """``suffice models verify``'s arguments."""

    folder: str | None = setting(
        None, "the bundle's folder (as `suffice bundle DIR` wrote it)", positional=True, metavar="DIR"
    )
    expect_manifest_sha256: str | None = setting(
        None, "the SHA-256 of manifest.json that `suffice bundle` printed, carried apart from the bundle", metavar="HEX"
    )
    key: str | None = setting(
        None, "the key file the bundle was signed with (suffice bundle --sign-key)", metavar="FILE"
    )


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "models",
        help="check a bundle's wheels and model against its manifest",
        description="Model folders and bundles carried across an air gap.",
    )
    actions = p.add_subparsers(dest="models_action", required=True)
    command(
        actions,
        "verify",
        run_verify,
        ModelsSettings,
        help=f"authenticate a bundle's {verify.MANIFEST} (--expect-manifest-sha256 or --key), then check every file "
        "against it (exit 0 intact, 4 changed, missing, added or a link, 2 usage)",
    )


def run_verify(args: argparse.Namespace) -> int:
    key = read_key_file(args.key, "key", forging="sign a bundle this site installs") if args.key else None
    return verify.run(Path(args.folder), args.expect_manifest_sha256, key)  # the bundle's own verify.py, the same
