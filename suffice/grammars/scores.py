"""Probabilities of a gate's decision read from the engine's token log-probabilities.

At the position where the constraint leaves only the decision's values open
(``true``/``false``; the three classes; ``"PASS"``/``"FAIL"``), the engine's top
log-probabilities (computed after the grammar mask, so they are renormalised over
what the constraint allows) say how much mass went to each value.  A token may
cover only part of a value (``t``, ``SU``) or run past it (``true,``); each counts
for the value it leads to.  Costs no extra engine call.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence


def decision_probabilities(
    text: str, tokens: Sequence[str], top_logprobs: Sequence[Mapping[str, float]], marker: str, values: Sequence[str]
) -> dict[str, float] | None:
    """``{value: probability}`` at the first position after ``marker``, or ``None``
    when the position cannot be located or no candidate decides between values."""
    found = text.find(marker)
    if found < 0 or not tokens or len(tokens) != len(top_logprobs):
        return None
    # A prefix all values share (the quote of '"PASS"' / '"FAIL"') is forced by the
    # grammar: the decision happens after it.
    common = os.path.commonprefix(list(values))  # noqa: RUF071 - a character prefix is meant
    start = found + len(marker) + len(common)
    labels = {v[len(common) :]: v for v in values}
    index = position = 0
    while index < len(tokens) and position + len(tokens[index]) <= start:
        position += len(tokens[index])
        index += 1
    if index == len(tokens):
        return None
    forced = text[position:start]
    if text[position : position + len(tokens[index])] != tokens[index]:
        return None  # decoded tokens drifted from the text (a split multi-byte character)
    mass = dict.fromkeys(values, 0.0)
    for candidate, logprob in top_logprobs[index].items():
        if not candidate.startswith(forced) or len(candidate) == len(forced):
            continue
        rest = candidate[len(forced) :]
        matches = [v for v in labels if v.startswith(rest) or rest.startswith(v)]
        if len(matches) == 1:
            mass[labels[matches[0]]] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {v: m / total for v, m in mass.items()}
