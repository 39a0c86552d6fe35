"""The gates: each a prompt, a constraint and a parser around the shared judge."""

from suffice.config import GATES
from suffice.exceptions import ConfigError
from suffice.gates.base import Gate
from suffice.gates.sufficiency import SufficiencyGate


def make_gate(name: str) -> Gate:
    if name == "sufficiency":
        return SufficiencyGate()
    raise ConfigError("gate", name, f"must be one of {', '.join(GATES)}")


__all__ = ["Gate", "SufficiencyGate", "make_gate"]
