"""The gate in a test suite: assertions that fail with the verdict's own words (:mod:`~suffice.testing.assertions`),
and a bound on agreement with labels (:mod:`~suffice.testing.labels`).  The pytest plugin
(:mod:`suffice.testing.plugin`, entry point ``pytest11``) gives them as fixtures; this package imports no pytest."""

from suffice.testing.assertions import (
    ADEQUACY,
    RECOVERY,
    SUFFICIENCY,
    JudgeLike,
    RecordProperty,
    assert_adequate,
    assert_insufficient,
    assert_passes,
    assert_sufficient,
    assert_supported,
    judge_records,
)
from suffice.testing.labels import Agreement, agreement, assert_agreement

__all__ = [
    "ADEQUACY",
    "RECOVERY",
    "SUFFICIENCY",
    "Agreement",
    "JudgeLike",
    "RecordProperty",
    "agreement",
    "assert_adequate",
    "assert_agreement",
    "assert_insufficient",
    "assert_passes",
    "assert_sufficient",
    "assert_supported",
    "judge_records",
]
