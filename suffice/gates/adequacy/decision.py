"""The adequacy decision, computed in code from dimension and criterion scores and a rubric.

The seed: "Do not rely on the model's internal pass boolean alone; compute the
composite score from dimension values in your application code and apply the
threshold there."  PASS needs the weighted composite at or above the threshold, no
critical dimension under its floor, and every rubric criterion met ("A PASS decision
requires all rubric criteria to be met at an acceptable threshold. Partial coverage
that fails any critical criterion must result in FAIL").  The risk level makes it
more conservative ("for HIGH risk use cases, err toward FAIL when evidence is
ambiguous or incomplete"): a margin on the threshold, and for HIGH a FAIL whenever
the model itself says FAIL or reports missing information.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean
from typing import Literal

from suffice.exceptions import ConfigError
from suffice.gates.adequacy.grammar import AdequacyDecision, AdequacyOutput, JudgedCriterion
from suffice.gates.adequacy.store import Rubric
from suffice.grammars.routes import Route

#: Added to the rubric's pass threshold (capped at 1) by risk level.
RISK_MARGIN = {"HIGH": 0.10, "MEDIUM": 0.05, "LOW": 0.0}

_FAIL_ROUTES: dict[str, Route] = {
    "RETRIEVE_MORE": "retrieve_more",
    "ESCALATE_TO_HUMAN": "human_review",
    "FLAG_AS_UNANSWERABLE": "abstain",
    # The model recommends proceeding but the computed decision is FAIL.
    "PROCEED_WITH_ANSWER": "retrieve_more",
}


#: The model's recommendations that a computed PASS does not deliver on its own, and the rule that sends them on.
_PERSON_RULES = {"ESCALATE_TO_HUMAN": "model_escalated", "FLAG_AS_UNANSWERABLE": "model_flagged_unanswerable"}


def composite_score(scores: Mapping[str, float], rubric: Rubric) -> float:
    """Weighted mean of the dimension scores with the rubric's weights.

    Rounded to 6 decimals, as the threshold is, so that a composite exactly on the
    threshold passes whatever the float arithmetic did on the way.
    """
    total = sum(rubric.weight(d) for d in scores)
    return round(sum(rubric.weight(d) * s for d, s in scores.items()) / total, 6)


def judge_criteria(output: AdequacyOutput, rubric: Rubric) -> list[JudgedCriterion]:
    """The output's criteria beside the rubric's, each met when its score reaches the criterion's minimum.

    Met is computed from the score, not asked of the model as a boolean of its own: the seed's "apply the
    threshold there [in code] for consistent, auditable decisions" holds for criteria as for the composite; a
    boolean beside a score could contradict it (a small model's often do), and the minimum is the rubric's to set
    and to tune, not the model's.  Raises :class:`ValueError` unless the output scores exactly the rubric's
    criteria in order (the constraint writes them so; the gate refuses any other output when it parses it).
    """
    scored = list(output.criteria)
    numbers = [c.criterion for c in scored]
    if numbers != list(range(1, len(rubric.criteria) + 1)):
        raise ValueError(f"the rubric has {len(rubric.criteria)} criteria; the output scores {numbers}")
    return [
        JudgedCriterion(
            criterion=c.criterion,
            score=c.score,
            assessment=c.assessment,
            text=criterion.text,
            critical=criterion.critical,
            minimum=criterion.minimum,
            met=round(c.score, 6) >= round(criterion.minimum, 6),
        )
        for c, criterion in zip(scored, rubric.criteria, strict=True)
    ]


def _named(criterion: JudgedCriterion) -> str:
    """A criterion as a reason names it: its number, score against its minimum, and its text's beginning."""
    text = criterion.text if len(criterion.text) <= 60 else criterion.text[:59].rstrip() + "…"
    kind = "critical criterion" if criterion.critical else "criterion"
    return f"{kind} {criterion.criterion} not met ({criterion.score:.2f} < {criterion.minimum:.2f}: {text})"


def check_threshold(threshold: float | None) -> None:
    """Raise :class:`ConfigError` naming ``threshold`` unless it is ``None`` or in [0, 1]."""
    if threshold is None:
        return
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ConfigError("threshold", threshold, "must be a number in [0, 1] (the composite's scale)")


def effective_threshold(rubric: Rubric, threshold: float | None = None) -> float:
    """The composite threshold PASS needs: ``threshold`` (an override) or the rubric's pass threshold plus its risk
    margin (capped at 1), or the rubric's calibrated threshold as it is, but for a HIGH-risk rubric never under the
    uncalibrated one: calibration keeps the margin's direction there ("for high-stakes domains ... bias toward false
    negatives").  The prompt states this one, the decision applies it."""
    check_threshold(threshold)
    base = rubric.pass_threshold if threshold is None else threshold
    uncalibrated = round(min(1.0, base + RISK_MARGIN[rubric.risk_level]), 6)
    if threshold is None and rubric.calibrated_threshold is not None:
        calibrated = round(rubric.calibrated_threshold, 6)
        return max(calibrated, uncalibrated) if rubric.risk_level == "HIGH" else calibrated
    return uncalibrated


def decide(
    output: AdequacyOutput,
    rubric: Rubric,
    *,
    threshold: float | None = None,
    can_retrieve: bool = True,
    question_truncated: bool = False,
) -> AdequacyDecision:
    """``threshold`` overrides the rubric's (e.g. one chosen by calibration); it must be in [0, 1].
    ``can_retrieve=False``: no retrieval is left, so a FAIL that more retrieval would have fixed goes to a person
    (the seed's escalation after the round limit).  The model's ESCALATE_TO_HUMAN or FLAG_AS_UNANSWERABLE is never
    delivered, whatever the composite: it goes to a person, unless the rubric sets ``trust_computed_pass``."""
    effective = effective_threshold(rubric, threshold)
    scores = output.scores()
    composite = composite_score(scores, rubric)
    criteria = judge_criteria(output, rubric)
    failed_criteria = [c for c in criteria if c.critical and not c.met]
    unmet_criteria = [c for c in criteria if not c.critical and not c.met]
    failed = {d: scores.get(d, 0.0) for d, floor in rubric.critical.items() if scores.get(d, 0.0) < floor}
    unmet = {
        d: scores.get(d, 0.0)
        for d in rubric.dimension_names
        if d not in failed and scores.get(d, 0.0) < rubric.minimum(d)
    }
    vetoes = []
    if rubric.risk_level == "HIGH":
        if output.adequacy_decision == "FAIL":
            vetoes.append("HIGH risk: the model itself judged the context inadequate")
        if output.missing_information:
            vetoes.append("HIGH risk: the model reports missing information")
    criteria_met = not failed_criteria and not unmet_criteria
    passed = composite >= effective and not failed and not unmet and criteria_met and not vetoes
    decision: Literal["PASS", "FAIL"] = "PASS" if passed else "FAIL"
    rule: str | None = None
    overrode: str | None = None
    recommendation = output.recommendation
    if passed:
        route: Route = "deliver"
        reason = (
            f"composite {composite:g} >= threshold {effective:g}, no critical dimension under its floor, "
            f"every dimension at its minimum, all {len(criteria)} criteria met"
        )
        if recommendation in _PERSON_RULES:
            if rubric.trust_computed_pass:
                overrode = recommendation
                reason += f"; the rubric trusts the computed PASS over the model's {recommendation}"
            else:
                route, rule = "human_review", _PERSON_RULES[recommendation]
                reason += f"; but the model recommended {recommendation}: a person decides"
        if route == "deliver" and question_truncated:
            # Checked means checked: the rubric was applied to the question's beginning only.
            route, rule = "human_review", "question_not_fully_checked"
            reason += "; but the question was cut to fit max_question_tokens: a person decides"
    else:
        reasons = []
        if composite < effective:
            reasons.append(f"composite {composite:g} < threshold {effective:g}")
        # A critical criterion first: it is the reason a person reading the route needs before any other.
        reasons += [_named(c) for c in failed_criteria]
        reasons += [f"{d} {s:.2f} < floor {rubric.critical[d]:.2f}" for d, s in failed.items()]
        reasons += [f"{d} {s:.2f} < minimum {rubric.minimum(d):.2f}" for d, s in unmet.items()]
        reasons += [_named(c) for c in unmet_criteria]
        reasons += vetoes
        route = _FAIL_ROUTES[recommendation]
        if route == "human_review":
            rule = "model_escalated"
        elif route == "abstain" and rubric.risk_level == "HIGH":
            # The seed: a human review gate when the system abstains on high-stakes queries.
            route, rule = "human_review", "model_flagged_unanswerable"
        elif route == "retrieve_more" and not can_retrieve:
            route, rule = "human_review", "adequacy_rounds_exhausted"
            reasons.append("no retrieval left")
        reason = "; ".join(reasons)
    return AdequacyDecision(
        decision=decision,
        composite_score=composite,
        threshold=effective,
        failed_critical=failed,
        below_minimum=unmet,
        conservative_vetoes=vetoes,
        route=route,
        reason=reason,
        agrees_with_model=decision == output.adequacy_decision,
        rule=rule,
        overrode_recommendation=overrode,
        failed_critical_criteria=[c.criterion for c in failed_criteria],
        unmet_criteria=[c.criterion for c in unmet_criteria],
        criteria_score=round(fmean(c.score for c in criteria), 6),
    )
