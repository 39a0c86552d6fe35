"""Write ``suffice/prompts/fence_words.txt``: the words a fence token is drawn from.

Each is a lowercase ASCII word of 4-9 letters that the embedded model's tokenizer spells
as one token after a space (so a fence token of three words costs three tokens), taken
in the tokenizer's merge order (commonest first), leaving out the words of the gates'
own instructions (a token reading "sufficient" could lean on the verdict).  Exactly
8192 words: 13 bits each, drawn without bias from 13 bits of an HMAC.

    PYTHONPATH=. python scripts/fence_words.py [MODEL_FOLDER]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from transformers import AutoTokenizer

from suffice.serving.weights import resolve_model

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "suffice" / "prompts" / "fence_words.txt"
COUNT = 8192
#: Words a prompt's structure or a verdict already uses, and a few a prompt should not carry.
EXCLUDED = {"chunk", "question", "answer", "sentence", "source", "name", "score", "date", "metadata", "code"}
EXCLUDED |= {"racist", "fetus", "murd", "rape", "nazi", "porn", "sexy", "slave", "slaves", "kill", "killed"}


def instruction_words() -> set[str]:
    words: set[str] = set()
    for template in (ROOT / "suffice").rglob("*.j2"):
        words |= {w.lower() for w in re.findall(r"[A-Za-z]+", template.read_text())}
    return words


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else str(resolve_model(None).path)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    banned = EXCLUDED | instruction_words()
    ranked = sorted(
        (i, w[1:])
        for w, i in tokenizer.get_vocab().items()
        if w.startswith("\u0120") and w[1:].isascii() and w[1:].isalpha() and w[1:].islower() and 4 <= len(w) - 1 <= 9
    )
    words = [w for _, w in ranked if w not in banned][:COUNT]
    assert len(words) == COUNT, len(words)
    TARGET.write_text("".join(f"{w}\n" for w in words))
    print(f"{len(words)} words written to {TARGET}")


if __name__ == "__main__":
    main()
