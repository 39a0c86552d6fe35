"""What both engines that build a generation segment by segment (vLLM in process, a vLLM server over HTTP) do alike:
end-of-sequence ids, top log-probabilities merged by text, and the token trail a verdict's scores are read from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def eos_ids(tokenizer: Any, extra: object) -> frozenset[int]:
    """The tokenizer's end-of-sequence id and ``extra``, the model's generation config's ``eos_token_id`` (one id,
    a list of them, or none)."""
    ids: set[int] = set()
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        ids.add(int(tokenizer.eos_token_id))
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, list):
        ids.update(int(i) for i in extra if isinstance(i, int))
    return frozenset(ids)


def merge_by_text(entries: Iterable[tuple[str | None, float]]) -> dict[str, float]:
    """Top log-probabilities keyed by token text: tokens that decode alike are one choice, so their probabilities
    add; an entry without text is left out."""
    top: dict[str, float] = {}
    for text, logprob in entries:
        if text is None:
            continue
        previous = top.get(text)
        top[text] = float(logprob) if previous is None else float(np.logaddexp(previous, logprob))
    return top


class TokenTrail:
    """A generation's tokens and their top log-probabilities, built segment by segment so positions stay aligned
    with the text: a prefilled prefix or a segment generated without log-probabilities is one stand-in token with
    none.  Once a scored segment comes back without them, the generation has none (``wanted``: any are asked)."""

    def __init__(self, wanted: bool) -> None:
        self.tokens: list[str] = []
        self.tops: list[dict[str, float]] = []
        self.ok = wanted

    def stand_in(self, text: str) -> None:
        self.tokens.append(text)
        self.tops.append({})

    def add(
        self, piece: str, scored: bool, mapped: tuple[Sequence[str], Sequence[dict[str, float]]] | None, kept: int
    ) -> None:
        """A segment's ``piece`` of text: its first ``kept`` tokens (``mapped``: texts and tops, ``None`` when the
        engine gave none) where the segment is ``scored``, else one stand-in token."""
        if not scored:
            self.stand_in(piece)
        elif mapped is None:
            self.ok = False
        elif self.ok:
            self.tokens.extend(mapped[0][:kept])
            self.tops.extend(mapped[1][:kept])

    def cut_back(self, piece: str) -> None:
        """The last segment's text was cut back to ``piece``: one token stands for it."""
        self.tokens[-1] = piece

    def result(self) -> tuple[tuple[str, ...] | None, tuple[dict[str, float], ...] | None]:
        """``(tokens, top_logprobs)`` for :class:`~suffice.serving.base.Generation`; ``(None, None)`` without."""
        return (tuple(self.tokens), tuple(self.tops)) if self.ok else (None, None)
