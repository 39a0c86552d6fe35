"""``suffice schema``: the JSON Schema of a gate's result row (see :mod:`suffice.rows.row_types`), or of the options a
request to ``suffice serve`` may set on it (see :mod:`suffice.server.contract`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from suffice.cli.errors import command
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT, verdict_format_names
from suffice.gates import DEFAULT_GATE
from suffice.rows.row_types import DIALECT, result_row_schema
from suffice.server.contract import request_options_schema
from suffice.settings import add_flags, setting


@dataclass(frozen=True)
class SchemaSettings:
    """``suffice schema``'s settings (``--detail`` is :class:`~suffice.config.JudgeConfig`'s)."""

    # Not choices: an unknown gate is the registry's error, which names the gates there are.
    gate: str = setting(DEFAULT_GATE, f"any registered gate (default {DEFAULT_GATE})")
    format: str = setting(
        DEFAULT_VERDICT_FORMAT, "the verdict's format, as in `suffice judge`", choices=verdict_format_names
    )
    served: bool = setting(
        False, "the rows `suffice serve` answers with: `index` (the item's position in the request) for `line`"
    )
    request: bool = setting(
        False, "the options a request may set on the gate instead (its <Gate>Options in /openapi.json)"
    )


def add_parser(sub: Any) -> None:
    p = command(sub, "schema", run, SchemaSettings, ("gate",), help="print the JSON Schema of a gate's result row")
    add_flags(p, JudgeConfig, only=("detail",))
    p.set_defaults(detail=None)
    add_flags(p, SchemaSettings, only=("format", "served", "request"))


def run(args: argparse.Namespace) -> int:
    """Print the JSON Schema of one result row of a gate: a verdict typed by the gate's verdict model, or that
    record's error (--detail left out: a row of either); or, with --request, of the options a request to
    `suffice serve` may set on the gate."""
    if args.request:
        schema = {"$schema": DIALECT, **request_options_schema(args.gate)}
    else:
        schema = result_row_schema(args.gate, args.detail, args.format, "index" if args.served else "line")
    print(json.dumps(schema, indent=2, ensure_ascii=False))
    return EXIT_OK
