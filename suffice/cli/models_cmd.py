"""``suffice models verify DIR``: a bundle's files against its manifest's SHA-256 digests."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from suffice.bundle import MANIFEST, verify_bundle
from suffice.cli.errors import reports_errors
from suffice.exceptions import EXIT_OK, EXIT_TAMPERED
from suffice.records.text import terminal_text
from suffice.settings import add_flags, check, setting


@dataclass(frozen=True)
class ModelsSettings:
    """``suffice models verify``'s argument."""

    folder: str | None = setting(
        None, "the bundle's folder (as `suffice bundle DIR` wrote it)", positional=True, metavar="DIR"
    )

    def __post_init__(self) -> None:
        check(self)


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "models",
        help="check a bundle's wheels and model against its manifest",
        description="Model folders and bundles carried across an air gap.",
    )
    actions = p.add_subparsers(dest="models_action", required=True)
    verify = actions.add_parser(
        "verify",
        help=f"check every file of a bundle against {MANIFEST} (exit 0 intact, 4 changed, missing or added, 2 usage)",
    )
    add_flags(verify, ModelsSettings)
    verify.set_defaults(run=run_verify)


@reports_errors
def run_verify(args: argparse.Namespace) -> int:
    problems = verify_bundle(args.folder)  # an unreadable manifest: InputError, said by reports_errors
    if problems:
        for problem in problems:
            print(f"FAILED {terminal_text(problem)}", file=sys.stderr)
        print(f"{len(problems)} file(s) differ from {MANIFEST}: do not install this bundle", file=sys.stderr)
        return EXIT_TAMPERED
    print(f"ok: every file of {terminal_text(args.folder)} matches {MANIFEST}", file=sys.stderr)
    return EXIT_OK
