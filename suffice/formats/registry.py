"""One registry of plug-ins of a kind: suffice's own (the modules of a package, each holding ``FORMATS``) and
those installed from other packages (an entry-point group, one name a format), found when first asked for.

Adding a built-in format is adding a module to the package; a format from outside is one entry point whose name
is the format's.  Nothing else names a format: the CLI's choices, the HTTP parameter's allowed values (and its
OpenAPI enum) and every check read :meth:`Registry.names` and :meth:`Registry.get`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import cached_property
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from suffice.exceptions import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """The formats of one kind: ``package``'s modules' ``FORMATS`` first (in module order), then the entry points of
    ``group``.  ``accepts`` says whether a loaded object is a format of this kind."""

    def __init__(self, kind: str, package: str, group: str, accepts: Callable[[object], bool]) -> None:
        self.kind = kind
        self.package = package
        self.group = group
        self._accepts = accepts
        self._loaded: dict[str, T] = {}

    @cached_property
    def _builtin(self) -> dict[str, T]:
        found: dict[str, T] = {}
        package = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{self.package}.{info.name}")
            for fmt in getattr(module, "FORMATS", ()):
                found[fmt.name] = self._checked(fmt, fmt.name, module.__name__)
        return found

    @cached_property
    def _outside(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for point in entry_points(group=self.group):
            other = found.get(point.name)
            if point.name in self._builtin or (other is not None and other.value != point.value):
                where = other.value if other is not None else f"suffice ({self.package})"
                raise ConfigError("format", point.name, f"is registered twice: by {where} and by {point.value}")
            found[point.name] = point
        return found

    def names(self) -> tuple[str, ...]:
        """Every format's name: suffice's own first, then those from entry points, as registered."""
        return (*self._builtin, *self._outside)

    def get(self, name: str, option: str = "format") -> T:
        """The format called ``name``; a :class:`ConfigError` names ``option`` and the formats there are."""
        if name in self._builtin:
            return self._builtin[name]
        if name in self._loaded:
            return self._loaded[name]
        point = self._outside.get(name) if isinstance(name, str) else None
        if point is None:
            raise ConfigError(option, name, f"must be one of {', '.join(self.names())}")
        try:
            loaded = point.load()
            fmt = loaded() if isinstance(loaded, type) else loaded
        except Exception as exc:
            raise ConfigError(
                option, name, f"cannot be loaded from {point.value}: {type(exc).__name__}: {exc}"
            ) from exc
        self._loaded[name] = self._checked(fmt, name, point.value)
        return self._loaded[name]

    def all(self) -> tuple[T, ...]:
        """Every format, loaded."""
        return tuple(self.get(name) for name in self.names())

    def _checked(self, fmt: Any, name: str, where: str) -> T:
        if not self._accepts(fmt) or getattr(fmt, "name", None) != name:
            raise ConfigError("format", name, f"{where} is not a {self.kind} whose name is {name!r}")
        return fmt  # type: ignore[no-any-return]

    def forget(self) -> None:
        """Look the entry points up again (after a package was installed in this process)."""
        self.__dict__.pop("_outside", None)
        self._loaded.clear()
