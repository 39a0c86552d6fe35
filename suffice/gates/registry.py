"""Where gates are found: the entry-point group ``suffice.gates``, one name a gate.

suffice registers its own gates there too (``pyproject.toml``), so a gate installed from
another package is found, built, judged, served, calibrated and exported exactly as the
built-in ones are.  A gate class is imported only when its name is first asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from suffice.exceptions import ConfigError
from suffice.gates import roles
from suffice.gates.base import Gate
from suffice.gates.decision import AutoGate, DecisionGate

ENTRY_POINT_GROUP = "suffice.gates"
#: The gate a judge uses when none is named.
DEFAULT_GATE = "sufficiency"
#: The gate a check of a generated answer uses when none is named (a gate that reads the response).
DEFAULT_CHECK_GATE = "recovery"
#: ``full``: the whole verdict; ``decision``: only the decision and its probability; ``auto``: the decision for
#: every record, a full verdict for those it does not deliver or that lie near the threshold (the cascade).
DETAILS = ("full", "decision", "auto")


@cache
def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        other = found.get(point.name)
        if other is not None and other.value != point.value:
            raise ConfigError("gate", point.name, f"is registered twice: by {other.value} and by {point.value}")
        found[point.name] = point
    if not found:
        raise ConfigError("gate", None, f"no gate is registered under {ENTRY_POINT_GROUP!r}: is suffice installed?")
    return found


def gate_names() -> tuple[str, ...]:
    """Every registered gate's name: the default first, then as registered."""
    return tuple(sorted(_entry_points(), key=lambda name: name != DEFAULT_GATE))


@cache
def gate_class(name: str) -> type[Gate]:
    """The class registered as ``name``; a :class:`ConfigError` names the ``gate``."""
    point = _entry_points().get(name)
    if point is None:
        raise ConfigError("gate", name, f"must be one of {', '.join(gate_names())}")
    try:
        cls = point.load()
    except Exception as exc:
        raise ConfigError("gate", name, f"cannot be loaded from {point.value}: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Gate)) or cls.name != name:
        raise ConfigError("gate", name, f"{point.value} is not a Gate subclass whose name is {name!r}")
    return cls


def option_names(name: str) -> frozenset[str]:
    """The options gate ``name`` declares."""
    return frozenset(gate_class(name).options_model.model_fields)


def check_call(gate: object, options: object) -> None:
    """Refuse a judge call's ``gate`` that is not a gate's name, and ``options`` that are not a mapping."""
    if gate is not None and not isinstance(gate, str):
        raise ConfigError("gate", type(gate).__name__, f"must be a gate's name, one of {', '.join(gate_names())}")
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError("options", type(options).__name__, "must be a mapping of the gate's option names")


def check_detail(detail: object) -> None:
    """The one check of a ``detail`` (a gate built, a row's schema): one of :data:`DETAILS`, else a
    :class:`ConfigError` naming it."""
    if detail not in DETAILS:
        raise ConfigError("detail", detail, f"must be one of {', '.join(DETAILS)}")


def make_gate(name: str, options: Mapping[str, Any] | None = None, detail: str = "full") -> Gate:
    """Gate ``name`` built from its options (each checked: errors name the option)."""
    check_detail(detail)
    cls = gate_class(name)
    gate = cls.from_options(cls.options_model.parse(name, options or {}))
    # The cascade decides every record decision-only first: a gate that cannot judge so cannot cascade.
    roles.check_detail(gate, "decision" if detail == "auto" else detail)
    if detail == "auto":
        return AutoGate(gate)
    return DecisionGate(gate) if detail == "decision" else gate
