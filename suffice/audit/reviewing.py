"""What a review's values mean: labels, the machine's label, how many reviewers must agree, and when they do.

A reviewer decides ``answer``, ``refine_retrieval`` or ``unanswerable`` and may correct the label: whether the
context was *sufficient*.  Without a correction the decision implies it (``answer``: sufficient; the other two:
not).  A review closes when as many distinct reviewers as it requires chose the same decision and label; until
then it stays open, and decisions that differ leave it *disputed*.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from suffice.gates import gate_class
from suffice.gates.roles import decision_of

REVIEW_DECISIONS = ("answer", "refine_retrieval", "unanswerable")
Label = Literal["sufficient", "insufficient"]
LABELS: tuple[Label, ...] = ("sufficient", "insufficient")
#: Reviewers a HIGH-risk review needs unless its enqueuer says otherwise: the seed's high stakes, two people.
HIGH_RISK_REVIEWERS = 2
#: The most reviewers a review may require.
MAX_REVIEWERS = 5


def label_text(sufficient: bool | None) -> Label | None:
    return None if sufficient is None else ("sufficient" if sufficient else "insufficient")


def implied_label(decision: str) -> Label:
    """The label a decision implies when the reviewer gives none: only ``answer`` says the context sufficed."""
    return "sufficient" if decision == "answer" else "insufficient"


def machine_label(gate: str | None, payload: Mapping[str, Any]) -> Label | None:
    """The machine's answer to "was the context sufficient?" from the verdict in ``payload``: the decision that
    routes (adequacy's computed PASS, not the model's opinion), else the gate's decision field.  ``None``
    without a verdict (two failed generations) or for a verdict of a shape not known."""
    verdict = payload.get("verdict")
    if not isinstance(verdict, Mapping):
        return None
    computed = verdict.get("decision")
    if isinstance(computed, Mapping) and computed.get("decision") in ("PASS", "FAIL"):
        return label_text(computed["decision"] == "PASS")
    if isinstance(verdict.get("is_sufficient"), bool):
        return label_text(verdict["is_sufficient"] and verdict.get("forced_by") is None)
    try:
        cls = gate_class(str(gate))
    except Exception:  # a gate not installed here: its verdicts still show, unlabeled
        return None
    token = decision_of(cls)
    if token is not None and token.key in verdict:
        return label_text(json.dumps(verdict[token.key]) == token.positive)
    return None


def _high_risk(payload: Mapping[str, Any]) -> bool:
    verdict = payload.get("verdict")
    settings = payload.get("settings")
    for place in (payload, verdict, settings):
        if isinstance(place, Mapping):
            if str(place.get("risk_level", "")).upper() == "HIGH":
                return True
            if place.get("high_stakes") in (True, "true", "True"):
                return True
    return False


def reviewers_for(payload: Mapping[str, Any]) -> int:
    """How many independent reviewers a review of ``payload`` needs: a ``reviewers`` number the payload or its
    ``settings`` give (a rubric's or a run's setting), else :data:`HIGH_RISK_REVIEWERS` for HIGH risk (an
    adequacy rubric at HIGH, a high-stakes recovery threshold), else one."""
    for place in (payload, payload.get("settings")):
        if isinstance(place, Mapping) and place.get("reviewers") is not None:
            try:
                return min(MAX_REVIEWERS, max(1, int(place["reviewers"])))
            except (TypeError, ValueError):
                break
    return HIGH_RISK_REVIEWERS if _high_risk(payload) else 1


def agreed(decisions: Sequence[Mapping[str, Any]], required: int) -> list[Mapping[str, Any]] | None:
    """The decisions of the first ``required`` reviewers who chose the same decision and label, or ``None``."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for entry in decisions:
        group = groups.setdefault((str(entry.get("decision")), str(entry.get("label"))), [])
        group.append(entry)
        if len(group) >= required:
            return group
    return None


def state_of(review: Mapping[str, Any]) -> str:
    """``resolved``; ``open`` (no decision yet); ``awaiting`` (fewer decisions than reviewers required);
    ``disputed`` (enough decisions, no agreement)."""
    if review.get("status") == "resolved":
        return "resolved"
    decisions = decisions_of(review)
    if not decisions:
        return "open"
    return "awaiting" if len(decisions) < int(review.get("reviewers") or 1) else "disputed"


def decisions_of(review: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The review's decisions so far (its ``decisions`` column parsed; ``[]`` if it does not parse)."""
    value = review.get("decisions")
    if isinstance(value, list):
        return value
    try:
        parsed = json.loads(value or "[]")
    except (TypeError, ValueError):
        return []
    return parsed if isinstance(parsed, list) else []
