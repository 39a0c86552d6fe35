"""The routes every gate's computed decision ends in, and the routing view (shared by
the harness, the audit log and the summary; each gate builds its own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: deliver/proceed to the answer, retrieve more evidence, abstain with the gap
#: described, or queue for a person.
Route = Literal["deliver", "retrieve_more", "abstain", "human_review"]


@dataclass(frozen=True)
class Routing:
    """What a verdict routes to, built by its gate (:meth:`Gate.route`).

    ``answer`` is what a ``deliver`` route hands to the user (``None`` for a
    pre-generation gate, which delivers evidence, not an answer), with ``caveats``
    when the gate accepted partial support.
    """

    route: Route
    reason: str
    queries: list[str] = field(default_factory=list)
    gap: list[str] = field(default_factory=list)
    scores: dict[str, Any] = field(default_factory=dict)
    rubric: str | None = None
    answer: str | None = None
    caveats: list[str] = field(default_factory=list)
    #: The source ids backing a delivered ``answer``, beside it (the answer is delivered as it was given).
    citations: list[str] = field(default_factory=list)
    #: A checking gate's own wording of the answer, only where the record had no answer to deliver.
    judge_answer: str | None = None
