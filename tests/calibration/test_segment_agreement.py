"""Calibration measures a recovery verdict per segment against labeled segments (issue 49)."""

from __future__ import annotations

import pytest

from suffice.calibration.metrics import segment_agreement
from suffice.calibration.report import _markdown, build_report
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.recovery.segments import segment
from suffice.judge import Judge
from suffice.rows.shaping import result_row
from tests.fakes import ScriptedEngine, recovery_reply

RESPONSES = [
    "Ada wrote the notes. She wrote them in 1843. They describe an engine.",
    "Paris is in France. It rains in 1843 there.",
]


def golden() -> list[dict[str, object]]:
    records = []
    for i, response in enumerate(RESPONSES):
        labels = [
            # The second response's second sentence is truly supported: the model below flags it anyway.
            {"start": s.start, "end": s.end, "label": "unsupported" if "1843" in s.text and i == 0 else "supported"}
            for s in segment(response)
        ]
        records.append(
            {
                "id": f"r{i}",
                "question": "What happened?",
                "response": response,
                "chunks": [{"id": 0, "text": "Ada wrote the notes."}],
                "sufficient": i == 1,
                "segment_labels": labels,
            }
        )
    return records


def test_the_report_counts_segment_label_agreement_and_unsupported_precision_recall():
    gate = RecoveryGate(SufficiencyThreshold.loose())

    def label(index: int, text: str) -> str:
        return "unsupported" if "1843" in text else "supported"

    judge = Judge(ScriptedEngine(lambda request: recovery_reply(request, label)), gate)
    records = golden()
    rows = [result_row(r, gate, "suffice", i + 1) for i, r in enumerate(judge.judge_batch(records))]
    report = build_report(gate, records, rows, precision_target=0.9)
    seg = report["segments"]
    # 5 segments: 2 flagged by the model, 1 of them truly unsupported.
    assert seg["segments"] == 5
    assert seg["unsupported_precision"] == pytest.approx(0.5)
    assert seg["unsupported_recall"] == pytest.approx(1.0)
    assert seg["label_agreement"] == pytest.approx(4 / 5)
    assert "Segments against their labels (5 labeled segments)" in _markdown(report)


def test_segments_labeled_for_another_segmentation_count_nowhere():
    assert segment_agreement([]) == {
        "segments": 0.0,
        "label_agreement": None,
        "unsupported_precision": None,
        "unsupported_recall": None,
        "unsupported_f1": None,
    }
    gate = RecoveryGate(SufficiencyThreshold.loose())
    judge = Judge(ScriptedEngine(lambda request: recovery_reply(request, "supported")), gate)
    records = [{**r, "segment_labels": [{"start": 0, "end": 3, "label": "unsupported"}]} for r in golden()]
    rows = [result_row(r, gate, "suffice", i + 1) for i, r in enumerate(judge.judge_batch(records))]
    assert "segments" not in build_report(gate, records, rows, precision_target=0.9)
