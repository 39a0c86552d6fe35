"""``suffice calibrate`` end to end on the real engine, then the saved threshold in use.

Both commands judge through the session's vLLM server (``--engine openai``): what
they test is calibration and the saved threshold, not the in-process engine (which
tests/cli/test_faults.py and the engine matrix start), and each in-process start
costs about 55 s of the suite on two cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suffice.exceptions import EXIT_OK
from suffice.gates.sufficiency.calibration import GateConfig
from tests.conftest import load_records
from tests.vllm_server import through

pytestmark = pytest.mark.engine


def suffice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "suffice.cli.main", *args], capture_output=True, text=True, timeout=1200
    )


def test_calibrate_writes_report_plots_and_a_usable_gate_config(tmp_path: Path, vllm_server: str) -> None:
    records = load_records("squad2.jsonl", 8)  # 5 sufficient, 3 not
    assert {r["sufficient"] for r in records} == {True, False}
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in records))
    out, config = tmp_path / "calib", tmp_path / "gate.json"
    proc = suffice(
        "calibrate",
        str(golden),
        "--gate",
        "sufficiency",
        "-o",
        str(out),
        *through(vllm_server),
        "--save",
        str(config),
        "--score",
        "self_confidence",
        "--no-progress",
    )
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert set(report["scores"]) >= {"p_sufficient", "self_confidence", "decision"}
    for score in report["scores"].values():
        assert score["n"] == 8
        assert score["auc"] is None or 0.0 <= score["auc"] <= 1.0
        assert 0.0 <= score["best_f1"]["f1"] <= 1.0
    assert report["useful_chunk_ids"]["items"] > 0
    for name in ("p_sufficient.png", "self_confidence.png", "report.md"):
        assert (out / name).stat().st_size > 0
    saved = GateConfig.load(config)
    assert saved.score == "self_confidence"
    assert saved.threshold == report["scores"]["self_confidence"]["best_f1"]["threshold"]

    judged, few = tmp_path / "judged.jsonl", tmp_path / "few.jsonl"
    few.write_text("".join(json.dumps(r) + "\n" for r in records[:4]))
    proc = suffice(
        "judge",
        str(few),
        "-o",
        str(judged),
        *through(vllm_server),
        "--gate-config",
        str(config),
        "--no-progress",
    )
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    for line in judged.read_text().splitlines():
        verdict = json.loads(line)["verdict"]
        decision = verdict["decision"]
        assert decision["threshold"] == saved.threshold
        # A decision the constraint forced (an uncovered entity) stands whatever the score.
        expected = verdict.get("forced_by") is None and decision["score"] >= saved.threshold
        assert decision["sufficient"] == expected
