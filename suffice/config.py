"""Judge settings: frozen, checked once at construction, errors name the parameter."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suffice.exceptions import ConfigError

BACKENDS = ("outlines", "xgrammar", "guidance")
#: Chosen by measurement (README, "Structured-output backends").
DEFAULT_BACKEND = "outlines"
THRESHOLD_PRESETS = ("strict", "loose")
ENGINES = ("vllm", "transformers")
GATES = ("sufficiency", "recovery", "adequacy")
#: ``full``: the whole verdict; ``decision``: only the decision and its probability.
DETAILS = ("full", "decision")


@dataclass(frozen=True)
class JudgeConfig:
    """How to build a judge.

    ``model`` is a local Hugging Face folder; ``None`` means the embedded
    SmolLM2-135M-Instruct (it proves the pipeline, not the judgement).
    """

    gate: str = "sufficiency"
    #: ``vllm`` (default) or ``transformers`` (transformers + Outlines, where vLLM cannot run).
    engine: str = "vllm"
    backend: str = DEFAULT_BACKEND
    model: Path | None = None
    #: Adequacy gate: the default rubric reference and the store folder (None: built-in).
    rubric: str | None = None
    rubric_dir: Path | None = None
    #: Recovery gate: the SufficiencyThreshold preset.
    threshold: str = "strict"
    #: Sufficiency gate: a calibrated threshold file written by ``suffice calibrate``.
    gate_config: Path | None = None
    max_model_len: int | None = None
    enforce_eager: bool = True
    prefix_caching: bool = True
    #: KV cache in GiB (CPU); ``None``: a share of the memory available at start-up.
    kv_cache_gib: float | None = None
    #: Cores for the engine's threads, like ``"0-3"``; ``None``: the process's affinity mask.
    cores: str | None = None
    #: Show the engine's own log lines and the settings read off the machine.
    verbose: bool = False
    detail: str = "full"
    max_question_tokens: int = 512
    max_response_tokens: int = 1024
    min_chunk_tokens: int = 24
    max_chunks: int = 128
    seed: int = 0
    #: Top log-probabilities per generated token (for decision probabilities); 0 turns them off.
    top_logprobs: int = 8

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ConfigError("gate", self.gate, f"must be one of {', '.join(GATES)}")
        if self.engine not in ENGINES:
            raise ConfigError("engine", self.engine, f"must be one of {', '.join(ENGINES)}")
        if self.backend not in BACKENDS:
            raise ConfigError("backend", self.backend, f"must be one of {', '.join(BACKENDS)}")
        if self.threshold not in THRESHOLD_PRESETS:
            raise ConfigError("threshold", self.threshold, f"must be one of {', '.join(THRESHOLD_PRESETS)}")
        if self.rubric_dir is not None and not isinstance(self.rubric_dir, Path):
            object.__setattr__(self, "rubric_dir", Path(self.rubric_dir))
        if self.model is not None and not isinstance(self.model, Path):
            object.__setattr__(self, "model", Path(self.model))
        if self.max_model_len is not None and self.max_model_len < 1024:
            raise ConfigError("max_model_len", self.max_model_len, "must be at least 1024 tokens")
        if self.detail not in DETAILS:
            raise ConfigError("detail", self.detail, f"must be one of {', '.join(DETAILS)}")
        if self.kv_cache_gib is not None and not (self.kv_cache_gib >= 1 and float(self.kv_cache_gib).is_integer()):
            raise ConfigError("kv_cache_gib", self.kv_cache_gib, "must be a whole number of GiB, at least 1")
        if self.max_question_tokens < 16:
            raise ConfigError("max_question_tokens", self.max_question_tokens, "must be at least 16")
        if self.max_response_tokens < 16:
            raise ConfigError("max_response_tokens", self.max_response_tokens, "must be at least 16")
        if self.min_chunk_tokens < 4:
            raise ConfigError("min_chunk_tokens", self.min_chunk_tokens, "must be at least 4")
        if not 0 <= self.top_logprobs <= 20:
            raise ConfigError("top_logprobs", self.top_logprobs, "must be between 0 and 20")
        if not 1 <= self.max_chunks <= 512:
            raise ConfigError("max_chunks", self.max_chunks, "must be between 1 and 512")
