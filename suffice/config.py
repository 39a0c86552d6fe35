"""Judge settings: frozen, checked once at construction, errors name the parameter."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suffice.exceptions import ConfigError
from suffice.serving.engine_config import BACKENDS, DEFAULT_BACKEND, ENGINES, EngineConfig

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "DETAILS", "ENGINES", "GATES", "THRESHOLD_PRESETS", "JudgeConfig"]

THRESHOLD_PRESETS = ("strict", "loose")
GATES = ("sufficiency", "recovery", "adequacy")
#: ``full``: the whole verdict; ``decision``: only the decision and its probability.
DETAILS = ("full", "decision")


@dataclass(frozen=True)
class JudgeConfig:
    """How to build a judge: the gate's settings, and the engine's (:class:`EngineConfig`:
    by default in-process vLLM on the embedded SmolLM2-135M-Instruct, which proves the
    pipeline, not the judgement).
    """

    gate: str = "sufficiency"
    engine: EngineConfig = field(default_factory=EngineConfig)
    #: Adequacy gate: the default rubric reference and the store folder (None: built-in).
    rubric: str | None = None
    rubric_dir: Path | None = None
    #: Recovery gate: the SufficiencyThreshold preset.
    threshold: str = "strict"
    #: Sufficiency gate: a calibrated threshold file written by ``suffice calibrate``.
    gate_config: Path | None = None
    detail: str = "full"
    max_question_tokens: int = 512
    max_response_tokens: int = 1024
    min_chunk_tokens: int = 24
    max_chunks: int = 128

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ConfigError("gate", self.gate, f"must be one of {', '.join(GATES)}")
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError("engine", self.engine, "must be an EngineConfig")
        if self.threshold not in THRESHOLD_PRESETS:
            raise ConfigError("threshold", self.threshold, f"must be one of {', '.join(THRESHOLD_PRESETS)}")
        if self.rubric_dir is not None and not isinstance(self.rubric_dir, Path):
            object.__setattr__(self, "rubric_dir", Path(self.rubric_dir))
        if self.detail not in DETAILS:
            raise ConfigError("detail", self.detail, f"must be one of {', '.join(DETAILS)}")
        if self.max_question_tokens < 16:
            raise ConfigError("max_question_tokens", self.max_question_tokens, "must be at least 16")
        if self.max_response_tokens < 16:
            raise ConfigError("max_response_tokens", self.max_response_tokens, "must be at least 16")
        if self.min_chunk_tokens < 4:
            raise ConfigError("min_chunk_tokens", self.min_chunk_tokens, "must be at least 4")
        if not 1 <= self.max_chunks <= 512:
            raise ConfigError("max_chunks", self.max_chunks, "must be between 1 and 512")
