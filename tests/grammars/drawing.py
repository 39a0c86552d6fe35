"""Strings a constraint allows, drawn by Hypothesis from its own pattern.

Hypothesis builds a character class by adding each code point of each range one by
one: the strings' class spans about 63,000 code points, and a sufficiency pattern
holds dozens of such classes, so drawing from the raw pattern took about 5 s an
example (62 s for the sufficiency property test, 51 s for recovery's).  The drawn
pattern is the constraint's own with that class narrowed to its edges and one
character of each UTF-8 length: every string drawn is still one the constraint
allows (the test checks ``matches`` on it), and each length of character still occurs.
"""

from __future__ import annotations

from hypothesis import strategies as st

from suffice.grammars.regex import STRING_CHAR_CLASS, STRING_FIRST_CHAR_CLASS

#: ASCII as the real class has it; then U+00A0 and U+00E9 (2 bytes), U+4E2D, U+D7FF,
#: U+E000 and U+FFFD (3 bytes): the ends of each range and one letter inside.
_WIDE = "\u00a0\u00e9\u4e2d\ud7ff\ue000\ufffd"
NARROW = {
    STRING_CHAR_CLASS: f"[ !#-\\[\\]-~{_WIDE}]",
    STRING_FIRST_CHAR_CLASS: f"[!#-\\[\\]-~{_WIDE}]",
}


def narrowed(pattern: str) -> str:
    """``pattern`` with every string character class narrowed (see the module's docstring)."""
    for wide, narrow in NARROW.items():
        pattern = pattern.replace(wide, narrow)
    return pattern


def allowed_strings(pattern: str) -> st.SearchStrategy[str]:
    narrow = narrowed(pattern)
    assert narrow != pattern, "no string character class to narrow: drawing would take minutes"
    return st.from_regex(narrow, fullmatch=True)
