"""The decode-time constraint handed to an engine, and the segments it is decoded in.

Why segments: outlines-core builds a full index per distinct pattern (3.7-8 s, 320-820 MB each), so the large,
request-independent segments are compiled once per gate and only tiny segments name request ids.  The segments
compose to exactly the whole language (``pattern`` and ``check``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from suffice.grammars.regex import Rx

#: Tokens for the end-of-sequence token after the last byte.
EOS_TOKENS = 1


@dataclass(frozen=True)
class Segment:
    """One constrained generation step that continues the text generated so far.

    ``key`` names the pattern: equal keys mean equal patterns, sharing one compiled form.  ``max_bytes + 1``
    tokens always suffice (every token carries a byte, plus end-of-sequence).  ``prefix`` is literal text
    prefilled rather than decoded; it ends at a token boundary and outside a JSON string (outlines-core does
    not compile a large pattern opening inside one within vLLM's 120 s).
    """

    pattern: str
    max_bytes: int
    key: str
    #: Whether to report log-probabilities: only the decision needs them (they cost ~20% of decode time).
    logprobs: bool = False
    #: Whether the pattern depends on the request (chunk or source count): tiny and many.
    per_request: bool = False
    prefix: str = ""
    #: Whether the pattern admits outputs ``check`` rejects: the engine then keeps only
    #: :meth:`Constraint.settled` of the text and continues with exact segments.
    speculative: bool = False

    def __post_init__(self) -> None:
        if self.speculative and self.logprobs:
            # Per-token log-probabilities could not be cut with a speculative segment's text.
            raise ValueError(f"segment {self.key}: a speculative segment cannot carry log-probabilities")

    @classmethod
    def from_rx(cls, rx: Rx, key: str, **fields: Any) -> Segment:
        """A segment of ``rx``'s pattern and byte bound; ``fields`` are the other attributes."""
        return cls(pattern=rx.pattern, max_bytes=rx.max_bytes, key=key, **fields)

    @property
    def max_tokens(self) -> int:
        """Tokens to decode: the prefix is not decoded, so it does not count."""
        return self.max_bytes + EOS_TOKENS


#: Given the text generated so far (all segments, concatenated), the next segment,
#: or ``None`` when the output is complete.
Continuation = Callable[[str], Segment | None]

#: Given the text ending with a speculative segment's output, the longest prefix the language allows to continue.
Settle = Callable[[str], str]


@dataclass(frozen=True)
class Constraint:
    """A regex every output must match, the token budget that always fits it, and the segments it is
    generated in.  ``key`` names the whole shape (gate and counts)."""

    pattern: str
    max_bytes: int
    key: str
    #: The first segment; ``None`` means one segment, the whole pattern.
    head: Segment | None = None
    continuation: Continuation | None = field(default=None, repr=False, compare=False)
    #: The first segment with the request-independent ones after it merged, for engines without a KV cache.
    coarse_head: Segment | None = None
    #: What the pattern cannot say and the segments enforce (e.g. ascending ids); ``matches`` checks it too.
    check: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)
    #: Where a speculative segment's output is cut back (see :attr:`Segment.speculative`).
    settle: Settle | None = field(default=None, repr=False, compare=False)
    #: The most tokens decoding any output takes, all segments together (:attr:`max_completion_tokens`), as the
    #: gate that chains the segments counts it; ``None`` for one segment.
    completion_bound: int | None = None

    @classmethod
    def from_rx(cls, rx: Rx, key: str, **fields: Any) -> Constraint:
        """A constraint of ``rx``'s pattern and byte bound; ``fields`` are the other attributes."""
        return cls(pattern=rx.pattern, max_bytes=rx.max_bytes, key=key, **fields)

    @property
    def max_tokens(self) -> int:
        """Tokens the whole output and one end-of-sequence token can take: what the context window must leave."""
        return self.max_bytes + EOS_TOKENS

    @property
    def max_completion_tokens(self) -> int | None:
        """The most completion tokens one attempt at an output can cost: each decoded segment's ``max_tokens`` (every
        token carries at least one byte, and one end-of-sequence token ends it; prefixes are prefilled, not decoded),
        summed along the longest chain of segments the continuation can take, a speculative segment's text counted
        whole even where it is cut back.  ``None`` when a segmented constraint does not declare its bound."""
        if self.completion_bound is not None:
            return self.completion_bound
        if self.head is None or self.continuation is None:
            return self.first_segment().max_tokens
        return None

    def first_segment(self, coarse: bool = False) -> Segment:
        if coarse and self.coarse_head is not None:
            return self.coarse_head
        return self.head if self.head is not None else Segment(self.pattern, self.max_bytes, self.key, logprobs=True)

    def next_segment(self, text: str) -> Segment | None:
        """The segment that continues ``text`` (everything generated so far), if any."""
        if self.head is None or self.continuation is None:
            return None
        return self.continuation(text)

    def settled(self, text: str, segment_start: int) -> str:
        """What to keep of ``text`` after a speculative segment that began at ``segment_start``."""
        if self.settle is None:
            return text
        kept = self.settle(text)
        if len(kept) < segment_start or kept[:segment_start] != text[:segment_start]:
            raise ValueError(f"settle changed {text!r} to {kept!r} before its segment began at {segment_start}")
        return kept

    def segments_of(self, text: str, coarse: bool = False) -> list[tuple[Segment, str]]:
        """Split a complete output into the pieces its segments generate (prefix, then a match)."""
        pieces: list[tuple[Segment, str]] = []
        segment: Segment | None = self.first_segment(coarse)
        rest, done = text, ""
        while segment is not None:
            if not rest.startswith(segment.prefix):
                break
            body = rest[len(segment.prefix) :]
            compiled = re.compile(segment.pattern)
            match = next((end for end in range(len(body), 0, -1) if compiled.fullmatch(body[:end]) is not None), None)
            if match is None:
                break
            piece = segment.prefix + body[:match]
            pieces.append((segment, piece))
            done, rest = done + piece, rest[len(piece) :]
            segment = self.next_segment(done)
        if rest:
            raise ValueError(f"{text!r} does not split into this constraint's segments (left: {rest!r})")
        return pieces

    def matches(self, text: str) -> bool:
        """Whether ``text`` is in the constraint's language (Python's ``re``, then :attr:`check`)."""
        if self._compiled.fullmatch(text) is None:
            return False
        return self.check is None or self.check(text)

    @cached_property
    def _compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern)
