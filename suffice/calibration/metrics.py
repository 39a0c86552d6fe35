"""Threshold metrics for a score against binary labels (pure Python, no numpy needed).

Convention: an item is predicted positive ("sufficient") when ``score >= threshold``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ThresholdPoint:
    threshold: float
    precision: float
    recall: float
    f1: float
    accuracy: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(scores: Sequence[float], labels: Sequence[bool]) -> None:
    """Raise ValueError for what would make a metric silently wrong: a NaN score (it
    compares unequal to itself, so the AUC's tie loop never ends), a label that is
    not a bool (``"false"`` would count as positive)."""
    if len(scores) != len(labels):
        raise ValueError(f"scores and labels differ in length: {len(scores)} vs {len(labels)}")
    if not scores:
        raise ValueError("no scored items")
    bad = next((i for i, s in enumerate(scores) if not math.isfinite(s)), None)
    if bad is not None:
        raise ValueError(f"score {bad} is {scores[bad]!r}: every score must be a finite number")
    wrong = next((i for i, y in enumerate(labels) if not isinstance(y, bool)), None)
    if wrong is not None:
        raise ValueError(f"label {wrong} is {labels[wrong]!r}: every label must be true or false")


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half)."""
    _check(scores, labels)
    ranked = sorted(zip(scores, labels, strict=True), key=lambda p: p[0])
    positives = sum(labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return None
    rank_sum = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        average_rank = (i + 1 + j) / 2  # ranks are 1-based; ties share the mean rank
        rank_sum += average_rank * sum(1 for k in range(i, j) if ranked[k][1])
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def point(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> ThresholdPoint:
    _check(scores, labels)
    tp = sum(1 for s, y in zip(scores, labels, strict=True) if s >= threshold and y)
    fp = sum(1 for s, y in zip(scores, labels, strict=True) if s >= threshold and not y)
    fn = sum(1 for s, y in zip(scores, labels, strict=True) if s < threshold and y)
    tn = len(labels) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return ThresholdPoint(threshold, precision, recall, f1, (tp + tn) / len(labels))


def curve(scores: Sequence[float], labels: Sequence[bool]) -> list[ThresholdPoint]:
    """One point per distinct score, highest threshold first (recall rising)."""
    return [point(scores, labels, t) for t in sorted(set(scores), reverse=True)]


def best_f1(scores: Sequence[float], labels: Sequence[bool]) -> ThresholdPoint:
    """The F1-maximising threshold; ties go to the higher threshold (fewer false positives)."""
    best = None
    for p in curve(scores, labels):
        if best is None or p.f1 > best.f1:
            best = p
    assert best is not None
    return best


def threshold_for_precision(scores: Sequence[float], labels: Sequence[bool], target: float) -> ThresholdPoint | None:
    """The lowest threshold (most recall) whose precision reaches ``target``; None if none does."""
    reaching = [p for p in curve(scores, labels) if p.precision >= target and p.recall > 0]
    return min(reaching, key=lambda p: p.threshold) if reaching else None


def reliability(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> list[dict[str, float]]:
    """Per score bin: mean score, share positive, count (for a reliability diagram)."""
    _check(scores, labels)
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [(s, y) for s, y in zip(scores, labels, strict=True) if lo <= s < hi or (b == bins - 1 and s == 1.0)]
        if members:
            out.append(
                {
                    "lo": lo,
                    "hi": hi,
                    "mean_score": sum(s for s, _ in members) / len(members),
                    "share_positive": sum(1 for _, y in members if y) / len(members),
                    "count": float(len(members)),
                }
            )
    return out


def expected_calibration_error(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    table = reliability(scores, labels, bins)
    n = len(scores)
    return sum(row["count"] / n * abs(row["mean_score"] - row["share_positive"]) for row in table)


def set_agreement(predicted: Sequence[Sequence[object]], gold: Sequence[Sequence[object]]) -> dict[str, float | None]:
    """Micro-averaged precision and recall of predicted id sets against gold id sets."""
    tp = sum(len(set(p) & set(g)) for p, g in zip(predicted, gold, strict=True))
    n_pred = sum(len(set(p)) for p in predicted)
    n_gold = sum(len(set(g)) for g in gold)
    return {
        "precision": tp / n_pred if n_pred else None,
        "recall": tp / n_gold if n_gold else None,
        "items": float(len(gold)),
    }
