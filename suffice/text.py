"""Text handling shared by the prompts and the engines."""

from __future__ import annotations

from collections.abc import Sequence

#: Put inside a special token's spelling in user text, so that it is read as text:
#: invisible, and a character no tokenizer merges with ``<`` or ``|``.
WORD_JOINER = "\u2060"


def defuse(text: str, specials: Sequence[str]) -> str:
    """``text`` with every spelling of a special token broken by :data:`WORD_JOINER`
    (``specials`` longest first, so one that contains another is broken whole)."""
    for special in specials:
        if special in text:
            text = text.replace(special, special[0] + WORD_JOINER + special[1:])
    return text
