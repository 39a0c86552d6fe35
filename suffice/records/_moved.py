"""The ``__getattr__`` of a package that took the place of a module of the same name (``suffice.records``,
``suffice.rows``): the old module's names still resolve from the package, with a :class:`DeprecationWarning` naming
the new path, for one release."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any


def moved_names(package: str, path: Iterable[str], module: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` (its ``__name__`` and ``__path__``) whose names moved to its
    module ``module``."""
    # An attribute named as one of the package's modules is that module, never a moved name.
    parts = frozenset(part.name for part in pkgutil.iter_modules(path))

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or name in parts:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        warnings.warn(
            f"{package}.{name} moved to {package}.{module}.{name} (the old name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        # Kept, so that ``from package import X`` (which looks the name up twice) warns once.
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
