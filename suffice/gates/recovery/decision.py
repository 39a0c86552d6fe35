"""From a recovery verdict and a :class:`SufficiencyThreshold` to one routing decision.

The seeds ask for the routing to be deterministic and computed from the
structured output, never from free text: the same verdict, evidence and
threshold always give the same decision.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from suffice.exceptions import ConfigError
from suffice.gates.recovery.grammar import Classification, RecoveryBounds, RecoveryDecision, RecoveryVerdict
from suffice.grammars.routes import Route
from suffice.prompts.fitting import ShownChunk, source_key


@dataclass(frozen=True)
class SufficiencyThreshold:
    """When evidence is enough to deliver an answer.

    ``min_cumulative_score`` is in the retriever's own units (chunks without a score count 0), any finite number,
    since a cross-encoder's logits are negative; ``None`` (the default) asks for none.  ``min_passage_score`` is a
    floor for each passage in the same units: a cited passage below it does not count toward ``min_passages``
    (``None``: every cited passage counts).

    ``accept_partial`` delivers a PARTIALLY_SUFFICIENT verdict whose support ratio meets ``required_support_ratio``:
    the checked answer goes out with caveats naming what the evidence does not support (the seed: "a looser
    threshold allows partial answers with caveats").  ``high_stakes`` sends PARTIALLY_SUFFICIENT verdicts to human
    review instead of deciding automatically.  When no retrieval can help (``can_retrieve=False``), any other
    shortfall abstains with the gap and the queries (what the seed says to show the user), and under
    ``high_stakes`` that abstention goes to a person with them (the seed: "a human review gate when the system
    abstains on high-stakes queries").
    """

    min_passages: int = 1
    min_cumulative_score: float | None = None
    required_support_ratio: float = 1.0
    accept_partial: bool = False
    high_stakes: bool = False
    min_passage_score: float | None = None
    #: What ``min_passages`` counts: distinct ``sources`` (the seed's supporting passages: one document cut into
    #: two chunks is one) or ``chunks``.
    count: Literal["sources", "chunks"] = "sources"
    #: Passages per claim: a segment labelled ``supported`` counts as supported (toward ``required_support_ratio``)
    #: only when it cites at least this many distinct sources (1: every supported segment does, by construction).
    min_sources_per_claim: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.min_passages, bool) or not isinstance(self.min_passages, int) or self.min_passages < 0:
            raise ConfigError("min_passages", self.min_passages, "must be a whole number >= 0")
        per_claim = self.min_sources_per_claim
        if isinstance(per_claim, bool) or not isinstance(per_claim, int) or not 1 <= per_claim <= 8:
            raise ConfigError("min_sources_per_claim", per_claim, "must be a whole number from 1 to 8")
        for name in ("min_cumulative_score", "min_passage_score"):
            score = getattr(self, name)
            if score is not None and (
                isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score)
            ):
                raise ConfigError(name, score, "must be a finite number (or None: no minimum)")
        ratio = self.required_support_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
            raise ConfigError("required_support_ratio", ratio, "must be a number in [0, 1]")
        for name in ("accept_partial", "high_stakes"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be true or false")
        if self.count not in ("sources", "chunks"):
            raise ConfigError("count", self.count, "must be 'sources' or 'chunks' (what min_passages counts)")

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
        if name not in ("strict", "loose"):
            raise ConfigError("threshold", name, "must be 'strict' or 'loose'")
        return cls.strict() if name == "strict" else cls.loose()

    @classmethod
    def from_spec(cls, spec: str | Mapping[str, Any] | SufficiencyThreshold) -> SufficiencyThreshold:
        """A threshold from a preset name (``strict``, ``loose``), explicit values as ``key=value,...`` text
        (what ``--threshold`` takes) or a mapping (the HTTP request, Python); keys left out come from
        ``strict``.  A :class:`ConfigError` names the key at fault."""
        if isinstance(spec, SufficiencyThreshold):
            return spec
        if isinstance(spec, str):
            if "=" not in spec:
                return cls.preset(spec.strip())
            values: dict[str, Any] = {}
            for pair in spec.split(","):
                key, sep, value = pair.partition("=")
                key = key.strip()
                if not sep or not key:
                    raise ConfigError("threshold", spec, f"{pair.strip()!r} is not KEY=VALUE")
                if key in values:
                    raise ConfigError(key, value.strip(), "is given twice")
                values[key] = value.strip()
            return cls.from_values(values, text=True)
        if isinstance(spec, Mapping):
            return cls.from_values(spec)
        raise ConfigError("threshold", spec, "must be 'strict', 'loose', KEY=VALUE,... or a mapping of keys")

    @classmethod
    def from_values(cls, values: Mapping[str, Any], *, text: bool = False) -> SufficiencyThreshold:
        """``strict`` with ``values`` in place of its own (from text when ``text``)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in values:
            if key not in fields:
                raise ConfigError(str(key), values[key], f"is not a threshold key (keys: {', '.join(fields)})")
        converted = {key: _convert(key, value) if text else value for key, value in values.items()}
        return dataclasses.replace(cls.strict(), **converted)

    def describe(self) -> str:
        """The threshold as the prompt states it."""
        partial = "accepted with caveats" if self.accept_partial else "not accepted"
        score = (
            ""
            if self.min_cumulative_score is None
            else f"cumulative relevance score at least {self.min_cumulative_score:g}, "
        )
        floor = "" if self.min_passage_score is None else f" each scoring at least {self.min_passage_score:g}"
        counted = " (distinct sources)" if self.count == "sources" else " (chunks)"
        per_claim = (
            "" if self.min_sources_per_claim == 1 else f" (each by at least {self.min_sources_per_claim} sources)"
        )
        return (
            f"at least {self.min_passages} supporting passage(s){counted}{floor}, {score}at least "
            f"{self.required_support_ratio:.0%} of the answer's claims supported{per_claim}; "
            f"partial support is {partial}."
        )


def decide(
    verdict: RecoveryVerdict, shown: Sequence[ShownChunk], threshold: SufficiencyThreshold, *, can_retrieve: bool = True
) -> RecoveryDecision:
    """One route: ``deliver``, ``retrieve_more``, ``abstain`` or ``human_review``.

    A partial delivery carries ``caveats`` (see :func:`partial_caveats`); every other
    decision carries none, so caveats are present exactly when they must be shown.
    """
    supported, unsupported = verdict.supported_claims, verdict.unsupported_claims
    claims = len(supported) + len(unsupported)
    # Passages per claim: a supported segment backed by fewer distinct sources than the threshold asks is not
    # counted as supported (the verdict keeps its label).
    per_claim = threshold.min_sources_per_claim
    thin = sum(1 for s in verdict.segments if s.label == "supported" and len(set(s.sources)) < per_claim)
    thin = thin if per_claim > 1 else 0  # 1: every supported segment names a source, by construction
    ratio = (len(supported) - thin) / claims if claims else 0.0
    # Sources of the segments that name them (``partial`` too: its passages are read).
    cited = set(verdict.cited_sources)
    backing = [c for c in shown if source_key(c) in cited]
    floor = threshold.min_passage_score
    counted = [c for c in backing if floor is None or (c.score or 0.0) >= floor]
    # The seed's supporting passages are sources: two chunks of one document support as one.
    passages = len({source_key(c) for c in counted}) if threshold.count == "sources" else len(counted)
    score = sum(c.score or 0.0 for c in backing)
    gap = list(unsupported)
    queries = list(verdict.suggested_retrieval_queries or [])

    def out(
        route: Route,
        reason: str,
        queries: list[str] = queries,
        gap: list[str] = gap,
        caveats: list[str] | None = None,
        rule: str | None = None,
    ) -> RecoveryDecision:
        if route == "deliver" and verdict.question_truncated:
            # The model judged the question's beginning only: the route the verdict records is a person's too.
            route, gap, caveats, rule = "human_review", [QUESTION_CUT_GAP], None, QUESTION_NOT_FULLY_CHECKED
            reason = f"the question was cut to fit max_question_tokens; on its beginning, {reason}: a person decides"
        return RecoveryDecision(
            route=route,
            reason=reason,
            supporting_passages=passages,
            cumulative_score=score,
            support_ratio=ratio,
            queries=queries if route in ("retrieve_more", "abstain") or rule == "abstained_high_stakes" else [],
            gap=gap,
            caveats=caveats or [],
            threshold=threshold.describe(),
            rule=rule,
        )

    def shortfall(retrieve: str, reason: str, gap: list[str] = gap, queries: list[str] = queries) -> RecoveryDecision:
        """``retrieve_more`` for the reason ``retrieve`` where retrieval is left.  Else the seed's ABSTAIN: the user
        sees the gap and the queries that could fill it; under high stakes a person sees them first."""
        if can_retrieve:
            return out("retrieve_more", retrieve, queries=queries, gap=gap)
        reason += "; no retrieval left"
        if threshold.high_stakes:
            return out("human_review", reason + ": high stakes", gap=gap, queries=queries, rule="abstained_high_stakes")
        return out("abstain", reason, gap=gap, queries=queries)

    if verdict.classification is Classification.SUFFICIENT:
        shortfalls = []
        if passages < threshold.min_passages:
            floored = "" if floor is None else f" scoring at least {floor:g}"
            shortfalls.append(f"{passages} supporting passage(s){floored}, threshold {threshold.min_passages}")
        minimum = threshold.min_cumulative_score
        if minimum is not None and score < minimum:
            shortfalls.append(f"cumulative score {score:g}, threshold {minimum:g}")
        if ratio < threshold.required_support_ratio:
            shortfalls.append(f"support ratio {ratio:.2f}, threshold {threshold.required_support_ratio:.2f}")
        if not shortfalls:
            return out("deliver", "SUFFICIENT and the threshold is met")
        reason = "SUFFICIENT but below the threshold: " + "; ".join(shortfalls)
        return shortfall(reason, reason, gap=shortfalls, queries=more_of(supported))

    if verdict.classification is Classification.PARTIALLY_SUFFICIENT:
        if threshold.high_stakes:
            return out(
                "human_review",
                "PARTIALLY_SUFFICIENT in high-stakes use goes to human review",
                rule="partial_under_high_stakes",
            )
        if threshold.accept_partial and ratio >= threshold.required_support_ratio:
            reason = f"partial support accepted (support ratio {ratio:.2f}): delivered with caveats"
            return out("deliver", reason, caveats=partial_caveats(verdict))
        return shortfall("PARTIALLY_SUFFICIENT: retrieve for the unsupported claims", "PARTIALLY_SUFFICIENT")

    return shortfall("INSUFFICIENT: retrieve with the suggested queries", "INSUFFICIENT")


#: The rule that sends a verdict on a question cut to fit to a person instead of delivering it, and what was not
#: checked.
QUESTION_NOT_FULLY_CHECKED = "question_not_fully_checked"
QUESTION_CUT_GAP = "the end of the question was cut to fit max_question_tokens and never checked"


def more_of(supported: Sequence[str]) -> list[str]:
    """Queries for more evidence of what is supported too thinly: the first supported claims, cut to a query's
    length."""
    return [claim[: RecoveryBounds.QUERY_CHARS] for claim in supported[: RecoveryBounds.QUERIES_MAX]]


def partial_caveats(verdict: RecoveryVerdict) -> list[str]:
    """What a partially supported answer must be delivered with, in the seed's terms:
    each unsupported claim, then what was missing (the abstention notice)."""
    caveats = list(verdict.unsupported_claims)
    if verdict.abstention_notice:
        caveats.append(verdict.abstention_notice)
    return caveats


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _convert(key: str, text: Any) -> Any:
    """A threshold value given as text (``--threshold key=value``), converted for ``key``."""
    value = str(text).strip()
    if key in ("min_passages", "min_sources_per_claim"):
        try:
            return int(value)
        except ValueError:
            raise ConfigError(key, value, "must be a whole number") from None
    if key in ("accept_partial", "high_stakes"):
        if value.lower() not in _BOOLS:
            raise ConfigError(key, value, "must be true or false")
        return _BOOLS[value.lower()]
    if key == "count":
        return value
    if key in ("min_cumulative_score", "min_passage_score") and value.lower() in ("none", ""):
        return None
    try:
        return float(value)
    except ValueError:
        raise ConfigError(key, value, "must be a number") from None
