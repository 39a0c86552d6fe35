"""Deprecated alias of :mod:`suffice.records.compressed`, for one release: importing it warns and gives that module."""

import sys
import warnings

from suffice.records import compressed

warnings.warn(
    "suffice.compressed moved to suffice.records.compressed (the old path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = compressed
