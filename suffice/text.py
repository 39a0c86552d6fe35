"""Text handling shared by the prompts, the engines and the command line."""

from __future__ import annotations

import re
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


#: What a terminal acts on instead of showing: C0 controls, DEL, C1 controls, the bidi embeddings, overrides and
#: isolates (U+202A-202E, U+2066-2069), and lone surrogates (undecodable bytes read from a tampered log).
_UNSAFE_ON_A_TERMINAL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_text(value: object) -> str:
    """``str(value)`` with every character a terminal would act on written as its ``repr`` escape (``\\x1b``,
    ``\\u202e``, ``\\n``): ids, paths and messages are data, and an id such as ``"\\x1b]0;owned\\x07"`` must
    reach the screen as text, not retitle the window or reorder what follows.  The CLI prints user data through it."""
    return _UNSAFE_ON_A_TERMINAL.sub(lambda m: repr(m.group())[1:-1], str(value))
