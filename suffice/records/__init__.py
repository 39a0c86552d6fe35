"""Records in: what an input record is, and how a file's bytes become records.

- :mod:`~suffice.records.item`: a record as an :class:`Item` of :class:`Chunk`\\ s, every bad field named, the caps.
- :mod:`~suffice.records.fields`: other schemas' field names (RAGAS too) mapped to a record's.
- :mod:`~suffice.records.jsonl`: any bytes read as records, one per line; a row written back losslessly.
- :mod:`~suffice.records.compressed`: gzip, bzip2 and xz inputs told by their first bytes.

``suffice.records`` was the module that :mod:`~suffice.records.item` is now: its names still resolve here, with a
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
    from suffice.records import item

    try:
        value = getattr(item, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    warnings.warn(
        f"suffice.records.{name} moved to suffice.records.item.{name} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=2,
    )
    # Kept, so that ``from suffice.records import X`` (which looks the name up twice) warns once.
    globals()[name] = value
    return value
