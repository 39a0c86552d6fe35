"""Threshold metrics for a score against binary labels (pure Python, no numpy needed).

Every threshold is found in one sweep: the scores sorted once, counts cumulative
(:class:`Sweep`), so a million labeled scores take seconds, not hours.

Convention: an item is predicted positive ("sufficient") when ``score >= threshold``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any


@dataclass(frozen=True)
class ThresholdPoint:
    threshold: float
    precision: float
    recall: float
    f1: float
    accuracy: float

    def as_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it copies field by field, slow over a million points.
        return dict(vars(self))


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


class Sweep:
    """Every threshold of a score at once: the scores sorted once, true and false
    positives counted cumulatively from the highest score down (O(n log n)).

    ``points`` has one :class:`ThresholdPoint` per distinct score, highest threshold
    first (recall rising), each equal to :func:`point` at that threshold; ``tp`` and
    ``fp`` are the counts behind them (items with ``score >= threshold``)."""

    def __init__(self, scores: Sequence[float], labels: Sequence[bool]) -> None:
        _check(scores, labels)
        n = len(scores)
        self.n = n
        self.positives = sum(labels)
        self.negatives = n - self.positives
        ranked = sorted(zip(scores, labels, strict=True), key=itemgetter(0), reverse=True)
        self.thresholds: list[float] = []
        self.tp: list[int] = []
        self.fp: list[int] = []
        tp = fp = 0
        for value, group in groupby(ranked, key=itemgetter(0)):
            positive = [y for _, y in group]
            tp += sum(positive)
            fp += len(positive) - sum(positive)
            self.thresholds.append(value)
            self.tp.append(tp)
            self.fp.append(fp)
        self.points = [
            _point(t, a, b, self.positives, n) for t, a, b in zip(self.thresholds, self.tp, self.fp, strict=True)
        ]

    def auc(self) -> float | None:
        """:func:`roc_auc` from the counts: the mean rank of each tie group, lowest first."""
        if self.positives == 0 or self.negatives == 0:
            return None
        rank_sum = 0.0
        groups = zip(self.tp, self.fp, [0, *self.tp], [0, *self.fp], strict=False)
        for tp, fp, tp_above, fp_above in reversed(list(groups)):
            below = self.n - tp - fp  # items under this group
            pos = tp - tp_above
            # Ranks are 1-based; ties share the mean rank.
            rank_sum += (below + 1 + below + pos + fp - fp_above) / 2 * pos
        p = self.positives
        return (rank_sum - p * (p + 1) / 2) / (p * self.negatives)

    def best_f1(self) -> ThresholdPoint:
        """See :func:`best_f1`."""
        return max(self.points, key=lambda p: p.f1)  # the first of equals: the higher threshold

    def best_fbeta(self, beta: float) -> ThresholdPoint:
        """The threshold maximising F-beta (beta < 1 weighs precision more: fewer false
        positives, more false negatives); ties go to the higher threshold."""
        if not (math.isfinite(beta) and beta > 0):
            raise ValueError(f"beta must be a positive number, got {beta!r}")
        b2 = beta * beta

        def score(p: ThresholdPoint) -> float:
            denominator = b2 * p.precision + p.recall
            return (1 + b2) * p.precision * p.recall / denominator if denominator else 0.0

        return max(self.points, key=score)

    def min_cost(self, fp_cost: float, fn_cost: float) -> tuple[ThresholdPoint, float]:
        """The threshold with the least expected cost per item, ``(fp_cost * FP +
        fn_cost * FN) / n``, and that cost; ties go to the higher threshold."""
        for name, cost in (("fp_cost", fp_cost), ("fn_cost", fn_cost)):
            if not (math.isfinite(cost) and cost >= 0):
                raise ValueError(f"{name} must be a number of 0 or more, got {cost!r}")
        costs = [
            (fp_cost * fp + fn_cost * (self.positives - tp)) / self.n for tp, fp in zip(self.tp, self.fp, strict=True)
        ]
        return min(zip(self.points, costs, strict=True), key=itemgetter(1))

    def for_precision(self, target: float) -> ThresholdPoint | None:
        """See :func:`threshold_for_precision`."""
        reaching = [p for p in self.points if p.precision >= target and p.recall > 0]
        return min(reaching, key=lambda p: p.threshold) if reaching else None


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half)."""
    return Sweep(scores, labels).auc()


def point(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> ThresholdPoint:
    _check(scores, labels)
    tp = sum(1 for s, y in zip(scores, labels, strict=True) if s >= threshold and y)
    fp = sum(1 for s, y in zip(scores, labels, strict=True) if s >= threshold and not y)
    return _point(threshold, tp, fp, sum(labels), len(labels))


def _point(threshold: float, tp: int, fp: int, positives: int, n: int) -> ThresholdPoint:
    """The point of ``tp`` true and ``fp`` false positives among ``n`` items, ``positives`` of them positive."""
    fn = positives - tp
    tn = n - positives - fp
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return ThresholdPoint(threshold, precision, recall, f1, (tp + tn) / n)


def curve(scores: Sequence[float], labels: Sequence[bool]) -> list[ThresholdPoint]:
    """One point per distinct score, highest threshold first (recall rising)."""
    return Sweep(scores, labels).points


def best_f1(scores: Sequence[float], labels: Sequence[bool]) -> ThresholdPoint:
    """The F1-maximising threshold; ties go to the higher threshold (fewer false positives)."""
    return Sweep(scores, labels).best_f1()


def threshold_for_precision(scores: Sequence[float], labels: Sequence[bool], target: float) -> ThresholdPoint | None:
    """The lowest threshold (most recall) whose precision reaches ``target``; None if none does."""
    return Sweep(scores, labels).for_precision(target)


def _bin_of(score: float, bins: int) -> int | None:
    """The bin ``lo <= score < hi`` (``lo = b / bins``; 1.0 in the last), None outside [0, 1]."""
    if not 0.0 <= score <= 1.0:
        return None
    guess = min(int(score * bins), bins - 1)
    for b in (guess, guess - 1, guess + 1):
        if 0 <= b < bins and (b / bins <= score < (b + 1) / bins or (b == bins - 1 and score == 1.0)):
            return b
    return None


def reliability(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> list[dict[str, float]]:
    """Per score bin: mean score, share positive, count (for a reliability diagram)."""
    _check(scores, labels)
    members: list[list[float]] = [[] for _ in range(bins)]
    positives = [0] * bins
    for s, y in zip(scores, labels, strict=True):
        b = _bin_of(s, bins)
        if b is not None:
            members[b].append(s)
            positives[b] += y
    return [
        {
            "lo": b / bins,
            "hi": (b + 1) / bins,
            "mean_score": sum(members[b]) / len(members[b]),
            "share_positive": positives[b] / len(members[b]),
            "count": float(len(members[b])),
        }
        for b in range(bins)
        if members[b]
    ]


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


#: Segment labels that flag a claim as not (fully) supported.
FLAGGED_LABELS = frozenset({"partial", "unsupported"})


def segment_agreement(pairs: Sequence[tuple[str, str]]) -> dict[str, float | None]:
    """How a verdict's segment labels agree with labeled ones (``(predicted, gold)`` per segment): the share with
    the same label, and the precision, recall and F1 of flagging a segment as not supported (``partial`` or
    ``unsupported``), the errors a gate that delivers must not miss."""
    flagged = [(p in FLAGGED_LABELS, g in FLAGGED_LABELS) for p, g in pairs]
    tp = sum(1 for p, g in flagged if p and g)
    n_pred = sum(1 for p, _ in flagged if p)
    n_gold = sum(1 for _, g in flagged if g)
    precision = tp / n_pred if n_pred else None
    recall = tp / n_gold if n_gold else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else None
    return {
        "segments": float(len(pairs)),
        "label_agreement": sum(1 for p, g in pairs if p == g) / len(pairs) if pairs else None,
        "unsupported_precision": precision,
        "unsupported_recall": recall,
        "unsupported_f1": f1,
    }
