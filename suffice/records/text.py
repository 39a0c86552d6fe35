"""Text handling shared by the prompts, the engines and the command line."""

from __future__ import annotations

import re
import unicodedata
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


#: Breaks a model may read as a new line besides ``\n``: CR (alone or before LF), vertical
#: tab, form feed, the file/group/record separators, NEL, and the Unicode line and
#: paragraph separators (every break ``str.splitlines`` knows).
_BREAKS = re.compile("\r\n?|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


#: Characters removed from user text: controls but tab and newline (after breaks became
#: newlines) and every format character (Unicode category Cf: soft hyphen, zero-width
#: space and joiners, bidi controls, word joiner, BOM, tags...) up to Unicode 15, as a
#: class because a regex runs in C (tests check it against ``unicodedata``).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)


def _strip_invisible(text: str) -> str:
    return _INVISIBLE.sub("", _BREAKS.sub("\n", text))


def normalise(text: str) -> str:
    """User text as the prompt shows it: NFKC (fullwidth and other compatibility forms
    become their plain letters, NBSP and ideographic spaces a space), every line break a
    ``\n``, no control or invisible format character (:data:`_INVISIBLE`).  Idempotent:
    NFKC makes none of the characters stripped."""
    text = _strip_invisible(text)
    return text if unicodedata.is_normalized("NFKC", text) else _strip_invisible(unicodedata.normalize("NFKC", text))
