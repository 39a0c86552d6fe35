"""The gates: each a prompt, a constraint and a parser around the shared judge."""

from __future__ import annotations

from pathlib import Path

from suffice.calibration.thresholds import GateConfig
from suffice.config import GATES, JudgeConfig
from suffice.decisions.recovery import SufficiencyThreshold
from suffice.exceptions import ConfigError
from suffice.gates.adequacy import AdequacyGate
from suffice.gates.base import Gate
from suffice.gates.decision import DecisionGate
from suffice.gates.recovery import RecoveryGate
from suffice.gates.sufficiency import SufficiencyGate
from suffice.rubric_store import RubricStore


def make_gate(
    name: str,
    *,
    rubric: str | None = None,
    rubric_dir: Path | None = None,
    threshold: str = "strict",
    calibration: GateConfig | None = None,
) -> Gate:
    if name == "sufficiency":
        return SufficiencyGate(calibration=calibration)
    if name == "recovery":
        return RecoveryGate(SufficiencyThreshold.preset(threshold))
    if name == "adequacy":
        return AdequacyGate(RubricStore(rubric_dir), rubric)
    raise ConfigError("gate", name, f"must be one of {', '.join(GATES)}")


def make_gate_for(config: JudgeConfig) -> Gate:
    """The gate a config names, with its rubric, threshold preset or calibrated gate config."""
    calibration = GateConfig.load(config.gate_config) if config.gate_config else None
    if calibration is not None and calibration.gate != config.gate:
        raise ConfigError("gate_config", str(config.gate_config), f"is for the {calibration.gate} gate")
    gate = make_gate(
        config.gate,
        rubric=config.rubric,
        rubric_dir=config.rubric_dir,
        threshold=config.threshold,
        calibration=calibration,
    )
    if config.detail == "decision" and calibration is not None:
        raise ConfigError(
            "gate_config",
            str(config.gate_config),
            "applies to full verdicts; with --detail decision use the decision probability directly",
        )
    return DecisionGate(gate) if config.detail == "decision" else gate


__all__ = ["AdequacyGate", "DecisionGate", "Gate", "RecoveryGate", "SufficiencyGate", "make_gate", "make_gate_for"]
