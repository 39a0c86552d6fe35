"""The transformers + Outlines engine, for machines where vLLM cannot run.

Same interface and the same constraints as the vLLM engine: each request's regex
is enforced segment by segment by an Outlines logits processor, and ``max_tokens``
is each segment's worst case.  Requests at the same segment are generated together
as one padded batch with one compiled processor, reused across calls (building it
is the expensive part, and the large segments are the same for every request).  Slower than vLLM
(no paged attention, no prefix cache), but it needs nothing beyond transformers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from threading import Event
from typing import Any

from suffice.exceptions import CancelledError, EngineError
from suffice.grammars.constraint import Segment
from suffice.serving.base import Engine, Generation, GenerationRequest, Progress, TokenizerMixin, local_settings
from suffice.serving.engine_config import EngineConfig
from suffice.serving.offline import offline
from suffice.serving.weights import ModelRef, resolve_model

#: Generators for per-request segments (tiny, many) kept; the request-independent
#: ones (a few per gate, each an index built in seconds) are always kept.
_GENERATORS_KEPT = 32
_BATCH = 8


class TransformersEngine(TokenizerMixin, Engine):
    cacheable = True  # greedy decoding of a local folder whose fingerprint is in settings_of

    def __init__(self, config: EngineConfig, model: ModelRef | None = None) -> None:
        # The loading (and the first imports of transformers and its hub client): see suffice.serving.offline.
        with offline():
            ref = model or resolve_model(config.model, config.verbose)
            try:
                import outlines
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise EngineError(f"the transformers engine needs transformers and outlines: {exc}") from exc
            try:
                tokenizer = AutoTokenizer.from_pretrained(ref.path, local_files_only=True)
                dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
                hf_model = AutoModelForCausalLM.from_pretrained(ref.path, local_files_only=True, dtype=dtype)
            except Exception as exc:
                raise EngineError(f"transformers could not load {ref.path}: {exc}") from exc
        if torch.cuda.is_available():
            hf_model = hf_model.to("cuda")  # type: ignore[arg-type]
        hf_model.eval()  # type: ignore[no-untyped-call]
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        torch.manual_seed(config.seed)
        self.tokenizer = tokenizer
        self._outlines = outlines
        self._model = outlines.from_transformers(hf_model, tokenizer)  # type: ignore[arg-type]
        # Prompts arrive templated (plus the segments generated so far): no second template.
        self._model.type_adapter.has_chat_template = False  # type: ignore[attr-defined]
        self._generators: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._shared: dict[str, Any] = {}
        self.model_id = ref.model_id
        self.model_path = ref.path
        self.backend = "outlines-transformers"
        limit = getattr(hf_model.config, "max_position_embeddings", None) or 8192
        self.max_model_len = min(int(limit), config.max_model_len or int(limit))

    @classmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        return local_settings(config)

    def _generator(self, segment: Segment) -> Any:
        cache = self._generators if segment.per_request else self._shared
        generator = cache.get(segment.key)
        if generator is None:
            from outlines.types import Regex

            generator = self._outlines.Generator(self._model, Regex(segment.pattern))
            cache[segment.key] = generator
            while len(self._generators) > _GENERATORS_KEPT:
                self._generators.popitem(last=False)
        elif segment.per_request:
            self._generators.move_to_end(segment.key)
        return generator

    def generate(
        self, requests: Sequence[GenerationRequest], progress: Progress | None = None, cancel: Event | None = None
    ) -> list[Generation]:
        """Segment by segment: each round generates the current segment of every open
        request, grouped by segment pattern, each prompt being the templated chat plus
        the text generated so far."""
        prompts = [self.chat_text(r.messages) for r in requests]
        texts = [""] * len(requests)
        completion = [0] * len(requests)
        finish: list[str | None] = [None] * len(requests)
        # Coarse segments: every continuation re-encodes the prompt here, so the
        # request-independent segments are merged (still compiled once).
        current: dict[int, Segment] = {i: r.constraint.first_segment(coarse=True) for i, r in enumerate(requests)}
        while current:
            groups: dict[str, list[int]] = {}
            for index, segment in current.items():
                groups.setdefault(segment.key, []).append(index)
            following: dict[int, Segment] = {}
            for indices in groups.values():
                segment = current[indices[0]]
                with self._lock:
                    generator = self._generator(segment)
                for start in range(0, len(indices), _BATCH):
                    if cancel is not None and cancel.is_set():
                        raise CancelledError("the caller withdrew the request")
                    chunk = indices[start : start + _BATCH]
                    for i in chunk:
                        texts[i] += segment.prefix  # prefilled with the prompt, not decoded
                    try:
                        with self._lock:  # one generation at a time: the processors keep state
                            outputs = generator.batch(
                                [prompts[i] + texts[i] for i in chunk],
                                max_new_tokens=segment.max_tokens,
                                do_sample=False,
                            )
                    except Exception as exc:
                        raise EngineError(f"transformers generation failed: {exc}") from exc
                    for i, text in zip(chunk, outputs, strict=True):
                        used = self.count_tokens([text])[0]
                        completion[i] += used
                        texts[i] += text
                        if used >= segment.max_tokens:
                            finish[i] = "length"
                            continue
                        finish[i] = "stop"
                        if segment.speculative:  # the text is re-encoded each call: a cut is all it takes
                            start = len(texts[i]) - len(text)
                            texts[i] = requests[i].constraint.settled(texts[i], start)
                        nxt = requests[i].constraint.next_segment(texts[i])
                        if nxt is not None:
                            following[i] = nxt
                        elif progress is not None:
                            progress(1)
            current = following
        return [
            Generation(
                text=texts[i],
                finish_reason=finish[i],
                prompt_tokens=self.prompt_tokens(r.messages),
                completion_tokens=completion[i],
            )
            for i, r in enumerate(requests)
        ]
