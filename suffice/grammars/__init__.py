"""Verdict models and the decode-time constraints derived from them (pure, CPU-only)."""

from suffice.grammars.constraint import Constraint
from suffice.grammars.sufficiency import (
    RAGFLOW_SCHEMA,
    SufficiencyOutput,
    SufficiencyVerdict,
    sufficiency_constraint,
)

__all__ = [
    "RAGFLOW_SCHEMA",
    "Constraint",
    "SufficiencyOutput",
    "SufficiencyVerdict",
    "sufficiency_constraint",
]
