"""Token ids for the openai engine: a local tokenizer folder's, or the server's own
``/tokenize`` and ``/detokenize`` routes; kept where the same text comes back."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from suffice.exceptions import ConfigError, EngineError
from suffice.serving.base import TOKENIZER_LOCK, Message, TokenizerMixin
from suffice.serving.decoding import eos_ids
from suffice.serving.offline import offline
from suffice.serving.openai.client import Client

#: Chat prompts whose token ids are kept (fitting asks for a prompt's length, then
#: generation for its ids: one tokenization, not two round trips).
_PROMPTS_KEPT = 512


class LocalTokenizer(TokenizerMixin):
    """A local Hugging Face tokenizer folder (never a hub download)."""

    def __init__(self, folder: Path) -> None:
        if not folder.is_dir():
            raise ConfigError("tokenizer", str(folder), "is not a folder (give a local Hugging Face tokenizer folder)")
        try:
            with offline():
                from transformers import AutoTokenizer

                self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as exc:
            raise ConfigError("tokenizer", str(folder), f"cannot be loaded: {type(exc).__name__}: {exc}") from exc
        self.eos_ids = eos_ids(self.tokenizer, _generation_eos(folder))

    def decode(self, ids: Sequence[int]) -> str:
        with TOKENIZER_LOCK:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))  # type: ignore[attr-defined]


def _generation_eos(folder: Path) -> object:
    """The ``eos_token_id`` of the folder's generation config, if it has one."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return json.loads((folder / "generation_config.json").read_text()).get("eos_token_id")
    return None


class Tokens:
    """Tokens of ``model_id``: with ``local`` where given, else asked of the server."""

    def __init__(self, client: Client, local: LocalTokenizer | None, model_id: str) -> None:
        self.local = local
        self._client = client
        self.model_id = model_id
        self._prompts: OrderedDict[tuple[tuple[tuple[str, str], ...], ...], list[int]] = OrderedDict()
        self._prefixes: dict[str, list[int]] = {}
        self._pieces: dict[int, str] = {}
        self._lock = threading.Lock()

    def server_encode(self, text: str) -> list[int]:
        body = {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        return _ids(self._client.post_json("/tokenize", body))

    def _server_decode(self, ids: Sequence[int]) -> str:
        data = self._client.post_json("/detokenize", {"model": self.model_id, "tokens": list(ids)})
        text = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise EngineError(f"the server at {self._client.base_url} answered /detokenize without a prompt text")
        return text

    def count(self, texts: Sequence[str]) -> list[int]:
        if self.local is not None:
            return self.local.count_tokens(texts)
        return [len(self.server_encode(text)) for text in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        if self.local is not None:
            return self.local.truncate(text, max_tokens)
        ids = self.server_encode(text)
        if len(ids) <= max_tokens:
            return text
        # A cut inside a multi-byte character decodes to U+FFFD; drop it.
        return self._server_decode(ids[: max(max_tokens, 0)]).rstrip("\ufffd")

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The chat-templated prompt's ids, generation prompt included (kept for reuse)."""
        key = tuple(tuple(sorted(m.items())) for m in messages)
        with self._lock:
            cached = self._prompts.get(key)
            if cached is not None:
                self._prompts.move_to_end(key)
                return cached
        if self.local is not None:
            ids = self.local.prompt_ids(messages)
        else:
            body = {"model": self.model_id, "messages": list(messages), "add_generation_prompt": True}
            ids = _ids(self._client.post_json("/tokenize", body))
        with self._lock:
            self._prompts[key] = ids
            while len(self._prompts) > _PROMPTS_KEPT:
                self._prompts.popitem(last=False)
        return ids

    def prefix_ids(self, prefix: str) -> list[int]:
        """A segment prefix's token ids (a handful of constant texts: kept)."""
        ids = self._prefixes.get(prefix)
        if ids is None:
            ids = self.encode(prefix)
            with self._lock:
                self._prefixes[prefix] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """``text``'s token ids: with the local tokenizer if there is one, else the server's."""
        return self.local.text_ids(text) if self.local is not None else self.server_encode(text)

    def _piece(self, token_id: int) -> str:
        """One token's text with special tokens spelled out (kept: few distinct ids end a segment)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self.local.decode([token_id]) if self.local is not None else self._server_decode([token_id])
            self._pieces[token_id] = piece
        return piece

    def ends_with_stop_token(self, ids: Sequence[int], text: str, finish: str, stop_reason: object) -> bool:
        """Whether the last generated id is the token the server stopped on.

        vLLM keeps the end-of-sequence (or stop) token it stopped on in ``token_ids`` and
        leaves it out of ``text``; a server that drops it ends on a token of the text.
        It must not be fed back into the sequence: the next segment continues the text.
        """
        if finish != "stop" or not ids or isinstance(stop_reason, str):
            return False
        last = ids[-1]
        if isinstance(stop_reason, int) and not isinstance(stop_reason, bool):
            return last == stop_reason
        if self.local is not None and last in self.local.eos_ids:
            return True
        piece = self._piece(last)
        return not piece or not text.endswith(piece)


def _ids(data: object) -> list[int]:
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise EngineError("the server answered /tokenize without token ids")
    return tokens
