"""The post-generation recovery gate: cited answer or abstention, routed in code."""

from suffice.gates.recovery.gate import RecoveryGate, RecoveryOptions

__all__ = ["RecoveryGate", "RecoveryOptions"]
