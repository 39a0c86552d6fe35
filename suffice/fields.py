"""Deprecated alias of :mod:`suffice.records.fields`, for one release: importing it warns and gives that module."""

import sys
import warnings

from suffice.records import fields

warnings.warn(
    "suffice.fields moved to suffice.records.fields (the old path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = fields
