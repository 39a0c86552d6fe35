"""Renamed names keep their old one for a release: a module's ``__getattr__`` that gives the object under its old
name with a :class:`DeprecationWarning` naming the new one (``tests/test_renamed.py`` holds the list)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def renamed_names(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module`` (its ``__name__``) whose names ``names`` (old -> new) were renamed."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} was renamed {new} (the old name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(sys.modules[module], new)

    return __getattr__
