"""Fit an item's prompt into the model's context window.

Policy (README.md): the question and response are cut to their token limits, at most ``max_chunks`` chunks are
shown, and the room left after the worst-case output is shared equally ("water-filling"; long chunks end with
``[truncated]``).  Only when ``min_chunk_tokens`` per chunk does not fit are chunks left out, lowest score first.
Shown chunks are labelled ``0..n-1`` in their original order.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from suffice.exceptions import CancelledError, PromptTooLongError
from suffice.grammars.constraint import Constraint
from suffice.prompts.templates import Message, PromptTemplate, fence_seed
from suffice.prompts.windows import SegmentLike, plan_windows
from suffice.records.item import Chunk, ChunkId, Item
from suffice.records.text import normalise
from suffice.serving.base import Engine

TRUNCATION_MARK = " [truncated]"
_MARK_TOKENS = 4
_MAX_ATTEMPTS = 5
#: Room kept free for the one retry note the judge may append (see judge.RETRY_NOTE).
RETRY_RESERVE = 256


@dataclass(frozen=True)
class ShownChunk:
    label: int
    id: ChunkId
    text: str
    source: str | None
    truncated: bool
    score: float | None = None


class FitLimits(Protocol):
    """The limits fitting applies (a :class:`~suffice.config.JudgeConfig` has them)."""

    @property
    def max_question_tokens(self) -> int: ...
    @property
    def max_response_tokens(self) -> int: ...
    @property
    def min_chunk_tokens(self) -> int: ...
    @property
    def max_chunks(self) -> int: ...


def source_key(chunk: Chunk | ShownChunk) -> str:
    """A chunk's source id for citations: its ``source``, else its own id."""
    return chunk.source if chunk.source is not None else str(chunk.id)


def source_labels(chunks: Sequence[Chunk]) -> dict[str, int]:
    """Distinct sources numbered ``0..m-1`` in order of first appearance."""
    return {source: label for label, source in enumerate(dict.fromkeys(map(source_key, chunks)))}


@dataclass(frozen=True)
class FittedPrompt:
    messages: tuple[Message, ...]
    shown: tuple[ShownChunk, ...]
    constraint: Constraint
    truncated_chunk_ids: list[ChunkId]
    omitted_chunk_ids: list[ChunkId]
    question_truncated: bool
    response_truncated: bool = False
    #: The response's characters (as the prompt shows text) and how many of them the prompt holds.
    response_chars: int | None = None
    response_chars_checked: int | None = None
    #: The fence token the messages carry: with the messages, what a replay of the request needs.
    fence: str = ""
    #: A gate that judges a response segment by segment: its segments, and the windows after the first (each its
    #: messages and constraint; ``messages`` and ``constraint`` are the first window's).  Every window shows the same
    #: question and chunks, in the same words, before its segments: the prefix cache holds that part once.
    segments: tuple[SegmentLike, ...] = ()
    more_windows: tuple[tuple[tuple[Message, ...], Constraint], ...] = ()

    @property
    def prompts(self) -> list[tuple[tuple[Message, ...], Constraint]]:
        """Every request this prompt is judged in: one, or one per window."""
        return [(self.messages, self.constraint), *self.more_windows]

    @property
    def chunk_ids(self) -> list[ChunkId]:
        """The caller's id for each prompt label."""
        return [c.id for c in self.shown]

    @property
    def sources(self) -> list[str]:
        """The caller's source id for each source label."""
        return list(dict.fromkeys(source_key(c) for c in self.shown))


def water_level(lengths: Sequence[int], room: int) -> int:
    """The largest cap ``c`` with ``sum(min(l, c)) <= room``."""
    caps = range(max(lengths, default=0) + 1)
    return max(0, bisect.bisect_right(caps, room, key=lambda cap: sum(min(n, cap) for n in lengths)) - 1)


def _priority(chunks: Sequence[Chunk]) -> list[int]:
    """Indices, most worth keeping first."""
    if any(c.score is not None for c in chunks):
        return sorted(range(len(chunks)), key=lambda i: (chunks[i].score is None, -(chunks[i].score or 0.0), i))
    return list(range(len(chunks)))


#: No real token spans more characters than this, so text beyond ``max_model_len`` times it is cut before
#: tokenizing (a 5.4 MB chunk took 8.8 s, under the tokenizer lock every request waits on).
CHARS_PER_TOKEN_MAX = 32


def _precut(engine: Engine, text: str) -> tuple[str, bool]:
    """``text`` cut to what a window could ever show; whether it was cut."""
    limit = engine.max_model_len * CHARS_PER_TOKEN_MAX
    return (text[:limit], True) if len(text) > limit else (text, False)


def cut_text(engine: Engine, text: str, max_tokens: int) -> tuple[str, bool]:
    text, cut = _precut(engine, text)
    if not cut and engine.count_tokens([text])[0] <= max_tokens:
        return text, False
    return engine.truncate(text, max(max_tokens - _MARK_TOKENS, 1)) + TRUNCATION_MARK, True


def fit_prompt(
    engine: Engine,
    template: PromptTemplate,
    item: Item,
    config: FitLimits,
    constraint_for: Callable[[Sequence[Chunk]], Constraint],
    system_context: dict[str, Any],
    user_context: dict[str, Any],
    cancel: threading.Event | None = None,
    segments: Sequence[SegmentLike] | None = None,
) -> FittedPrompt:
    """Render the item's prompt so that prompt plus worst-case output fits the model; setting ``cancel``
    raises :class:`~suffice.exceptions.CancelledError` between steps.

    With ``segments`` (a gate that judges the response segment by segment), the response is shown as its segments,
    in windows of at most ``max_response_tokens`` (:func:`~suffice.prompts.windows.plan_windows`), each window one
    request with the same chunks; ``constraint_for`` is then called with ``window=(first, count)``.  Chunks are
    fitted for the window that needs the most room, so every window fits."""

    def check() -> None:
        if cancel is not None and cancel.is_set():
            raise CancelledError("the caller withdrew the request")

    check()
    # Text is counted and cut as the prompt shows it (NFKC can lengthen it).
    question, question_truncated = cut_text(engine, normalise(item.question), config.max_question_tokens)
    windows: list[tuple[int, int]] = []
    shown_segments: list[str] = []
    segment_tokens: list[int] = []
    response_chars = None if item.response is None else len(normalise(item.response))
    response: str | None = None
    response_truncated, response_chars_checked = False, response_chars
    if segments is not None:
        shown_segments = [normalise(s.text) for s in segments]
        segment_tokens = engine.count_tokens(shown_segments)
    elif item.response is not None:
        response, response_truncated = cut_text(engine, normalise(item.response), config.max_response_tokens)
        response_chars_checked = len(response) - (len(TRUNCATION_MARK) if response_truncated else 0)
    # The windows that need the most: room in the prompt (tokens of their segments) and in the output (segments).
    widest: tuple[int, int] | None = None
    longest: tuple[int, int] | None = None
    priority = _priority(item.chunks)
    keep = set(priority[: config.max_chunks])
    precut = [_precut(engine, normalise(c.text)) for c in item.chunks]
    check()
    lengths = engine.count_tokens([text for text, _ in precut])
    # A chunk cut before counting is longer than any window: always cut to its share.
    lengths = [engine.max_model_len + 1 if cut else n for n, (_, cut) in zip(lengths, precut, strict=True)]
    slack = 0
    # Every rendering of this item (measured with texts left out, cut, whole) gets one fence token.
    seed = fence_seed([item.question, item.response, *(t for c in item.chunks for t in _fenced_fields(c))])

    def render_fenced(
        keep: set[int], texts: dict[int, str], window: tuple[int, int] | None = None
    ) -> tuple[tuple[Message, ...], str]:
        kept = [item.chunks[i] for i in sorted(keep)]
        sources = source_labels(kept)
        shown = [
            {
                "label": label,
                "text": texts[i],
                "source": item.chunks[i].source,
                "source_label": sources[source_key(item.chunks[i])],
                "score": item.chunks[i].score,
                "date": item.chunks[i].date,
                "metadata": item.chunks[i].metadata_dict,
            }
            for label, i in enumerate(sorted(keep))
        ]
        context = {**user_context, "question": question, "chunks": shown, "response": response}
        if window is not None:
            first, count = window
            context["segments"] = [{"index": first + i, "text": shown_segments[first + i]} for i in range(count)]
            context["total_segments"] = len(shown_segments)
        return template.render_fenced(system_context, context, seed=seed)

    def window_constraint(keep: set[int], window: tuple[int, int] | None) -> Constraint:
        chunks = [item.chunks[i] for i in sorted(keep)]
        return constraint_for(chunks) if window is None else constraint_for(chunks, window=window)  # type: ignore[call-arg]

    if segments is not None:
        # A window's segments and its output's worst case take at most half the context the instructions and the
        # question leave (measured with no chunk and no segment shown): the evidence keeps the other half.
        base = engine.prompt_tokens(render_fenced(set(), {}, None)[0])
        half = (engine.max_model_len - RETRY_RESERVE - base) // 2

        def fits(count: int, tokens: int) -> bool:
            return tokens + window_constraint(keep, (0, count)).max_tokens <= half

        windows = plan_windows(segment_tokens, config.max_response_tokens, fits=fits)
        widest = max(windows, key=lambda w: sum(segment_tokens[w[0] : w[0] + w[1]]), default=None)
        longest = max(windows, key=lambda w: w[1], default=None)

    def measure(keep: set[int]) -> tuple[Constraint, int, int]:
        """(constraint, budget, overhead) with these chunks shown, their text left out: for windows, the budget
        the window of the most segments leaves, the overhead of the one of the most text."""
        constraint = window_constraint(keep, longest)
        budget = engine.max_model_len - constraint.max_tokens - RETRY_RESERVE
        return constraint, budget, engine.prompt_tokens(render_fenced(keep, {i: "" for i in keep}, widest)[0])

    for _ in range(_MAX_ATTEMPTS):
        check()
        # Leave chunks out only while even the minimum share cannot fit: the most chunks (best first) whose
        # labels, sources and minimum shares fit, each count measured with its own overhead.
        ranked = [i for i in priority if i in keep]
        constraint, budget, overhead = measure(keep)
        if len(ranked) * config.min_chunk_tokens > budget - overhead - slack:
            lo, hi = 0, len(ranked) - 1  # lo fits (none shown), hi is the most that might
            found: dict[int, tuple[Constraint, int, int]] = {}
            while lo < hi:
                check()
                mid = (lo + hi + 1) // 2
                found[mid] = measure(set(ranked[:mid]))
                _, b, o = found[mid]
                if mid * config.min_chunk_tokens <= b - o - slack:
                    lo = mid
                else:
                    hi = mid - 1
            if lo == 0:
                raise _too_long(engine, found.get(1) or measure(set(ranked[:1])))
            keep = set(ranked[:lo])
            constraint, budget, overhead = found[lo]
        room = budget - overhead - slack
        if room <= 0:
            raise _too_long(engine, (constraint, budget, overhead))
        kept = sorted(keep)
        cap = water_level([lengths[i] for i in kept], room)
        truncated = {i for i in kept if lengths[i] > cap}
        texts = {
            i: engine.truncate(precut[i][0], max(cap - _MARK_TOKENS, 1)) + TRUNCATION_MARK
            if i in truncated
            else precut[i][0]
            for i in kept
        }
        rendered = [render_fenced(keep, texts, w) for w in (windows or [None])]  # type: ignore[list-item]
        messages, fence = rendered[0]
        actual = max(engine.prompt_tokens(m) for m, _ in rendered)
        if actual <= budget:
            shown = tuple(
                ShownChunk(label, c.id, texts[i], c.source, i in truncated, c.score)
                for label, (i, c) in enumerate((i, item.chunks[i]) for i in kept)
            )
            return FittedPrompt(
                messages=messages,
                shown=shown,
                truncated_chunk_ids=[item.chunks[i].id for i in kept if i in truncated],
                omitted_chunk_ids=[c.id for i, c in enumerate(item.chunks) if i not in keep],
                question_truncated=question_truncated,
                response_truncated=response_truncated,
                response_chars=response_chars,
                response_chars_checked=response_chars_checked,
                fence=fence,
                segments=tuple(segments or ()),
                constraint=window_constraint(keep, windows[0]) if windows else constraint,
                more_windows=tuple(
                    (m, window_constraint(keep, w)) for (m, _), w in zip(rendered[1:], windows[1:], strict=True)
                ),
            )
        # Token boundaries shift when texts are joined: take the overshoot off and retry.
        slack += actual - budget + 8
    raise PromptTooLongError(f"could not fit the prompt into max_model_len={engine.max_model_len}")


def _fenced_fields(chunk: Chunk) -> tuple[str | None, ...]:
    """What of a chunk reaches its fence, as text for the fence seed."""
    metadata = None if chunk.metadata is None else json.dumps(chunk.metadata, ensure_ascii=False)
    return (str(chunk.id), chunk.text, chunk.source, chunk.date, metadata)


def _too_long(engine: Engine, measured: tuple[Constraint, int, int]) -> PromptTooLongError:
    """The error naming where the window went."""
    constraint, _, overhead = measured
    return PromptTooLongError(
        f"the prompt does not fit in max_model_len={engine.max_model_len} with any chunk shown: "
        f"the output's worst case takes {constraint.max_tokens} tokens, the retry reserve {RETRY_RESERVE}, "
        f"the instructions and question {overhead}, which leaves "
        f"{engine.max_model_len - constraint.max_tokens - RETRY_RESERVE - overhead} for evidence"
    )
