"""The routes every gate's computed decision ends in, and the routing view (shared by
the harness, the audit log and the summary; each gate builds its own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
    "question_not_fully_checked": "a question longer than max_question_tokens, checked only up to the cut",
    "decision_only": "a decision-only verdict where the gate's rule needs the full verdict to deliver",
    "decision_only_high_stakes": "a negative decision-only verdict under high stakes, where the full verdict "
    "could send it to a person",
}


class _Gate(Protocol):
    name: str


class Checked:
    """The proof that a verdict holds everything its gate's rule reads and that the whole question and response
    were shown to the model (chunks cut to fit are the gate's rule's to weigh): the only thing a :class:`Routing`
    delivers with.  :func:`deliver` makes it after its checks; nothing
    else can (the constructor takes a key private to this module), so a cheap mode, a wrapper or a plug-in gate
    that asks for ``deliver`` on a verdict that was not checked gets a route to a person instead."""

    __slots__ = ("gate",)

    def __init__(self, key: object, gate: str) -> None:
        if key is not _KEY:
            raise TypeError("a Checked proof is made by suffice.grammars.routes.deliver, never by hand")
        self.gate = gate

    def __repr__(self) -> str:
        return f"Checked({self.gate!r})"


_KEY = object()


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
    #: For a ``human_review`` route: the rule that sent it (a key of :data:`REVIEW_RULES`).
    rule: str | None = None
    #: What lets a ``deliver`` route be built at all (see :class:`Checked`, made only by :func:`deliver`).
    checked: Checked | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.route == "deliver" and not isinstance(self.checked, Checked):
            raise TypeError(
                "a deliver route is built by Routing.deliver(gate, verdict, reason, ...), which "
                "checks that the verdict was checked in full; Routing('deliver', ...) cannot be built directly"
            )

    @classmethod
    def deliver(cls, gate: _Gate, verdict: object, reason: str, **fields: Any) -> Routing:
        """What a gate's rule returns where it would deliver: see :func:`deliver`."""
        return deliver(gate, verdict, reason, **fields)


def unchecked(gate: _Gate, verdict: object) -> tuple[str, str, list[str]] | None:
    """Why ``verdict`` cannot deliver for ``gate`` whatever its gate's rule says, as (rule, reason, gap), or
    ``None``: a decision-only verdict where the gate's rule reads more than the decision (its
    ``decision_delivers`` is false), a question or a response cut to fit the prompt."""
    if getattr(verdict, "detail", None) == "decision" and not getattr(gate, "decision_delivers", False):
        return (
            "decision_only",
            f"a decision-only verdict cannot deliver for the {gate.name} gate, whose rule reads the full verdict",
            ["the full verdict (judge with --detail full, or auto, which judges it)"],
        )
    if getattr(verdict, "question_truncated", False):
        return (
            "question_not_fully_checked",
            "the question was cut to fit max_question_tokens: the model judged its beginning only",
            ["the end of the question was cut to fit max_question_tokens and never checked"],
        )
    if getattr(verdict, "response_truncated", False):
        return (
            "response_not_fully_checked",
            "the response was cut to fit max_response_tokens: the model checked its beginning only",
            ["the end of the response was cut to fit max_response_tokens and never checked"],
        )
    return None


def deliver(gate: _Gate, verdict: object, reason: str, **fields: Any) -> Routing:
    """The one way to a ``deliver`` route: ``Routing("deliver", reason, **fields)`` when the verdict was checked
    in full (:func:`unchecked` finds nothing), else a route to a person under the rule that stopped it, with what
    was not checked as the gap.  Every gate's rule ends here when it would deliver, so no mode, wrapper or entry
    point delivers what was not checked."""
    stopped = unchecked(gate, verdict)
    if stopped is None:
        return Routing("deliver", reason, checked=Checked(_KEY, gate.name), **fields)
    rule, why, gap = stopped
    kept = {k: v for k, v in fields.items() if k in ("scores", "rubric")}
    return Routing("human_review", f"{why}; on what it saw, {reason}", gap=gap, rule=rule, **kept)
