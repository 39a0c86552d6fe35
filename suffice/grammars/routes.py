"""The routes every gate's computed decision ends in, and the routing view (shared by
the harness, the audit log and the summary; each gate builds its own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: deliver/proceed to the answer, retrieve more evidence, abstain with the gap
#: described, or queue for a person.
Route = Literal["deliver", "retrieve_more", "abstain", "human_review"]

#: The rules that send a record to a person, by name (a review's ``reason`` and its payload's ``rule``):
#: a reviewer and a count per rule need a fixed word, not the free-text reason.
REVIEW_RULES: dict[str, str] = {
    "partial_under_high_stakes": "PARTIALLY_SUFFICIENT under a high-stakes threshold",
    "abstained_high_stakes": "an abstention under a high-stakes threshold",
    "budget_spent_high_stakes": "a high-stakes question whose retrieval budget was spent without sufficiency",
    "model_escalated": "the model recommended ESCALATE_TO_HUMAN",
    "model_flagged_unanswerable": "the model recommended FLAG_AS_UNANSWERABLE",
    "adequacy_rounds_exhausted": "adequacy still FAIL with no retrieval left (the round limit)",
    "two_failed_generations": "both generations for the record failed validation",
    "step_failed": "a harness step (retrieval, rewrite, generation) failed for the question",
    "input_error": "the record could not be read",
    "evaluation_failed": "the gate gave no verdict",
    "response_not_fully_checked": "a response longer than max_response_tokens, checked only up to the cut",
}


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
    #: For a ``human_review`` route: the rule that sent it (a key of :data:`REVIEW_RULES`).
    rule: str | None = None
