"""From a recovery verdict and a :class:`SufficiencyThreshold` to one routing decision.

The seeds ask for the routing to be deterministic and computed from the
structured output, never from free text: the same verdict, evidence and
threshold always give the same decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from suffice.exceptions import ConfigError
from suffice.gates.recovery.grammar import Classification, RecoveryDecision, RecoveryVerdict
from suffice.grammars.routes import Route
from suffice.prompts.fitting import ShownChunk, source_key


@dataclass(frozen=True)
class SufficiencyThreshold:
    """When evidence is enough to deliver an answer.

    ``min_cumulative_score`` is in the retriever's own units (chunks without a
    score count 0), any finite number, since a cross-encoder's logits are negative;
    ``None`` (the default) asks for none.

    ``accept_partial`` delivers a PARTIALLY_SUFFICIENT verdict whose
    support ratio meets ``required_support_ratio``: the checked answer goes out with
    caveats naming what the evidence does not support (the seed: "a looser threshold
    allows partial answers with caveats").  ``high_stakes`` sends PARTIALLY_SUFFICIENT
    verdicts and exhausted retrieval budgets to human review instead of deciding
    automatically.
    """

    min_passages: int = 1
    min_cumulative_score: float | None = None
    required_support_ratio: float = 1.0
    accept_partial: bool = False
    high_stakes: bool = False

    def __post_init__(self) -> None:
        if self.min_passages < 0:
            raise ConfigError("min_passages", self.min_passages, "must be >= 0")
        score = self.min_cumulative_score
        if score is not None and (
            isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score)
        ):
            raise ConfigError("min_cumulative_score", score, "must be a finite number (or None: no minimum)")
        if not 0.0 <= self.required_support_ratio <= 1.0:
            raise ConfigError("required_support_ratio", self.required_support_ratio, "must be in [0, 1]")

    @classmethod
    def strict(cls) -> SufficiencyThreshold:
        """Compliance-sensitive use: any gap abstains or goes to a person."""
        return cls(min_passages=2, required_support_ratio=1.0, high_stakes=True)

    @classmethod
    def loose(cls) -> SufficiencyThreshold:
        """Exploratory use: partial answers with caveats are acceptable."""
        return cls(min_passages=1, required_support_ratio=0.5, accept_partial=True)

    @classmethod
    def preset(cls, name: str) -> SufficiencyThreshold:
        if name == "strict":
            return cls.strict()
        if name == "loose":
            return cls.loose()
        raise ConfigError("threshold", name, "must be 'strict' or 'loose'")

    def describe(self) -> str:
        """The threshold as the prompt states it."""
        partial = "accepted with caveats" if self.accept_partial else "not accepted"
        score = (
            ""
            if self.min_cumulative_score is None
            else f"cumulative relevance score at least {self.min_cumulative_score:g}, "
        )
        return (
            f"at least {self.min_passages} supporting passage(s), {score}at least "
            f"{self.required_support_ratio:.0%} of the answer's claims supported; partial support is {partial}."
        )


def decide(
    verdict: RecoveryVerdict,
    shown: Sequence[ShownChunk],
    threshold: SufficiencyThreshold,
    *,
    can_retrieve: bool = True,
) -> RecoveryDecision:
    """One route: ``deliver``, ``retrieve_more``, ``abstain`` or ``human_review``.

    A partial delivery carries ``caveats`` (see :func:`partial_caveats`); every other
    decision carries none, so caveats are present exactly when they must be shown.
    """
    supported, unsupported = verdict.supported_claims, verdict.unsupported_claims
    claims = len(supported) + len(unsupported)
    ratio = len(supported) / claims if claims else 0.0
    cited = set(verdict.cited_sources)
    backing = [c for c in shown if source_key(c) in cited]
    passages = len(backing)
    score = sum(c.score or 0.0 for c in backing)
    gap = list(unsupported)
    queries = list(verdict.suggested_retrieval_queries or [])

    def out(
        route: Route, reason: str, queries: list[str] = queries, gap: list[str] = gap, caveats: list[str] | None = None
    ) -> RecoveryDecision:
        return RecoveryDecision(
            route=route,
            reason=reason,
            supporting_passages=passages,
            cumulative_score=score,
            support_ratio=ratio,
            queries=queries if route == "retrieve_more" else [],
            gap=gap,
            caveats=caveats or [],
            threshold=threshold.describe(),
        )

    def no_more_retrieval(reason: str, gap: list[str] = gap) -> RecoveryDecision:
        if threshold.high_stakes:
            return out("human_review", reason + "; no retrieval left, high stakes: a person decides", gap=gap)
        return out("abstain", reason + "; no retrieval left", gap=gap)

    if verdict.classification is Classification.SUFFICIENT:
        shortfalls = []
        if passages < threshold.min_passages:
            shortfalls.append(f"{passages} supporting passage(s), threshold {threshold.min_passages}")
        minimum = threshold.min_cumulative_score
        if minimum is not None and score < minimum:
            shortfalls.append(f"cumulative score {score:g}, threshold {minimum:g}")
        if ratio < threshold.required_support_ratio:
            shortfalls.append(f"support ratio {ratio:.2f}, threshold {threshold.required_support_ratio:.2f}")
        if not shortfalls:
            return out("deliver", "SUFFICIENT and the threshold is met")
        reason = "SUFFICIENT but below the threshold: " + "; ".join(shortfalls)
        if can_retrieve:
            return out("retrieve_more", reason, queries=list(supported[:3]), gap=shortfalls)
        return no_more_retrieval(reason, gap=shortfalls)

    if verdict.classification is Classification.PARTIALLY_SUFFICIENT:
        if threshold.high_stakes:
            return out("human_review", "PARTIALLY_SUFFICIENT in high-stakes use goes to human review")
        if threshold.accept_partial and ratio >= threshold.required_support_ratio:
            reason = f"partial support accepted (support ratio {ratio:.2f}): delivered with caveats"
            return out("deliver", reason, caveats=partial_caveats(verdict))
        if can_retrieve:
            return out("retrieve_more", "PARTIALLY_SUFFICIENT: retrieve for the unsupported claims")
        return no_more_retrieval("PARTIALLY_SUFFICIENT")

    if can_retrieve:
        return out("retrieve_more", "INSUFFICIENT: retrieve with the suggested queries")
    return no_more_retrieval("INSUFFICIENT")


#: The caveat added when the checked answer was cut to fit the prompt.
TRUNCATED_CAVEAT = "Only the beginning of the answer was checked: it was cut to fit the model's context."


def partial_caveats(verdict: RecoveryVerdict) -> list[str]:
    """What a partially supported answer must be delivered with, in the seed's terms:
    each unsupported claim, then what was missing (the abstention notice), and a
    note when part of the answer was never checked."""
    caveats = list(verdict.unsupported_claims)
    if verdict.abstention_notice:
        caveats.append(verdict.abstention_notice)
    if verdict.response_truncated:
        caveats.append(TRUNCATED_CAVEAT)
    return caveats
