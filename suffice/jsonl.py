"""Deprecated alias of :mod:`suffice.records.jsonl`, for one release: importing it warns and gives that module."""

import sys
import warnings

from suffice.records import jsonl

warnings.warn(
    "suffice.jsonl moved to suffice.records.jsonl (the old path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = jsonl
