"""``suffice rubrics list``: what the rubric store holds."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.exceptions import EXIT_OK, EXIT_USAGE, InputError
from suffice.gates.adequacy.store import RubricStore
from suffice.settings import add_flags, setting


@dataclass(frozen=True)
class RubricsSettings:
    """``suffice rubrics list``'s setting."""

    rubric_dir: Path | None = setting(None, "a rubric folder (default: built-in)")


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("rubrics", help="adequacy rubrics in the store")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list rubrics: name, version, risk level, threshold, use case")
    add_flags(listing, RubricsSettings)
    listing.set_defaults(run=run_list)


def run_list(args: argparse.Namespace) -> int:
    store = RubricStore(args.rubric_dir)  # an unusable folder: an InputError, which `suffice` says (exit 2)
    print(f"rubric store: {store.folder}")
    print(f"{'rubric':<32} {'risk':<7} {'pass':>5}  use case")
    broken = 0
    for name, version in store.refs():
        try:
            r = store.get(f"{name}@{version}")
        except InputError as exc:
            broken += 1
            print(f"{name + '@' + version:<32} INVALID: {exc}")
            continue
        print(f"{r.ref:<32} {r.risk_level:<7} {r.pass_threshold:>5.2f}  {r.use_case}")
    return EXIT_OK if not broken else EXIT_USAGE
