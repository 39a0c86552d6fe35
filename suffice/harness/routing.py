"""One routing view over every gate's verdict: route, queries, gap, scores.

The pre-generation sufficiency gate has no decision object of its own; its route
follows the seed's rule (sufficient → proceed; otherwise the missing information
is what to retrieve).  The other two gates carry a decision computed in code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from suffice.grammars.adequacy import AdequacyVerdict
from suffice.grammars.recovery import RecoveryVerdict
from suffice.grammars.routes import Route
from suffice.grammars.sufficiency import SufficiencyVerdict


@dataclass(frozen=True)
class Routing:
    """``answer`` is what a ``deliver`` route hands to the user (``None`` for a
    pre-generation gate, which delivers evidence, not an answer), with ``caveats``
    when the gate accepted partial support."""

    route: Route
    reason: str
    queries: list[str] = field(default_factory=list)
    gap: list[str] = field(default_factory=list)
    scores: dict[str, Any] = field(default_factory=dict)
    rubric: str | None = None
    answer: str | None = None
    caveats: list[str] = field(default_factory=list)


def route_of(verdict: BaseModel) -> Routing:
    if isinstance(verdict, SufficiencyVerdict):
        scores: dict[str, Any] = {"confidence": verdict.confidence, "p_sufficient": verdict.p_sufficient}
        sufficient, reason = verdict.is_sufficient, "the context is sufficient"
        if verdict.decision is not None:
            sufficient, reason = verdict.decision.sufficient, verdict.decision.reason
            scores[verdict.decision.score_name] = verdict.decision.score
        if sufficient:
            return Routing("deliver", reason, scores=scores)
        gap = list(verdict.missing_information) or ["evidence for the question"]
        why = "the context is insufficient" if verdict.decision is None else verdict.decision.reason
        return Routing("retrieve_more", why, queries=list(verdict.missing_information), gap=gap, scores=scores)
    if isinstance(verdict, RecoveryVerdict) and verdict.decision is not None:
        rd = verdict.decision
        return Routing(
            rd.route,
            rd.reason,
            queries=list(rd.queries),
            gap=list(rd.gap),
            scores={
                "support_ratio": rd.support_ratio,
                "cumulative_score": rd.cumulative_score,
                "supporting_passages": rd.supporting_passages,
            },
            answer=verdict.delivered_answer,
            caveats=list(rd.caveats),
        )
    if isinstance(verdict, AdequacyVerdict):
        d = verdict.decision
        scores = {"composite": d.composite_score, "threshold": d.threshold, **verdict.dimensions.scores()}
        queries = list(verdict.missing_information)
        return Routing(
            d.route,
            d.reason,
            queries=queries,
            gap=list(verdict.missing_information),
            scores=scores,
            rubric=verdict.rubric,
        )
    raise TypeError(f"no routing for {type(verdict).__name__}")
