"""One request generated segment by segment through ``/v1/completions``, every segment continuing the same token
sequence (sent as token ids).

The constraint goes in ``"structured_outputs": {"regex": ...}``; a server may ignore it (``guided_regex`` is silently
dropped, or no backend runs), so every segment is checked with ``re`` and the first outside its pattern raises
:class:`~suffice.exceptions.ConstraintNotEnforcedError`.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from suffice.exceptions import ConstraintNotEnforcedError, EngineError, EngineFatalError
from suffice.grammars.constraint import Segment
from suffice.serving.base import Generation, GenerationRequest
from suffice.serving.decoding import TokenTrail, merge_by_text
from suffice.serving.engine_config import EngineConfig
from suffice.serving.openai.client import QUOTE_CHARS, Client, ServerError
from suffice.serving.openai.scheduling import Scheduling
from suffice.serving.openai.tokens import Tokens


class Aborted(Exception):
    """A request given up because another request of its batch hit a fatal error."""


class SegmentGenerator:
    """Requests generated on a server whose context window is ``server_max_len`` tokens."""

    def __init__(
        self, client: Client, tokens: Tokens, config: EngineConfig, server_max_len: int, scheduling: Scheduling
    ) -> None:
        self._client = client
        self._scheduling = scheduling
        self._tokens = tokens
        self._config = config
        self._server_max_len = server_max_len
        self._server = f"the server at {client.base_url}"

    def generate(
        self, request: GenerationRequest, aborted: threading.Event, prompt: list[int], priority: int
    ) -> Generation:
        """Every segment of ``request`` (its chat-templated ``prompt``), each sent with ``priority``, unless
        ``aborted`` is set or the client closed first."""
        generated: list[int] = []
        text = ""
        trail = TokenTrail(wanted=self._config.top_logprobs > 0)
        completion_tokens = 0
        prefilled = 0  # prefix tokens: prefilled, counted with the prompt
        finish: str | None = None
        segment: Segment | None = request.constraint.first_segment()
        while segment is not None:
            if aborted.is_set():
                raise Aborted
            if self._client.closed:
                raise EngineFatalError("the openai engine was closed while generating")
            if segment.prefix:
                # Prefilled, not decoded: part of the text, one stand-in token for it.
                prefix_ids = self._tokens.prefix_ids(segment.prefix)
                generated.extend(prefix_ids)
                prefilled += len(prefix_ids)
                text += segment.prefix
                trail.stand_in(segment.prefix)
            room = self._server_max_len - len(prompt) - len(generated)
            if room <= 0:
                finish = "length"
                break
            choice = self._complete(prompt + generated, segment, min(segment.max_tokens, room), priority)
            piece = choice["text"]
            finish = choice.get("finish_reason")
            ids = choice.get("token_ids")
            if not isinstance(piece, str):
                raise EngineError(f"{self._server} answered without a text")
            if not isinstance(ids, list):
                raise EngineFatalError(
                    f"{self._server} returned no token_ids: suffice needs a vLLM server "
                    "that honours return_token_ids (each segment continues the token sequence)"
                )
            completion_tokens += len(ids)
            if finish not in ("stop", "length"):
                raise EngineError(f"{self._server} ended the request with finish_reason={finish!r}")
            if self._outside(segment, piece, cut_off=finish == "length"):
                raise ConstraintNotEnforcedError(
                    segment.key,
                    f"{self._server} returned text outside the constraint ({segment.key}): "
                    f"{piece[:QUOTE_CHARS]!r}, so it does not enforce structured outputs: start it with "
                    '--structured-outputs-config \'{"backend": "xgrammar"}\' (or another backend) on a vLLM '
                    "version that reads the request's structured_outputs field",
                )
            kept = len(ids) - self._tokens.ends_with_stop_token(ids, piece, finish, choice.get("stop_reason"))
            start_text, start_ids = len(text), len(generated)
            generated.extend(int(i) for i in ids[:kept])
            scored = segment.logprobs
            trail.add(piece, scored, _token_logprobs(choice.get("logprobs"), len(ids)) if scored else None, kept)
            text += piece
            if finish == "length":
                break
            if segment.speculative:
                settled = request.constraint.settled(text, start_text)
                if settled != text:
                    # Cut back: the sequence continues from the kept text, re-encoded.
                    generated[start_ids:] = self._tokens.encode(settled[start_text:])
                    trail.cut_back(settled[start_text:])
                    text = settled
            segment = request.constraint.next_segment(text)
        return Generation(
            text=text,
            finish_reason=finish,
            prompt_tokens=len(prompt) + prefilled,
            completion_tokens=completion_tokens,
            tokens=trail.result()[0],
            top_logprobs=trail.result()[1],
        )

    def _complete(self, ids: list[int], segment: Segment, max_tokens: int, priority: int) -> dict[str, Any]:
        """One segment: the server's only choice."""
        body: dict[str, Any] = {
            "model": self._tokens.model_id,
            "prompt": ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": self._config.seed,
            "n": 1,
            "structured_outputs": {"regex": segment.pattern},
            "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if segment.logprobs and self._config.top_logprobs > 0:
            body["logprobs"] = self._config.top_logprobs
        if self._scheduling.send_priority:
            body["priority"] = priority
        try:
            try:
                data = self._client.call("POST", "/v1/completions", body).json()
            except ServerError as exc:
                if exc.status != 400 or "priority" not in body or "priorit" not in str(exc).lower():
                    raise
                self._scheduling.refused_priority(str(exc))
                del body["priority"]
                data = self._client.call("POST", "/v1/completions", body).json()
        except ServerError as exc:
            if exc.status == 404:  # the route or the model is gone: no request can succeed
                raise EngineFatalError(f"{exc} (did the server restart with another model?)") from exc
            raise
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{self._server} answered /v1/completions without a choice")
        return dict(choices[0])

    def _outside(self, segment: Segment, piece: str, *, cut_off: bool) -> bool:
        """Whether ``piece`` cannot be the segment's constrained text; a cut-off one only if longer than the
        pattern's longest match (a trailing U+FFFD from a split character not counted)."""
        if cut_off:
            return len(piece.rstrip("\ufffd").encode("utf-8")) > segment.max_bytes
        return re.fullmatch(segment.pattern, piece) is None  # re keeps the compiled patterns


def _token_logprobs(logprobs: object, count: int) -> tuple[list[str], list[dict[str, float]]] | None:
    """Token texts and top log-probabilities by text, or ``None`` unless there is one entry per generated id."""
    if not isinstance(logprobs, dict):
        return None
    tokens, tops = logprobs.get("tokens"), logprobs.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(tops, list) or not len(tokens) == len(tops) == count:
        return None
    out: list[dict[str, float]] = []
    for token, top in zip(tokens, tops, strict=True):
        if not isinstance(token, str) or not isinstance(top, dict):
            return None
        # Keyed by text already (the server merged tokens that decode alike): merged as the in-process engine's.
        out.append(merge_by_text((str(text), float(logprob)) for text, logprob in top.items()))
    return list(tokens), out
