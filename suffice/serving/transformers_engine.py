"""The transformers + Outlines engine, for machines where vLLM cannot run.

Same interface and the same constraints as the vLLM engine: each request's regex
is enforced by an Outlines logits processor, and ``max_tokens`` is the
constraint's worst case.  Requests that share a constraint (same gate, same chunk
count) are generated together as one padded batch with one compiled processor,
which is reused across calls (building it is the expensive part).  Slower than vLLM
(no paged attention, no prefix cache), but it needs nothing beyond transformers.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from suffice.config import JudgeConfig
from suffice.exceptions import EngineError
from suffice.serving.base import Engine, Generation, GenerationRequest, TokenizerMixin
from suffice.serving.models import ModelRef, resolve_model
from suffice.serving.offline import force_offline

_GENERATORS_KEPT = 16
_BATCH = 8


class TransformersEngine(TokenizerMixin, Engine):
    def __init__(self, config: JudgeConfig, model: ModelRef | None = None) -> None:
        force_offline()
        ref = model or resolve_model(config.model)
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
        self._generators: OrderedDict[str, Any] = OrderedDict()
        self.model_id = ref.model_id
        self.model_path = ref.path
        self.backend = "outlines-transformers"
        limit = getattr(hf_model.config, "max_position_embeddings", None) or 8192
        self.max_model_len = min(int(limit), config.max_model_len or int(limit))

    def _generator(self, key: str, pattern: str) -> Any:
        generator = self._generators.get(key)
        if generator is None:
            from outlines.types import Regex

            generator = self._outlines.Generator(self._model, Regex(pattern))
            self._generators[key] = generator
            while len(self._generators) > _GENERATORS_KEPT:
                self._generators.popitem(last=False)
        else:
            self._generators.move_to_end(key)
        return generator

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        from outlines.inputs import Chat

        results: list[Generation | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request.constraint.key, []).append(index)
        for key, indices in groups.items():
            constraint = requests[indices[0]].constraint
            generator = self._generator(key, constraint.pattern)
            for start in range(0, len(indices), _BATCH):
                chunk = indices[start : start + _BATCH]
                prompts = [Chat(list(requests[i].messages)) for i in chunk]
                try:
                    texts = generator.batch(prompts, max_new_tokens=constraint.max_tokens, do_sample=False)
                except Exception as exc:
                    raise EngineError(f"transformers generation failed: {exc}") from exc
                for i, text in zip(chunk, texts, strict=True):
                    completion = self.count_tokens([text])[0]
                    results[i] = Generation(
                        text=text,
                        finish_reason="length" if completion >= constraint.max_tokens else "stop",
                        prompt_tokens=self.prompt_tokens(requests[i].messages),
                        completion_tokens=completion,
                    )
        return [r for r in results if r is not None]
