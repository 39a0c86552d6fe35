"""The calibration report's metric part at scale: the threshold sweep before and after issue 32.

Times :func:`suffice.calibration.report.score_metrics` (AUC, best-F1 and
precision-target thresholds, the curve, reliability and ECE for one score) on
10k, 100k and 1M seeded labeled scores, and the algorithm it replaced (one pass over
every item per distinct score, the curve built three times) beside it.  The old one is
given ``--old-cap`` seconds per size: a run that does not finish is stopped and its
time extrapolated from the thresholds it did (marked ``estimated``).  Two kinds of
scores: rounded to 3 decimals (about a thousand distinct, as a composite or a verbalised confidence) and continuous (a
token probability: nearly every score distinct, the old algorithm's worst case).
CPU only.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_calibration.py [--sizes 10000 100000 1000000]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from common import report

from suffice.calibration.metrics import ThresholdPoint, expected_calibration_error, point, reliability, roc_auc
from suffice.calibration.report import score_metrics


class _OutOfTime(Exception):
    pass


class _Budget:
    """The old algorithm's deadline, and how many curve points it computed before it."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds
        self.points = 0


def _old_curve(scores: Sequence[float], labels: Sequence[bool], budget: _Budget) -> list[ThresholdPoint]:
    """The curve as it was: :func:`point` (three passes over every item) per distinct score."""
    points = []
    for t in sorted(set(scores), reverse=True):
        if time.perf_counter() > budget.deadline:
            raise _OutOfTime
        points.append(point(scores, labels, t))
        budget.points += 1
    return points


def _old_metrics(values: Sequence[float], labels: Sequence[bool], target: float, budget: _Budget) -> dict[str, Any]:
    """build_report's metric part before issue 32: best_f1, threshold_for_precision and
    curve each built the whole curve."""
    best = max(reversed(_old_curve(values, labels, budget)), key=lambda p: p.f1)
    reaching = [p for p in _old_curve(values, labels, budget) if p.precision >= target and p.recall > 0]
    chosen = min(reaching, key=lambda p: p.threshold) if reaching else None
    return {
        "auc": roc_auc(values, labels),
        "best_f1": best.as_dict(),
        "precision_target": None if chosen is None else chosen.as_dict(),
        "accuracy_at_0_5": point(values, labels, 0.5).accuracy,
        "ece": expected_calibration_error(values, labels),
        "reliability": reliability(values, labels),
        "curve": [p.as_dict() for p in _old_curve(values, labels, budget)],
    }


def _data(n: int, seed: int) -> tuple[list[float], list[bool]]:
    """Scores as a judge gives them: 3 decimals (ties), sufficient items higher."""
    rng = random.Random(seed)
    labels = [rng.random() < 0.4 for _ in range(n)]
    scores = [round(min(1.0, max(0.0, rng.gauss(0.6 if y else 0.4, 0.2))), 3) for y in labels]
    return scores, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--old-sizes", type=int, nargs="+", default=[10_000, 100_000], help="where to run the old one")
    parser.add_argument("--old-cap", type=float, default=150.0, help="seconds the old algorithm gets per size")
    args = parser.parse_args()
    rows = []
    for kind, n in [(kind, n) for kind in ("3 decimals", "continuous") for n in args.sizes]:
        scores, labels = _data(n, seed=n)
        if kind == "continuous":  # a probability as the model gives it: nearly every score distinct
            rng = random.Random(n)
            scores = [min(1.0, max(0.0, s + rng.uniform(-5e-4, 5e-4))) for s in scores]
        start = time.perf_counter()
        new = score_metrics(scores, labels, 0.9)
        new_s = time.perf_counter() - start
        row: dict[str, Any] = {"kind": kind, "n": n, "distinct": len(new["curve"]), "new_s": new_s}
        row.update(old_s=None, ratio=None)
        if n in args.old_sizes:
            start = time.perf_counter()
            budget = _Budget(args.old_cap)
            try:
                old = _old_metrics(scores, labels, 0.9, budget)
            except _OutOfTime:
                spent = time.perf_counter() - start
                # three curves of one point per distinct score; ``budget.points`` of them in ``spent``
                estimate = spent / max(budget.points, 1) * 3 * row["distinct"]
                row.update(old_s=estimate, old="estimated", same=None)
            else:
                row.update(old_s=time.perf_counter() - start, old="measured")
                row["same"] = all(old[k] == new[k] for k in old)
            row["ratio"] = row["old_s"] / new_s
        rows.append(row)
        print(f"{kind} n={n}: new {new_s:.2f} s, old {row.get('old', 'not run')} {row['old_s'] or 0:.1f} s", flush=True)
    report(
        "calibration.json",
        rows,
        [
            ("kind", "scores", "s"),
            ("n", "n", ","),
            ("distinct", "distinct scores", ","),
            ("new_s", "new (s)", ".2f"),
            ("old_s", "old (s)", ".1f"),
            ("old", "old is", "s"),
            ("ratio", "old / new", ",.0f"),
            ("same", "same results", ""),
        ],
        old_cap_s=args.old_cap,
    )


if __name__ == "__main__":
    main()
