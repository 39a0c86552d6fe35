"""The metrics against scikit-learn's on random data, ties included (seeded numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from suffice.calibration.metrics import Sweep, curve, reliability, roc_auc

sklearn_metrics = pytest.importorskip("sklearn.metrics")
sklearn_calibration = pytest.importorskip("sklearn.calibration")


def _data(seed: int, n: int, tied: bool) -> tuple[list[float], list[bool]]:
    rng = np.random.default_rng(seed)
    labels = rng.random(n) < rng.uniform(0.2, 0.8)
    labels[0], labels[1] = True, False  # both classes, always
    scores = np.clip(rng.normal(np.where(labels, 0.6, 0.4), 0.2), 0.0, 1.0)
    if tied:
        # k/37: many ties, none on a bin edge (sklearn's edges are linspace's, not b/10)
        scores = np.round(scores * 37) / 37
    return [float(s) for s in scores], [bool(y) for y in labels]


CASES = [(seed, n, tied) for seed in range(6) for n in (5, 60, 2000) for tied in (False, True)]


@pytest.mark.parametrize(("seed", "n", "tied"), CASES)
def test_auc_matches_sklearn(seed: int, n: int, tied: bool) -> None:
    scores, labels = _data(seed, n, tied)
    assert roc_auc(scores, labels) == pytest.approx(sklearn_metrics.roc_auc_score(labels, scores), abs=1e-12)


@pytest.mark.parametrize(("seed", "n", "tied"), CASES)
def test_pr_curve_matches_sklearn(seed: int, n: int, tied: bool) -> None:
    scores, labels = _data(seed, n, tied)
    precision, recall, thresholds = sklearn_metrics.precision_recall_curve(labels, scores)
    theirs = {float(t): (float(p), float(r)) for p, r, t in zip(precision, recall, thresholds, strict=False)}
    ours = {p.threshold: (p.precision, p.recall) for p in curve(scores, labels)}
    assert set(ours) == set(theirs) == set(scores)  # one point per distinct score
    for threshold, (p, r) in ours.items():
        assert (p, r) == pytest.approx(theirs[threshold], abs=1e-12)


@pytest.mark.parametrize(("seed", "n", "tied"), CASES)
def test_calibration_curve_matches_sklearn(seed: int, n: int, tied: bool) -> None:
    scores, labels = _data(seed, n, tied)
    share, mean = sklearn_calibration.calibration_curve(labels, scores, n_bins=10, strategy="uniform")
    table = reliability(scores, labels, bins=10)
    assert [r["share_positive"] for r in table] == pytest.approx(list(share), abs=1e-12)
    assert [r["mean_score"] for r in table] == pytest.approx(list(mean), abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_best_fbeta_and_cost_match_a_brute_force(seed: int) -> None:
    scores, labels = _data(seed, 300, tied=True)
    sweep = Sweep(scores, labels)
    y = np.array(labels)

    def fbeta(t: float) -> float:
        return float(sklearn_metrics.fbeta_score(y, np.array(scores) >= t, beta=0.5, zero_division=0.0))

    def cost(t: float) -> float:
        predicted = np.array(scores) >= t
        return float(5 * np.sum(predicted & ~y) + 1 * np.sum(~predicted & y)) / len(y)

    thresholds = sorted(set(scores), reverse=True)
    assert fbeta(sweep.best_fbeta(0.5).threshold) == pytest.approx(max(fbeta(t) for t in thresholds), abs=1e-12)
    chosen, expected = sweep.min_cost(5, 1)
    assert expected == pytest.approx(min(cost(t) for t in thresholds)) == pytest.approx(cost(chosen.threshold))
