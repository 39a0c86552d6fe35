"""The vLLM engine (GPU or CPU build): an in-process ``LLM``, one ``SamplingParams`` per request with its own regex,
temperature 0, prefix caching on.  Its requests are built and their outputs read here; the loop that batches them is
:mod:`~suffice.serving.vllm.driver`, the ``LLM``'s start, liveness and shutdown :mod:`~suffice.serving.vllm.lifecycle`
(with this module, the only ones that import vLLM)."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from suffice.exceptions import CancelledError, EngineDeadError, EngineError
from suffice.serving import machine, startup
from suffice.serving.base import Engine, Generation, GenerationRequest, Progress, TokenizerMixin, local_settings
from suffice.serving.decoding import TokenTrail, eos_ids, merge_by_text
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import apply_machine_config, check_build, machine_config
from suffice.serving.offline import offline
from suffice.serving.vllm.driver import Driver, Job, TokenSequence
from suffice.serving.vllm.lifecycle import Lifecycle, kv_capacity, llm_kwargs, start_llm
from suffice.serving.weights import ModelRef, resolve_model

_log = logging.getLogger(__name__)


def _token_logprobs(
    token_ids: Sequence[int], logprobs: Any
) -> tuple[tuple[str, ...], tuple[dict[str, float], ...]] | None:
    """Token texts and top log-probabilities by text, or ``None`` unless each generated id has its entry."""
    if not logprobs or len(logprobs) != len(token_ids):
        return None
    tokens: list[str] = []
    tops: list[dict[str, float]] = []
    for token_id, position in zip(token_ids, logprobs, strict=True):
        chosen = position.get(token_id)
        if chosen is None or chosen.decoded_token is None:
            return None
        tokens.append(chosen.decoded_token)
        tops.append(merge_by_text((entry.decoded_token, entry.logprob) for entry in position.values()))
    return tuple(tokens), tuple(tops)


class VLLMEngine(TokenizerMixin, Engine):
    """Build once (start-up takes seconds to minutes), then call :meth:`generate` often."""

    cacheable = True  # greedy decoding of a local folder whose fingerprint is in settings_of

    def __init__(self, config: EngineConfig, model: ModelRef | None = None) -> None:
        gpu = machine.gpu_build()
        check_build(config, gpu=gpu)  # before anything is set or started
        # The engine's start: its processes keep the offline environment they start with (suffice.serving.offline).
        with offline():
            self.settings = machine_config(config, gpu=gpu)
            apply_machine_config(self.settings, verbose=config.verbose)
            if config.verbose:
                _log.info("suffice: %s", self.settings.describe())
            ref = model or resolve_model(config.model, config.verbose)
            kwargs = llm_kwargs(config, self.settings, ref)
            startup.mark("engine settings read")
            llm, log = start_llm(kwargs, ref, config.verbose)
        self._llm = llm
        self._life = Lifecycle(llm, log)
        self.log_path = log
        self.model_id = ref.model_id
        self.model_path = ref.path
        self.backend = config.backend_name
        self.tokenizer = self._llm.get_tokenizer()
        self.max_model_len = int(self._llm.llm_engine.model_config.max_model_len)
        self.logprobs = config.top_logprobs
        self._eos_ids = eos_ids(
            self.tokenizer, getattr(getattr(self._llm.llm_engine.model_config, "hf_config", None), "eos_token_id", None)
        )
        self._prefixes: dict[str, list[int]] = {}
        self._request_ids = itertools.count()
        self._driver = Driver(self._llm.llm_engine, self._submit, self._absorb, self.check_alive, kv_capacity(llm))
        startup.mark("engine ready")

    @classmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        settings = local_settings(config)
        # The dtype this machine computes in, asked for or not: bfloat16 sums differ from float32's, so a resume
        # must compute in the same.  float32 is left unrecorded, so outputs written when it was every CPU's default
        # (they record none) still resume.
        dtype = machine.compute_dtype(machine.gpu_build(), config.dtype)[0]
        settings.pop("dtype", None)
        if dtype != "float32":
            settings["dtype"] = dtype
        return settings

    def check_alive(self) -> None:
        """Raise :class:`EngineDeadError` if an engine process has exited (any cause)."""
        self._life.check_alive()

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        """Every request's segments, each continuing the same token sequence; when one segment ends the next is queued
        at once (the prefix cache holds its prompt)."""
        if not requests:
            return []
        sequences = [
            TokenSequence(
                i,
                self.prompt_ids(r.messages),
                r.constraint,
                r.constraint.first_segment(),
                trail=TokenTrail(wanted=self.logprobs > 0),
            )
            for i, r in enumerate(requests)
        ]
        try:
            self._driver.run(Job(sequences, progress, cancel))
        except (EngineDeadError, CancelledError):
            raise
        except Exception as exc:
            self.check_alive()
            raise EngineError(f"vLLM generation failed: {exc}") from exc
        return [
            Generation(
                text=seq.text,
                finish_reason=seq.finish_reason,
                prompt_tokens=len(seq.prompt_ids) + seq.prefilled,
                completion_tokens=seq.completion_tokens,
                tokens=seq.trail.result()[0],
                top_logprobs=seq.trail.result()[1],
            )
            for seq in sequences
        ]

    def _submit(self, sequences: list[TokenSequence]) -> Iterator[tuple[str, TokenSequence]]:
        """Queue each sequence's current segment (driver thread), yielding each request id once it is in the engine."""
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        engine = self._llm.llm_engine
        for seq in sequences:
            prefix = self._prefix_ids(seq.segment.prefix)
            params = SamplingParams(
                temperature=0.0,
                max_tokens=seq.segment.max_tokens,
                logprobs=(self.logprobs or None) if seq.segment.logprobs else None,
                structured_outputs=StructuredOutputsParams(regex=seq.segment.pattern),
                output_kind=RequestOutputKind.FINAL_ONLY,
            )
            request_id = f"suffice-{next(self._request_ids)}"
            prompt = TokensPrompt(prompt_token_ids=seq.prompt_ids + seq.generated_ids + prefix)
            engine.add_request(request_id, prompt, params, priority=seq.rank)
            if prefix:
                # Prefilled, not decoded: part of the text, one stand-in token for it.
                seq.generated_ids.extend(prefix)
                seq.prefilled += len(prefix)
                seq.text += seq.segment.prefix
                seq.trail.stand_in(seq.segment.prefix)
            yield request_id, seq

    def _prefix_ids(self, prefix: str) -> list[int]:
        """A segment prefix's token ids (a handful of constant texts: kept)."""
        if prefix and prefix not in self._prefixes:
            self._prefixes[prefix] = [int(i) for i in self.text_ids(prefix)]
        return self._prefixes[prefix] if prefix else []

    def _absorb(self, seq: TokenSequence, completion: Any) -> None:
        """Append a finished segment to its sequence (an inner end-of-sequence token is dropped)."""
        token_ids = list(completion.token_ids)
        seq.completion_tokens += len(token_ids)
        kept = len(token_ids)
        while kept and token_ids[kept - 1] in self._eos_ids:
            kept -= 1
        start_text, start_ids = len(seq.text), len(seq.generated_ids)
        seq.generated_ids.extend(token_ids[:kept])
        seq.finish_reason = completion.finish_reason
        scored = seq.segment.logprobs
        seq.trail.add(
            completion.text, scored, _token_logprobs(token_ids, completion.logprobs) if scored else None, kept
        )
        seq.text += completion.text
        if seq.segment.speculative and completion.finish_reason == "stop":
            # Only a whole list is cut: one ended early ("error", "length") ends the request as it is.
            settled = seq.constraint.settled(seq.text, start_text)
            if settled != seq.text:
                # Cut back: the sequence continues from the kept text, re-encoded.
                piece = settled[start_text:]
                seq.generated_ids[start_ids:] = [int(i) for i in self.text_ids(piece)]
                seq.trail.cut_back(piece)
                seq.text = settled

    def close(self) -> None:
        life = getattr(self, "_life", None)
        if life is not None and life.llm is not None:
            life.stop(self.settings.gpu)
            del self._llm
