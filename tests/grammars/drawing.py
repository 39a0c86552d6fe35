"""Strings a constraint allows, drawn by Hypothesis from its own pattern.

Hypothesis builds a character class by adding each code point of each range one by
one: the strings' classes span about 63,000 code points each, and a sufficiency
pattern holds dozens of them, so drawing from the raw pattern took about 5 s an
example (62 s for the sufficiency property test, 51 s for recovery's).  The drawn
pattern is the constraint's own with every range above ASCII narrowed to its two
ends and the characters of :data:`PROBES` inside it: each narrowed class is a subset
of the real one, so every string drawn is one the constraint allows (the tests check
``matches`` on it), and characters of two and three UTF-8 bytes, the invisible and
the line-breaking ones among them, still occur.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

#: Characters kept inside a narrowed range when it holds them: a letter of two and
#: one of three UTF-8 bytes, then the separators and invisibles the gates treat
#: specially elsewhere (line and paragraph separators, ideographic space, BOM).
PROBES = "\u00e9\u4e2d\u2028\u2029\u3000\ufeff"
_WIDE_RANGE = re.compile("([^\x00-\x7f])-([^\x00-\x7f])")


def _narrow(match: re.Match[str]) -> str:
    low, high = match[1], match[2]
    inside = "".join(c for c in PROBES if low < c < high)
    return low + inside + high


def narrowed(pattern: str) -> str:
    """``pattern`` with every range above ASCII narrowed (see the module's docstring)."""
    narrow = _WIDE_RANGE.sub(_narrow, pattern)
    assert _WIDE_RANGE.search(narrow) is None
    return narrow


def allowed_strings(pattern: str) -> st.SearchStrategy[str]:
    """Strings of ``pattern`` narrowed; refuses a pattern with nothing to narrow, whose
    drawing would not need this (and a test calling it expects string fields)."""
    narrow = narrowed(pattern)
    assert narrow != pattern, "no range above ASCII to narrow"
    return st.from_regex(narrow, fullmatch=True)
