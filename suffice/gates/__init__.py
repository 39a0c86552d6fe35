"""The gates: each one package, found by name through :mod:`suffice.gates.registry`."""

from suffice.gates.base import CalibrationChoice, Gate, GateOptions, Verdict
from suffice.gates.decision_mode import DecisionGate
from suffice.gates.registry import DEFAULT_GATE, DETAILS, gate_class, gate_names, make_gate

__all__ = [
    "DEFAULT_GATE",
    "DETAILS",
    "CalibrationChoice",
    "DecisionGate",
    "Gate",
    "GateOptions",
    "Verdict",
    "gate_class",
    "gate_names",
    "make_gate",
]
