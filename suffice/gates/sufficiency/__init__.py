"""The pre-generation sufficiency gate (RAGFlow's ``sufficiency_select``)."""

from suffice.gates.sufficiency.gate import SufficiencyGate, SufficiencyOptions

__all__ = ["SufficiencyGate", "SufficiencyOptions"]
