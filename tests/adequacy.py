"""Scripted adequacy outputs: every criterion of a rubric scored, numbered in order, as the constraint writes them."""

from __future__ import annotations

import re

from suffice.gates.adequacy.store import RubricStore
from suffice.serving.base import GenerationRequest


def criteria(rubric: str, score: float = 0.9, assessment: str = "a") -> list[dict[str, object]]:
    """Each criterion of the built-in ``rubric`` (``NAME[@VERSION]``) scored ``score``."""
    count = len(RubricStore().get(rubric).criteria)
    return [{"criterion": n, "score": score, "assessment": assessment} for n in range(1, count + 1)]


def rubric_of(request: GenerationRequest) -> str:
    """The rubric (``name@version``) the request's prompt states, as the seed's **Adequacy Rubric** label names it."""
    found = re.search(r"\*\*Adequacy Rubric \(([^)]+)\):\*\*", request.messages[0]["content"])
    assert found is not None, "not an adequacy prompt"
    return found[1]
