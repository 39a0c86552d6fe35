"""How a response judged segment by segment is cut into windows: consecutive segments, one request each.

A window holds at most ``max_tokens`` tokens of segments (``max_response_tokens``: the room one request gives the
response), at most :data:`WINDOW_SEGMENTS` segments (each adds its entry to the output's worst case, which the
prompt must leave room for), and, given ``fits``, only what it accepts: the fitting asks that a window's segments
and its output's worst case take at most half the model's context left after the instructions and the question,
so that the evidence keeps the other half.  A segment that fits no window alone is a window of its own (the fitting
then says why the prompt cannot fit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

#: The most segments one request judges (the recovery gate's bound: :class:`RecoveryBounds`'s ``WINDOW_SEGMENTS``).
WINDOW_SEGMENTS = 32
#: Tokens a segment's fence line adds to its text (``<<segment 12 three fence words>>``), counted with it.
SEGMENT_FENCE_TOKENS = 12


class SegmentLike(Protocol):
    @property
    def text(self) -> str: ...


def plan_windows(
    tokens: Sequence[int],
    max_tokens: int,
    max_segments: int = WINDOW_SEGMENTS,
    fits: Callable[[int, int], bool] | None = None,
) -> list[tuple[int, int]]:
    """``(first, count)`` of each window over segments of ``tokens`` tokens each, in order, every segment in exactly
    one; as few windows as the bounds allow, filled in order.  ``fits(count, tokens)`` says whether a window of that
    many segments and tokens (fence lines counted) may be.  No segments, no window."""
    if max_segments < 1:
        raise ValueError(f"max_segments must be >= 1, got {max_segments}")
    windows: list[tuple[int, int]] = []
    first, held = 0, 0
    for index, count in enumerate(tokens):
        size = count + SEGMENT_FENCE_TOKENS
        over = held + size > max_tokens or index - first >= max_segments
        if index > first and (over or (fits is not None and not fits(index - first + 1, held + size))):
            windows.append((first, index - first))
            first, held = index, 0
        held += size
    if len(tokens) > first:
        windows.append((first, len(tokens) - first))
    return windows
