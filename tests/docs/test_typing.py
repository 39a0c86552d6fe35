"""The documented code type-checks: ``mypy --strict`` on every ``python`` example of README.md and docs/ that runs
(tests/docs/test_examples.py), each a module of its own, with the project's mypy settings.  Results are generic over
the verdict, the verdict classes public (``suffice.verdicts``), and what a judge returns typed, so a reader's code
that follows the docs passes a strict type check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.blocks import PYTHON, ROOT


def test_every_python_example_passes_mypy_strict(tmp_path: Path):
    checked = [block for block in PYTHON if block.kind != "illustration"]
    assert len(checked) >= 20
    for number, block in enumerate(checked):
        stem = f"ex{number:02d}_{block.path.stem.replace('-', '_')}_{block.line}"
        (tmp_path / f"{stem}.py").write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--python-version", "3.11",
         "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, env={**os.environ, "MYPYPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
