"""``suffice models verify DIR``: a bundle's files against its manifest's SHA-256 digests."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from suffice.bundle import MANIFEST, verify_bundle
from suffice.cli.errors import command
from suffice.exceptions import EXIT_OK, EXIT_TAMPERED
from suffice.records.text import terminal_text
from suffice.settings import setting


@dataclass(frozen=True)
class ModelsSettings:
    """``suffice models verify``'s argument."""

    folder: str | None = setting(
        None, "the bundle's folder (as `suffice bundle DIR` wrote it)", positional=True, metavar="DIR"
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
        help=f"check every file of a bundle against {MANIFEST} (exit 0 intact, 4 changed, missing or added, 2 usage)",
    )


def run_verify(args: argparse.Namespace) -> int:
    problems = verify_bundle(args.folder)  # an unreadable manifest: InputError, said by reports_errors
    if problems:
        for problem in problems:
            print(f"FAILED {terminal_text(problem)}", file=sys.stderr)
        print(f"{len(problems)} file(s) differ from {MANIFEST}: do not install this bundle", file=sys.stderr)
        return EXIT_TAMPERED
    print(f"ok: every file of {terminal_text(args.folder)} matches {MANIFEST}", file=sys.stderr)
    return EXIT_OK
