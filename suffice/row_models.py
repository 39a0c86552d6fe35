"""Deprecated alias of :mod:`suffice.rows.models`, for one release: importing it warns and gives that module."""

import sys
import warnings

from suffice.rows import models

warnings.warn(
    "suffice.row_models moved to suffice.rows.models (the old path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = models
