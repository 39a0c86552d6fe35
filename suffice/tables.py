"""Deprecated alias of :mod:`suffice.rows.tables`, for one release: importing it warns and gives that module."""

import sys
import warnings

from suffice.rows import tables

warnings.warn(
    "suffice.tables moved to suffice.rows.tables (the old path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = tables
