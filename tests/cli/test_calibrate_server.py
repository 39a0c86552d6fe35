"""``suffice calibrate --server``: a team that runs only the service calibrates through it.  The golden records are
judged by a real ``suffice serve`` app on loopback (its engine scripted: "unknown" questions are insufficient, the
others sufficient, with half of the labels made to disagree), and the report is the service's verdicts against the
labels; a flag that sets an engine in this process is refused, as with ``judge --server``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.exceptions import EXIT_OK, EXIT_USAGE
from tests.fakes import ScriptedEngine
from tests.integrations.conftest import verdict_for
from tests.test_client import serve

KEY = "calibrate-through-the-service-0123456789"


@pytest.fixture
def service() -> Iterator[tuple[str, ScriptedEngine]]:
    engine = ScriptedEngine(verdict_for)
    with serve(engine, key=KEY) as url:
        yield url, engine


def _golden(path: Path) -> Path:
    rows = []
    for i in range(8):
        unknown = i % 2 == 1
        question = f"When was the unknown launch {i}?" if unknown else f"Where did Apollo {i} land?"
        label = (not unknown) if i < 6 else unknown  # the last two labels disagree with the engine
        rows.append(
            {"id": f"g{i}", "question": question, "chunks": ["Apollo landed on the Moon."], "sufficient": label}
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _calibrate(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    key = tmp_path / "client.key"
    key.write_text(KEY + "\n")
    return subprocess.run(
        [sys.executable, "-m", "suffice.cli.main", "calibrate", str(_golden(tmp_path / "golden.jsonl")),
         "--gate", "sufficiency", "-o", str(tmp_path / "calib"), "--server", url, "--api-key-file", str(key),
         "--no-progress", *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_calibrate_through_a_running_service(tmp_path: Path, service: tuple[str, ScriptedEngine]):
    url, engine = service
    done = _calibrate(tmp_path, url)
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    assert sum(engine.calls) == 8  # every golden record judged by the service's engine, none in this process
    report = json.loads((tmp_path / "calib" / "report.json").read_text())
    decision = report["scores"]["decision"]
    assert report["items"] == 8 and decision["n"] == 8 and decision["positives"] == 4
    assert decision["best_f1"]["f1"] == pytest.approx(0.75)  # 3 of 4 positives called, 1 false positive
    assert (tmp_path / "calib" / "report.html").is_file()


def test_an_engine_flag_with_server_is_refused(tmp_path: Path, service: tuple[str, ScriptedEngine]):
    url, engine = service
    done = _calibrate(tmp_path, url, "--max-model-len", "4096")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "--max-model-len" in done.stderr and "--server" in done.stderr
    assert engine.calls == []
