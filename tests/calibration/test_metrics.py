"""Metric code against values computed by hand."""

import pytest

from suffice.calibration.metrics import (
    best_f1,
    expected_calibration_error,
    point,
    reliability,
    roc_auc,
    set_agreement,
    threshold_for_precision,
)

SCORES = [0.9, 0.8, 0.7, 0.6, 0.55, 0.4, 0.3, 0.2]
LABELS = [True, True, False, True, False, True, False, False]


def test_auc_by_hand():
    # positives 0.9 0.8 0.6 0.4; negatives 0.7 0.55 0.3 0.2
    # pairs won: 0.9→4, 0.8→4, 0.6→3 (0.55 0.3 0.2), 0.4→2 (0.3 0.2) = 13 of 16
    assert roc_auc(SCORES, LABELS) == pytest.approx(13 / 16)
    assert roc_auc([0.5, 0.5], [True, False]) == pytest.approx(0.5)  # a tie counts half
    assert roc_auc([0.1, 0.2], [True, True]) is None


def test_point_by_hand():
    p = point(SCORES, LABELS, 0.6)  # predicted: 0.9 0.8 0.7 0.6 → tp 3, fp 1, fn 1, tn 3
    assert (p.precision, p.recall, p.accuracy) == (0.75, 0.75, 0.75)
    assert p.f1 == pytest.approx(0.75)


def test_best_f1_by_hand():
    # t=0.9: P1 R.25 F.4; 0.8: P1 R.5 F.667; 0.7: P.667 R.5 F.571; 0.6: P.75 R.75 F.75;
    # 0.55: P.6 R.75 F.667; 0.4: P.667 R1 F.8; 0.3: P.571 R1 F.727; 0.2: P.5 R1 F.667
    best = best_f1(SCORES, LABELS)
    assert best.threshold == 0.4 and best.f1 == pytest.approx(0.8)


def test_precision_target_by_hand():
    assert threshold_for_precision(SCORES, LABELS, 0.75).threshold == 0.6
    assert threshold_for_precision(SCORES, LABELS, 1.0).threshold == 0.8
    assert threshold_for_precision([0.9, 0.1], [False, True], 0.99) is None


def test_reliability_and_ece_by_hand():
    table = reliability([0.05, 0.15, 0.95, 0.95], [False, True, True, False], bins=10)
    assert [(r["lo"], r["count"], r["share_positive"]) for r in table] == [(0.0, 1, 0.0), (0.1, 1, 1.0), (0.9, 2, 0.5)]
    # ece = 1/4*|0.05-0| + 1/4*|0.15-1| + 2/4*|0.95-0.5| = 0.0125 + 0.2125 + 0.225
    assert expected_calibration_error([0.05, 0.15, 0.95, 0.95], [False, True, True, False]) == pytest.approx(0.45)


def test_set_agreement_by_hand():
    got = set_agreement([[0, 1], [2], []], [[0], [2, 3], [4]])
    assert got["precision"] == pytest.approx(2 / 3) and got["recall"] == pytest.approx(2 / 4)


@pytest.mark.parametrize("metric", [roc_auc, best_f1, expected_calibration_error])
def test_a_nan_score_is_refused_not_miscounted(metric):
    with pytest.raises(ValueError, match="finite"):
        metric([0.9, float("nan"), 0.2, 0.8], [True, True, False, False])


def test_a_label_that_is_not_a_boolean_is_refused():
    with pytest.raises(ValueError, match="true or false"):
        best_f1([0.9, 0.1], ["false", "false"])  # type: ignore[list-item]
