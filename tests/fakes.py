"""A scripted engine for harness tests: whitespace tokens, answers from a script.

It proves harness logic (order, isolation, retries, fitting), never generation;
generation is proven on the real engine in tests/serving/test_vllm_engine.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from suffice.exceptions import CancelledError, EngineError
from suffice.serving.base import Engine, Generation, GenerationRequest, Message, Progress
from suffice.serving.engine_config import EngineConfig

Script = Callable[[GenerationRequest], str | Generation]


def words(text: str) -> list[str]:
    return text.split()


class ScriptedEngine(Engine):
    model_id = "scripted"
    backend = "scripted"

    def __init__(self, script: Script, max_model_len: int = 4096, fail_when: Callable[[str], bool] | None = None):
        self.script = script
        self.max_model_len = max_model_len
        self.fail_when = fail_when
        self.calls: list[int] = []

    @classmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        return {"model": "scripted", "weights": "none", "engine": "scripted", "backend": "scripted"}

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        self.calls.append(len(requests))
        if self.fail_when and any(self.fail_when(r.messages[-1]["content"]) for r in requests):
            raise EngineError("scripted engine failure")
        out = []
        for r in requests:
            if cancel is not None and cancel.is_set():
                raise CancelledError("the caller withdrew the request")
            answer = self.script(r)
            if isinstance(answer, Generation):
                out.append(answer)
            else:
                out.append(Generation(answer, "stop", self.prompt_tokens(r.messages), len(words(answer))))
            if progress is not None:
                progress(1)
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(words(t)) for t in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        return " ".join(words(text)[:max_tokens])

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(words(m["content"])) + 2 for m in messages)
