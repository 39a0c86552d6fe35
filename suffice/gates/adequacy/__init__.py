"""The pre-generation adequacy gate: a domain rubric's scored dimensions, decided in code."""

from suffice.gates.adequacy.gate import AdequacyGate, AdequacyOptions

__all__ = ["AdequacyGate", "AdequacyOptions"]
