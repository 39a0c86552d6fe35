"""The decode-time constraint handed to an engine."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from suffice.grammars.regex import Rx

#: Tokens for the end-of-sequence token after the last byte.
EOS_TOKENS = 1


@dataclass(frozen=True)
class Constraint:
    """A regex every output must match, and the token budget that always fits it.

    ``max_tokens`` is the worst case: every token carries at least one byte, so a
    match of at most ``max_bytes`` bytes needs at most ``max_bytes + 1`` tokens.
    ``key`` names the shape (gate and chunk count); equal keys mean equal patterns,
    which lets engines and backends reuse one compiled form.
    """

    pattern: str
    max_bytes: int
    key: str
    _compiled: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_rx(cls, rx: Rx, key: str) -> Constraint:
        return cls(pattern=rx.pattern, max_bytes=rx.max_bytes, key=key)

    @property
    def max_tokens(self) -> int:
        return self.max_bytes + EOS_TOKENS

    def matches(self, text: str) -> bool:
        """Whether ``text`` is in the constraint's language (Python's ``re``)."""
        compiled = self._compiled
        if compiled is None:
            compiled = re.compile(self.pattern)
            object.__setattr__(self, "_compiled", compiled)
        return compiled.fullmatch(text) is not None
