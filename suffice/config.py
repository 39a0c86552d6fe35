"""Judge settings: frozen, checked once at construction, errors name the parameter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from suffice.exceptions import ConfigError
from suffice.gates.base import Gate
from suffice.gates.registry import DEFAULT_GATE, DETAILS, gate_class, make_gate
from suffice.serving.engine_config import BACKENDS, DEFAULT_BACKEND, ENGINES, EngineConfig

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "DETAILS", "ENGINES", "JudgeConfig"]


@dataclass(frozen=True)
class JudgeConfig:
    """How to build a judge: the gate and its own options, and the engine's settings
    (:class:`EngineConfig`: by default in-process vLLM on the embedded
    SmolLM2-135M-Instruct, which proves the pipeline, not the judgement).

    ``options`` are the gate's (see its ``options_model``), checked here: an option
    the gate does not take, or a value it refuses, is a :class:`ConfigError` naming it.
    """

    gate: str = DEFAULT_GATE
    engine: EngineConfig = field(default_factory=EngineConfig)
    options: Mapping[str, Any] = field(default_factory=dict)
    detail: str = "full"
    max_question_tokens: int = 512
    max_response_tokens: int = 1024
    min_chunk_tokens: int = 24
    max_chunks: int = 128

    def __post_init__(self) -> None:
        options = gate_class(self.gate).options_model
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError("engine", self.engine, "must be an EngineConfig")
        if not isinstance(self.options, Mapping):
            raise ConfigError("options", self.options, "must be a mapping of the gate's option names to values")
        object.__setattr__(self, "options", dict(self.options))
        options.parse(self.gate, self.options)
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

    def make_gate(self) -> Gate:
        """The gate this config names, built from its options at its detail."""
        return make_gate(self.gate, self.options, self.detail)
