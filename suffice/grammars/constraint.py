"""The decode-time constraint handed to an engine, and the segments it is decoded in.

Why segments: a structured-output backend compiles every distinct pattern it sees,
and the part of a verdict that depends on the request (which chunk ids exist, which
sources can be cited) would make a whole pattern distinct per chunk count.
outlines-core builds a full index per pattern (about 3.7-8 s and 320-820 MB each
with SmolLM2's vocabulary) and vLLM keeps up to 128 of them, so a run over varied
chunk counts would hold tens of GB.  So a constraint is decoded as a chain of
segments that continue one token sequence: the large, request-independent segments
are the same for every request of a gate (compiled once), and only tiny segments
name request ids (a choice among at most ``n`` short chunk labels or source numbers,
against 2.3-5.3 s for each large segment of the sufficiency gate with outlines-core).

The whole language (``pattern`` and ``check``) is still what every output must match,
and the segments compose to exactly that language: tests check both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from suffice.grammars.regex import Rx

#: Tokens for the end-of-sequence token after the last byte.
EOS_TOKENS = 1


@dataclass(frozen=True)
class Segment:
    """One constrained generation step that continues the text generated so far.

    ``key`` names the pattern: equal keys mean equal patterns, so engines and
    backends share one compiled form.  Every token carries at least one byte, so
    ``max_bytes + 1`` tokens (the last one for end-of-sequence) always suffice.

    ``prefix`` is literal text the segment opens with, which nothing could make
    different: the engine appends its tokens to the sequence (prefilled with the
    prompt, one forward pass) instead of decoding them one step each under a mask
    that leaves a single choice, and the pattern covers only what follows.  Each
    prefix is tokenized on its own, so it ends where the tokenizer's own split of a
    typical verdict has a boundary (the model then continues token sequences it
    knows: SmolLM2 writes ``":"`` as one token, so a prefix does not end between
    ``":`` and ``"``).  A prefix before a large pattern ends outside a JSON string:
    outlines-core does not finish compiling, within vLLM's 120 s, a large pattern
    that opens inside one.  ``tests/grammars/test_prefixes.py`` checks both.
    """

    pattern: str
    max_bytes: int
    key: str
    #: Whether the engine should report log-probabilities for this segment: only the
    #: segment holding the decision needs them, and computing them for every token
    #: cost about a fifth of the decode time here (214 vs 173 ms a step, batch 16).
    logprobs: bool = False
    #: Whether the pattern depends on the request (chunk or source count): such
    #: segments are tiny and many; the others are few, large and worth keeping.
    per_request: bool = False
    prefix: str = ""
    #: Whether the pattern admits outputs the constraint's ``check`` rejects (a list
    #: in any order where the language wants it ascending): after this segment the
    #: engine keeps only :meth:`Constraint.settled` of the text and continues from
    #: there with exact segments.  One segment for a whole list instead of one per
    #: item: most outputs need no cut.
    speculative: bool = False

    def __post_init__(self) -> None:
        if self.speculative and self.logprobs:
            # An engine replaces a cut segment's one stand-in token; per-token
            # log-probabilities could not be cut with it.
            raise ValueError(f"segment {self.key}: a speculative segment cannot carry log-probabilities")

    @classmethod
    def from_rx(
        cls,
        rx: Rx,
        key: str,
        logprobs: bool = False,
        per_request: bool = False,
        prefix: str = "",
        speculative: bool = False,
    ) -> Segment:
        return cls(
            pattern=rx.pattern,
            max_bytes=rx.max_bytes,
            key=key,
            logprobs=logprobs,
            per_request=per_request,
            prefix=prefix,
            speculative=speculative,
        )

    @property
    def max_tokens(self) -> int:
        """Tokens to decode: the prefix is not decoded, so it does not count."""
        return self.max_bytes + EOS_TOKENS


#: Given the text generated so far (all segments, concatenated), the next segment,
#: or ``None`` when the output is complete.
Continuation = Callable[[str], Segment | None]

#: Given the text generated so far, ending with a speculative segment's output, the
#: longest prefix of it that the language allows to continue (the text itself when
#: nothing must go), possibly closed where only one ending is left; it never changes
#: what came before that segment.
Settle = Callable[[str], str]


@dataclass(frozen=True)
class Constraint:
    """A regex every output must match, the token budget that always fits it, and
    the segments it is generated in.

    ``max_tokens`` is the worst case over the whole output: segments only split it,
    the end-of-sequence token of an inner segment is not kept in the sequence.
    ``key`` names the whole shape (gate and counts); it is for identification and
    for engines that compile whole patterns, not for the segments.
    """

    pattern: str
    max_bytes: int
    key: str
    #: The first segment; ``None`` means one segment, the whole pattern.
    head: Segment | None = None
    continuation: Continuation | None = field(default=None, repr=False, compare=False)
    #: The first segment with the request-independent segments after it merged (same
    #: continuation), for engines that pay for every continuation by re-encoding the
    #: whole prompt (no KV cache across calls): fewer steps, still compiled once.
    coarse_head: Segment | None = None
    #: What the pattern cannot say and the segments enforce (e.g. ids in ascending
    #: order: a regex for that grows exponentially with the chunk count); ``matches``
    #: checks it after the pattern.
    check: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)
    #: Where a speculative segment's output is cut back (see :attr:`Segment.speculative`).
    settle: Settle | None = field(default=None, repr=False, compare=False)
    _compiled: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_rx(
        cls,
        rx: Rx,
        key: str,
        head: Segment | None = None,
        continuation: Continuation | None = None,
        coarse_head: Segment | None = None,
        check: Callable[[str], bool] | None = None,
        settle: Settle | None = None,
    ) -> Constraint:
        return cls(
            pattern=rx.pattern,
            max_bytes=rx.max_bytes,
            key=key,
            head=head,
            continuation=continuation,
            coarse_head=coarse_head,
            check=check,
            settle=settle,
        )

    @property
    def max_tokens(self) -> int:
        return self.max_bytes + EOS_TOKENS

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
        """What to keep of ``text`` after a speculative segment that began at
        ``segment_start``: the engine drops the rest and continues from there."""
        if self.settle is None:
            return text
        kept = self.settle(text)
        if len(kept) < segment_start or kept[:segment_start] != text[:segment_start]:
            raise ValueError(f"settle changed {text!r} to {kept!r} before its segment began at {segment_start}")
        return kept

    def segments_of(self, text: str, coarse: bool = False) -> list[tuple[Segment, str]]:
        """Split a complete output into the pieces its segments generate (for tests
        and checks): each piece is its segment's prefix, then a match of its pattern."""
        pieces: list[tuple[Segment, str]] = []
        segment: Segment | None = self.first_segment(coarse)
        rest, done = text, ""
        while segment is not None:
            if not rest.startswith(segment.prefix):
                break
            body = rest[len(segment.prefix) :]
            compiled = re.compile(segment.pattern)
            match = next(
                (end for end in range(len(body), 0, -1) if compiled.fullmatch(body[:end]) is not None),
                None,
            )
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
        """Whether ``text`` is in the constraint's language (Python's ``re``, then
        :attr:`check`)."""
        compiled = self._compiled
        if compiled is None:
            compiled = re.compile(self.pattern)
            object.__setattr__(self, "_compiled", compiled)
        if compiled.fullmatch(text) is None:
            return False
        return self.check is None or self.check(text)
