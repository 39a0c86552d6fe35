"""The gates: each a prompt, a constraint and a parser around the shared judge."""

from __future__ import annotations

from pathlib import Path

from suffice.config import GATES
from suffice.decisions.recovery import SufficiencyThreshold
from suffice.exceptions import ConfigError
from suffice.gates.adequacy import AdequacyGate
from suffice.gates.base import Gate
from suffice.gates.recovery import RecoveryGate
from suffice.gates.sufficiency import SufficiencyGate
from suffice.rubric_store import RubricStore


def make_gate(
    name: str,
    *,
    rubric: str | None = None,
    rubric_dir: Path | None = None,
    threshold: str = "strict",
) -> Gate:
    if name == "sufficiency":
        return SufficiencyGate()
    if name == "recovery":
        return RecoveryGate(SufficiencyThreshold.preset(threshold))
    if name == "adequacy":
        return AdequacyGate(RubricStore(rubric_dir), rubric)
    raise ConfigError("gate", name, f"must be one of {', '.join(GATES)}")


__all__ = ["AdequacyGate", "Gate", "RecoveryGate", "SufficiencyGate", "make_gate"]
