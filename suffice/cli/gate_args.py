"""The gates' own options on the command line: ``--gate-option KEY=VALUE`` and a
``--KEY`` flag for every option a registered gate declares."""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass
from typing import Any

from suffice.exceptions import ConfigError
from suffice.gates import gate_class, gate_names
from suffice.settings import Declared, add_flags, declared, setting

_PREFIX = "gate_option_"


@dataclass(frozen=True)
class GateOptionSettings:
    """A gate's own option by name, for one no ``--KEY`` flag reaches (an engine setting has that name)."""

    gate_option: tuple[str, ...] = setting(
        (), "an option of the gate's own (repeatable); each also has a --KEY flag below", metavar="KEY=VALUE"
    )


def add_gate_args(p: argparse.ArgumentParser) -> None:
    """``--gate-option`` and a flag for every option of a registered gate, from its declaration (one flag for an
    option several gates declare; its text read as the option's type when the gate is made)."""
    add_flags(p, GateOptionSettings)
    options: dict[str, tuple[Declared, list[str]]] = {}
    for name in gate_names():
        with contextlib.suppress(ConfigError):  # a gate that cannot load says so when it is chosen
            for d in declared(gate_class(name).options_model):
                options.setdefault(d.name, (d, []))[1].append(name)
    for key, (d, gates) in options.items():
        # argparse formats help with %: a description's own "99%" would break --help.
        help_text = f"{', '.join(gates)} gate: {d.spec.help}".replace("%", "%%")
        metavar = "{" + ",".join(map(str, d.choices)) + "}" if d.choices else key.upper()
        # A name some other flag has already (an engine setting) stays reachable by --gate-option.
        with contextlib.suppress(argparse.ArgumentError):
            p.add_argument(d.flag or "", dest=_PREFIX + key, default=None, metavar=metavar, help=help_text)


def gate_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The gate options the command line gave (flags first, then ``--gate-option``)."""
    options: dict[str, Any] = {
        key.removeprefix(_PREFIX): value
        for key, value in vars(args).items()
        if key.startswith(_PREFIX) and value is not None
    }
    for pair in args.gate_option:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError("gate_option", pair, "must be KEY=VALUE")
        options[key] = value
    return options
