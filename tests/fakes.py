"""A scripted engine for harness tests: whitespace tokens, answers from a script.

It proves harness logic (order, isolation, retries, fitting), never generation;
generation is proven on the real engine in tests/serving/test_vllm_engine.py.
"""

from __future__ import annotations

import json
import re
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

    # The embedded model's window (SmolLM2's 8,192): an adequacy verdict under a rubric of four criteria has a
    # worst case near 4,000 tokens, more than 4,096 leaves beside the prompt.
    def __init__(self, script: Script, max_model_len: int = 8192, fail_when: Callable[[str], bool] | None = None):
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


#: A segment's fence line in a recovery prompt, and its text up to the next fence line.
_SEGMENT = re.compile(r"^<<segment (\d+) \w+ \w+ \w+>>\n(.*?)(?=\n<<)", re.M | re.S)

#: What a scripted recovery model says of one segment: a label, or a label and its source numbers.
Labeller = Callable[[int, str], "str | tuple[str, list[int]]"]


def prompt_segments(request: GenerationRequest) -> list[tuple[int, str]]:
    """The ``(index, text)`` of each response segment a recovery window's prompt shows."""
    return [(int(i), text) for i, text in _SEGMENT.findall(request.messages[-1]["content"])]


def recovery_reply(
    request: GenerationRequest,
    label: str | Labeller = "supported",
    classification: str | None = None,
    notice: str = "What was missing.",
    queries: Sequence[str] = ("more evidence",),
) -> str:
    """A recovery window's output in the form its constraint allows: each segment the prompt shows labelled by
    ``label`` (a label for all, or a function of index and text; ``supported`` and ``partial`` cite source 0 unless
    it gives sources), the model's ``classification`` (default: the one its labels tally), and the abstention the
    constraint asks for exactly when they do not settle SUFFICIENT."""
    from suffice.gates.recovery.grammar import Classification, settle, tally

    entries = []
    labels = []
    for index, text in prompt_segments(request):
        said = label(index, text) if callable(label) else label
        name, sources = (said, [0] if said in ("supported", "partial") else []) if isinstance(said, str) else said
        labels.append(name)
        entries.append([index, name, list(sources)])
    computed = tally(labels)
    model = Classification(classification) if classification else computed
    out = {"classification": model.value, "segments": entries}
    if settle(computed, model) is not Classification.SUFFICIENT:
        out["abstention_notice"] = notice
        out["suggested_retrieval_queries"] = list(queries)
    text = json.dumps(out, separators=(",", ":"), ensure_ascii=False)
    assert request.constraint.matches(text), text
    return text
