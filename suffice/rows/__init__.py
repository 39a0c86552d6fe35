"""Rows out: a result as the row suffice writes, the rows' typed models, and their Parquet tables.

- :mod:`~suffice.rows.shaping`: a result shaped into an output row; the error and engine-crash rows.
- :mod:`~suffice.rows.models`: the typed rows of a gate, from the registry (``suffice schema``, the OpenAPI).
- :mod:`~suffice.rows.tables`: the rows' typed Parquet schema, derived from each gate's verdict model.

``suffice.rows`` was the module that :mod:`~suffice.rows.shaping` is now: its names still resolve here, with a
:class:`DeprecationWarning` naming the new path, for one release.
"""

from __future__ import annotations

import pkgutil
import warnings
from typing import Any

#: This package's modules: an attribute of that name is the module, never a moved name.
_PARTS = frozenset(part.name for part in pkgutil.iter_modules(__path__))


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name in _PARTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from suffice.rows import shaping

    try:
        value = getattr(shaping, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    warnings.warn(
        f"suffice.rows.{name} moved to suffice.rows.shaping.{name} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=2,
    )
    # Kept, so that ``from suffice.rows import X`` (which looks the name up twice) warns once.
    globals()[name] = value
    return value
