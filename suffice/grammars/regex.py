"""A tiny regex algebra that knows the longest text each pattern can match.

Why: no structured-output backend in vLLM enforces every JSON-schema bound (see
the project's field notes), so the gates constrain decoding with regular
expressions in which every part is bounded.  Each piece carries ``max_bytes``,
the largest UTF-8 size of any string it accepts.  Under constrained decoding
every generated token adds at least one byte, so ``max_bytes + 1`` (for the
end-of-sequence token) bounds the tokens a request can need: ``max_tokens`` is
computed, not guessed, and generation cannot stop mid-JSON.

The syntax is the common subset that outlines-core, xgrammar and llguidance all
accept: plain groups ``( )``, ``|``, ``?``, ``{m,n}`` and bracket classes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

_SPECIAL = set("\\.^$|?*+()[]{}")

#: Characters allowed inside generated JSON strings: printable ASCII except the
#: quote and the backslash (so no escape sequence is ever needed), then the Basic
#: Multilingual Plane without control characters and surrogates.  Non-Latin
#: scripts stay expressible; each character is at most 3 bytes in UTF-8.
STRING_CHAR_CLASS = "[ !#-\\[\\]-~\u00a0-\ud7ff\ue000-\ufffd]"
#: The same without the space: the first character of a non-empty string.
STRING_FIRST_CHAR_CLASS = "[!#-\\[\\]-~\u00a0-\ud7ff\ue000-\ufffd]"
STRING_CHAR_MAX_BYTES = 3


def escape(text: str) -> str:
    """Escape regex metacharacters only (``re.escape`` also escapes spaces and
    quotes, which not every backend's regex parser accepts)."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


@dataclass(frozen=True)
class Rx:
    """A regex pattern with the largest UTF-8 byte length it can match."""

    pattern: str
    max_bytes: int

    def __add__(self, other: Rx) -> Rx:
        return Rx(self.pattern + other.pattern, self.max_bytes + other.max_bytes)


def lit(text: str) -> Rx:
    """``text`` exactly."""
    return Rx(escape(text), len(text.encode("utf-8")))


def seq(*parts: Rx) -> Rx:
    """The parts one after another."""
    return Rx("".join(p.pattern for p in parts), sum(p.max_bytes for p in parts))


def alt(*parts: Rx) -> Rx:
    """One of the parts."""
    if not parts:
        raise ValueError("alt() needs at least one alternative")
    if len(parts) == 1:
        return parts[0]
    return Rx("(" + "|".join(p.pattern for p in parts) + ")", max(p.max_bytes for p in parts))


def opt(part: Rx) -> Rx:
    """The part, or nothing."""
    return Rx("(" + part.pattern + ")?", part.max_bytes)


def repeat(part: Rx, lo: int, hi: int) -> Rx:
    """The part ``lo`` to ``hi`` times."""
    if not 0 <= lo <= hi:
        raise ValueError(f"repeat bounds must satisfy 0 <= lo <= hi, got lo={lo}, hi={hi}")
    if hi == 0:
        return Rx("", 0)
    return Rx("(" + part.pattern + "){" + f"{lo},{hi}" + "}", part.max_bytes * hi)


def json_string(min_len: int, max_len: int) -> Rx:
    """A JSON string of ``min_len``..``max_len`` characters that never needs escapes.

    A non-empty string may not start with a space, so "   " cannot pass for content.
    """
    if not 0 <= min_len <= max_len or max_len < 1:
        raise ValueError(f"string bounds must satisfy 0 <= min_len <= max_len >= 1, got {min_len}, {max_len}")
    first = Rx(STRING_FIRST_CHAR_CLASS, STRING_CHAR_MAX_BYTES)
    rest = Rx(STRING_CHAR_CLASS, STRING_CHAR_MAX_BYTES)
    body = seq(first, repeat(rest, 0, max_len - 1))
    if min_len == 0:
        body = opt(body)
    return seq(lit('"'), body, lit('"'))


def json_list(item: Rx, min_items: int, max_items: int) -> Rx:
    """A compact JSON array of ``min_items``..``max_items`` items."""
    if not 0 <= min_items <= max_items or max_items < 1:
        raise ValueError(f"list bounds must satisfy 0 <= min <= max >= 1, got {min_items}, {max_items}")
    more = repeat(seq(lit(","), item), max(min_items - 1, 0), max_items - 1)
    body = seq(item, more)
    if min_items == 0:
        body = opt(body)
    return seq(lit("["), body, lit("]"))


def json_members(fields: list[tuple[str, Rx]]) -> Rx:
    """``"key":value`` pairs joined by commas, without the braces."""
    return seq(
        *[seq(lit(("," if index else "") + json.dumps(key) + ":"), value) for index, (key, value) in enumerate(fields)]
    )


def json_object(fields: list[tuple[str, Rx]]) -> Rx:
    """A compact JSON object with exactly these keys in this order."""
    return seq(lit("{"), json_members(fields), lit("}"))


JSON_BOOL = Rx("(true|false)", 5)
#: A probability with at most two decimals: 0, 0.5, 0.05, 1, 1.0, 1.00.
UNIT_INTERVAL = Rx("(0(\\.[0-9]{1,2})?|1(\\.0{1,2})?)", 4)
