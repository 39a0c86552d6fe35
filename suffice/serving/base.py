"""The engine interface: one batched call, results in input order (tests run the harness on a scripted engine)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from threading import Event
from typing import Any, Protocol, runtime_checkable

from suffice.exceptions import ConfigError
from suffice.grammars.constraint import Constraint
from suffice.records.text import defuse
from suffice.serving.engine_config import EngineConfig

Message = dict[str, str]


@runtime_checkable
class Progress(Protocol):
    """How a batch moves on, told to what shows it (the command line's bar): whole numbers, and every method
    implemented (:class:`OnRecords` makes one of a plain function of records finished).

    Prompts read are told apart from records finished, so a display can show a large batch reading its prompts:
    prefill is 56 % of a request's time (48-item benchmark), and a bar moved only on completion sat at 0 % for 7 of
    the demo's 8.4 minutes.  Records answered without the engine are told apart too, so a rate of the records
    judged leaves them out."""

    def __call__(self, records: int) -> None:
        """``records`` more records finished: one in all per record."""

    def read(self, prompts: int) -> None:
        """``prompts`` more requests have had their prompts read (their prefill is done)."""

    def skipped(self, records: int) -> None:
        """``records`` more records were answered without the engine (a row kept from an earlier run, a repeated
        id, a record known to stop the engine)."""


class OnRecords:
    """A :class:`Progress` of a plain function of records finished: it is not told prompts read, and records answered
    without the engine count as finished (a count, not a rate)."""

    def __init__(self, records: Callable[[int], None]) -> None:
        self._records = records

    def __call__(self, records: int) -> None:
        self._records(records)

    def read(self, prompts: int) -> None:
        """A prompt read is not a record finished: nothing to count."""

    def skipped(self, records: int) -> None:
        self._records(records)


def checked_progress(progress: object, parameter: str = "progress") -> Progress | None:
    """``progress`` (or ``None``) once it is a whole :class:`Progress`; anything else, a plain function of records
    finished too, is a :class:`~suffice.exceptions.ConfigError` naming ``parameter``, before any record is judged, not
    from the engine's loop mid-batch."""
    if progress is None or isinstance(progress, Progress):
        return progress
    raise ConfigError(
        parameter,
        type(progress).__name__,
        "must be a suffice.serving.base.Progress (called with records finished, read, skipped); "
        "a plain function of records finished is OnRecords(fn)",
    )


def report_read(progress: Progress | None, prompts: int) -> None:
    """Tell ``progress`` (if any) that ``prompts`` more prompts have been read."""
    if progress is not None:
        progress.read(prompts)


class CappedProgress:
    """A :class:`Progress` that passes on at most ``owed`` records and prompts read in all (a split, retried batch
    credits twice); :meth:`settle` tops the records up to exactly that."""

    def __init__(self, progress: Progress, owed: int) -> None:
        self._progress = progress
        self._owed = owed
        self.given = 0
        self.prompts = 0

    def __call__(self, records: int) -> None:
        records = min(records, self._owed - self.given)
        if records > 0:
            self.given += records
            self._progress(records)

    def read(self, prompts: int) -> None:
        prompts = min(prompts, self._owed - self.prompts)
        if prompts > 0:
            self.prompts += prompts
            self._progress.read(prompts)

    def skipped(self, records: int) -> None:
        """Records the engine never saw are not what this batch owes: passed on as they are."""
        self._progress.skipped(records)

    def settle(self) -> None:
        self(self._owed - self.given)


@dataclass(frozen=True)
class GenerationRequest:
    messages: tuple[Message, ...]
    constraint: Constraint


@dataclass(frozen=True)
class Generation:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    #: The generated tokens as text and each one's top log-probabilities by text, when the engine reports them.
    tokens: tuple[str, ...] | None = None
    top_logprobs: tuple[dict[str, float], ...] | None = None


class Engine(ABC):
    """A text generator that honours a segmented regex constraint per request."""

    #: Identifies the weights in results (a name or path, never a hub id fetched live).
    model_id: str
    #: The structured-output backend that enforces constraints.
    backend: str
    #: Prompt plus generated tokens must fit in this many tokens.
    max_model_len: int
    #: Whether a verdict from this engine may be reused for the same input (:mod:`suffice.cache`): only where
    #: :meth:`settings_of` pins the weights (a local folder's fingerprint) and decoding is greedy.
    cacheable: bool = False

    def __init__(self, config: EngineConfig) -> None:  # noqa: B027 - the factory's signature
        """Start the engine; every engine class takes its :class:`EngineConfig` and nothing else required."""

    @classmethod
    @abstractmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        """What an engine built from ``config`` records beside a batch output (a resumed run must match), known
        before it starts."""

    @abstractmethod
    def generate(
        self, requests: Sequence[GenerationRequest], progress: Progress | None = None, cancel: Event | None = None
    ) -> list[Generation]:
        """Generate for all requests in one batch, segment by segment; ``result[i]`` answers ``requests[i]``.

        Once ``cancel`` is set the engine stops this call's requests (within about a second) and raises
        :class:`~suffice.exceptions.CancelledError`.
        """

    @abstractmethod
    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts of plain texts (no special tokens)."""

    @abstractmethod
    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` that is at most ``max_tokens`` tokens."""

    @abstractmethod
    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of the chat-templated prompt, generation prompt included."""

    def served(self) -> dict[str, str]:
        """What the running engine says it serves (a server's model), recorded and checked on resume."""
        return {}

    def check_alive(self) -> None:  # noqa: B027 - in-process engines cannot die apart from us
        """Raise :class:`~suffice.exceptions.EngineDeadError` if the engine can no longer generate."""

    def close(self) -> None:  # noqa: B027 - optional hook, most engines hold nothing
        """Release the engine's resources; the default holds none."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def local_settings(config: EngineConfig) -> dict[str, str]:
    """:meth:`Engine.settings_of` for engines that load a local model folder."""
    from suffice.serving.weights import resolve_model

    ref = resolve_model(config.model, config.verbose)
    settings = {
        "model": ref.model_id,
        "weights": ref.fingerprint(),
        "engine": config.kind,
        "backend": config.backend_name,
        "max_model_len": "model's own" if config.max_model_len is None else str(config.max_model_len),
    }
    # And every other setting that changes verdicts, where set (the dtype asked for: the vLLM engine records the
    # one its machine chose too).
    return config.recorded(settings)


#: Serialises calls into Hugging Face tokenizers: a shared Rust tokenizer raises "Already borrowed" otherwise.
TOKENIZER_LOCK = threading.Lock()


class TokenizerMixin:
    """Token counting for engines that hold a Hugging Face tokenizer (thread-safe)."""

    tokenizer: object
    _specials: tuple[str, ...] | None = None

    def special_spellings(self) -> tuple[str, ...]:
        """The texts this tokenizer reads as special tokens (``<|im_end|>``...), longest first."""
        if self._specials is None:
            tokenizer: Any = self.tokenizer
            found = set(getattr(tokenizer, "all_special_tokens", ()))
            for token in getattr(tokenizer, "added_tokens_decoder", {}).values():
                if getattr(token, "special", False):
                    found.add(str(token.content))
            self._specials = tuple(sorted((t for t in found if len(t) > 1), key=len, reverse=True))
        return self._specials

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        with TOKENIZER_LOCK:
            encoded = self.tokenizer(list(texts), add_special_tokens=False)  # type: ignore[operator]
        return [len(ids) for ids in encoded["input_ids"]]

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.text_ids(text)
        if len(ids) <= max_tokens:
            return text
        with TOKENIZER_LOCK:
            prefix: str = self.tokenizer.decode(ids[: max(max_tokens, 0)])  # type: ignore[attr-defined]
        # A cut inside a multi-byte character decodes to U+FFFD; drop it.
        return prefix.rstrip("\ufffd")

    def chat_text(self, messages: Sequence[Message]) -> str:
        """The chat-templated prompt, generation prompt included; every message but the system prompt is defused
        first, since special tokens are recognised and a spelled ``<|im_end|>`` would end the turn."""
        specials = self.special_spellings()
        safe = [m if m["role"] == "system" else {**m, "content": defuse(m["content"], specials)} for m in messages]
        with TOKENIZER_LOCK:
            text: str = self.tokenizer.apply_chat_template(  # type: ignore[attr-defined]
                safe, tokenize=False, add_generation_prompt=True
            )
        return text

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return self.text_ids(self.chat_text(messages))

    def text_ids(self, text: str) -> list[int]:
        """``text``'s token ids, no special tokens added."""
        with TOKENIZER_LOCK:
            encoded = self.tokenizer(text, add_special_tokens=False)  # type: ignore[operator]
        ids: list[int] = encoded["input_ids"]
        return ids

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.prompt_ids(messages))
