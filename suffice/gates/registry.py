"""Where plug-ins are found, one way for every kind (gates, verdict formats, file formats): an entry-point group a
kind, one name a plug-in (:class:`Registry`).

suffice registers its own there too (``pyproject.toml``), so a plug-in installed from another package is found,
checked and used exactly as the built-in ones are.  A plug-in is imported only when its name is first asked for.
The gates' registry also builds a gate by name (:func:`make_gate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from suffice.exceptions import ConfigError
from suffice.gates import roles
from suffice.gates.base import Gate
from suffice.gates.decision_mode import AutoGate, DecisionGate
from suffice.settings import declared

T = TypeVar("T")


class Registry(Generic[T]):
    """The plug-ins of one kind: the entry points of ``group``, each the object its name names, checked by
    ``accepts`` and by its ``name`` attribute when first loaded.  Errors name ``parameter`` (``gate``, ``format``);
    the names are listed ``first`` first (a default), then suffice's own, then the others, each as registered."""

    def __init__(
        self, kind: str, group: str, accepts: Callable[[object], bool], parameter: str, first: str | None = None
    ) -> None:
        self.kind, self.group, self.parameter, self.first = kind, group, parameter, first
        self._accepts = accepts
        self._loaded: dict[str, T] = {}

    @cached_property
    def _points(self) -> dict[str, EntryPoint]:
        found: dict[str, EntryPoint] = {}
        for point in entry_points(group=self.group):
            other = found.get(point.name)
            if other is not None and other.value != point.value:
                reason = f"is registered twice: by {other.value} and by {point.value}"
                raise ConfigError(self.parameter, point.name, reason)
            found[point.name] = point
        if not found:
            reason = f"no {self.kind} is registered under {self.group!r}: is suffice installed?"
            raise ConfigError(self.parameter, None, reason)
        own = __name__.partition(".")[0]
        return dict(sorted(found.items(), key=lambda p: (p[0] != self.first, p[1].module.partition(".")[0] != own)))

    def names(self) -> tuple[str, ...]:
        """Every registered name, in the order of :class:`Registry`."""
        return tuple(self._points)

    def get(self, name: str, option: str | None = None) -> T:
        """The plug-in called ``name``; a :class:`ConfigError` names ``option`` (by default the kind's parameter) and
        the names there are."""
        option = option or self.parameter
        point = self._points.get(name) if isinstance(name, str) else None
        if point is None:
            raise ConfigError(option, name, f"must be one of {', '.join(self.names())}")
        if name not in self._loaded:
            try:
                loaded = point.load()
            except Exception as exc:
                reason = f"cannot be loaded from {point.value}: {type(exc).__name__}: {exc}"
                raise ConfigError(option, name, reason) from exc
            if not self._accepts(loaded) or getattr(loaded, "name", None) != name:
                raise ConfigError(option, name, f"{point.value} is not a {self.kind} whose name is {name!r}")
            self._loaded[name] = loaded
        return self._loaded[name]

    def all(self) -> tuple[T, ...]:
        """Every plug-in, loaded."""
        return tuple(self.get(name) for name in self.names())

    def forget(self) -> None:
        """Look the entry points up again (after a package was installed in this process)."""
        self.__dict__.pop("_points", None)
        self._loaded.clear()


ENTRY_POINT_GROUP = "suffice.gates"
#: The gate a judge uses when none is named.
DEFAULT_GATE = "sufficiency"
#: The gate a check of a generated answer uses when none is named (a gate that reads the response).
DEFAULT_CHECK_GATE = "recovery"
#: ``full``: the whole verdict; ``decision``: only the decision and its probability; ``auto``: the decision for
#: every record, a full verdict for those it does not deliver or that lie near the threshold (the cascade).
DETAILS = ("full", "decision", "auto")
GATES: Registry[type[Gate]] = Registry(
    "gate", ENTRY_POINT_GROUP, lambda cls: isinstance(cls, type) and issubclass(cls, Gate), "gate", DEFAULT_GATE
)


def gate_names() -> tuple[str, ...]:
    """Every registered gate's name: the default first."""
    return GATES.names()


def gate_class(name: str) -> type[Gate]:
    """The class registered as ``name``; a :class:`ConfigError` names the ``gate``."""
    return GATES.get(name)


def option_names(name: str) -> frozenset[str]:
    """The options gate ``name`` declares."""
    return frozenset(d.name for d in declared(gate_class(name).options_model))


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
