"""The fenced blocks of README.md and docs/*.md, and what kind of example each is (tests/docs/test_examples.py
runs them; tests/conftest.py prints :func:`summary_line`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The documents whose examples run: docs/layout.md's map and docs/settings.md's table are not examples
#: (tests/test_layers.py reads the map by its bare fence; scripts/settings_table.py writes the table).
DOCUMENTS = [
    ROOT / "README.md",
    *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in ("layout.md", "settings.md")),
]
LANGUAGES = ("python", "console", "text", "json", "toml")
MARKER = re.compile(r"^<!--\s*(?:docs|readme)-test:(?P<rest>.*)-->$")
ILLUSTRATION = re.compile(r"^\s*illustration:\s*(?P<reason>.*?)\s*$")
URL = re.compile(r"\b(?:127\.0\.0\.1|localhost):\d{4}\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # the marker comment's text after "docs-test:", if one precedes the block

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def reason(self) -> str | None:
        """Why the block is an illustration; None for an example that runs."""
        found = ILLUSTRATION.match(self.marker or "")
        return found["reason"] if found else None

    @property
    def kind(self) -> str:
        if self.reason is not None:
            return "illustration"
        if self.language == "console":
            return "console"
        if "suffice_gate" in self.code:
            return "pytest"
        if URL.search(self.code):
            return "service"
        return "engine" if "Judge.open(" in self.code or "judge_file(" in self.code else "run"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, each with the marker comment right before it."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        marker = MARKER.match(before)
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(path, i + 1, lines[i][3:].strip(), code, marker["rest"] if marker else None))
        i = end + 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in blocks_of(path)]
EXAMPLES = [block for block in BLOCKS if block.language in ("python", "console")]
PYTHON = [block for block in EXAMPLES if block.language == "python"]
ENGINE = [block for block in EXAMPLES if block.kind == "engine"]
RUN = [block for block in EXAMPLES if block.kind not in ("engine", "illustration")]


def summary_line(passed: Sequence[pytest.TestReport]) -> str | None:
    """``docs examples: R run, I illustrations, T total (python P, console C)`` from the session's passed
    reports (the controller's, under xdist too); None when no example ran."""
    here = "tests/docs/test_examples.py::"
    tests = {report.nodeid.removeprefix(here) for report in passed if report.nodeid.startswith(here)}
    ran = sum(f"test_example_runs[{block.name}]" in tests for block in RUN)
    ran += len(ENGINE) if "test_engine_blocks_run" in tests else 0
    if not ran:
        return None
    illustrations = sum(block.kind == "illustration" for block in EXAMPLES)
    console = len(EXAMPLES) - len(PYTHON)
    return (
        f"docs examples: {ran} run, {illustrations} illustrations, {len(EXAMPLES)} total "
        f"(python {len(PYTHON)}, console {console})"
    )
