"""Every ```python block of README.md and docs/*.md is code that works.

- Every block compiles.
- A block that opens an engine (``Judge.open``) runs, with the others like it, in one
  subprocess on the real engine (marked ``engine``): one process, each block in a
  fresh namespace as ``__main__``, so its ``if __name__ == "__main__":`` part runs.
- Any other block runs here, in a temporary folder.
- A block preceded by ``<!-- readme-test: compile-only -->`` is only compiled: it
  needs what a test does not have (a server, a Ray cluster, the reader's own files).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<kind>[\w-]+)\s*-->$")
MARKERS = ("compile-only",)
#: Calls that need an engine, a server or a cluster: a block using one that does not
#: open its engine with ``Judge.open`` must say ``compile-only``.
NEEDS_MORE = ("judge_file(", "judge_dataset(", "httpx.", "Pipeline(", "ray.")
#: The engine blocks together: one engine start per engine config on two cores, and their judging.
ENGINE_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    marker: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        if self.marker is not None:
            return self.marker
        return "engine" if "Judge.open(" in self.code else "run"


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of one Markdown file, with the marker line before each."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = lines[i]
        if not fence.startswith("```"):
            i += 1
            continue
        language = fence[3:].strip()
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if language == "python":
            before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
            match = MARKER.match(before)
            code = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(path, i + 1, code, match["kind"] if match else None))
        i = end + 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in python_blocks(path)]
RUN = [block for block in BLOCKS if block.kind == "run"]
ENGINE = [block for block in BLOCKS if block.kind == "engine"]


def test_the_readme_has_python_blocks() -> None:
    assert any(block.path.name == "README.md" for block in BLOCKS)
    assert ENGINE, "no block opens an engine: the engine test would check nothing"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_block_compiles(block: Block) -> None:
    compile(block.code, block.name, "exec")


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_block_marker_is_known(block: Block) -> None:
    assert block.marker is None or block.marker in MARKERS, f"{block.name}: unknown marker {block.marker!r}"


@pytest.mark.parametrize("block", RUN, ids=lambda block: block.name)
def test_block_without_engine_needs_nothing_more(block: Block) -> None:
    """A block that would start an engine or call a server some other way must be
    marked ``compile-only``, not run here by accident."""
    needs = [call for call in NEEDS_MORE if call in block.code]
    assert not needs, f"{block.name} uses {needs}: mark it <!-- readme-test: compile-only -->"


@pytest.mark.parametrize("block", RUN, ids=lambda block: block.name)
def test_block_without_engine_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(block.code, block.name, "exec"), {"__name__": "__main__"})


RUNNER = textwrap.dedent(
    """
    import json
    import sys

    if __name__ == "__main__":   # vLLM's engine processes are spawned: they import this file again
        import dataclasses
        import suffice.judge

        engines = {}
        starts = []
        make_engine = suffice.judge.make_engine

        def close_all():
            for engine, close in {id(e): (e, c) for e, c in engines.values()}.values():
                close()
            engines.clear()

        def shared(config):
            # one engine per engine config for all the blocks (a start is about a minute on two cores), and one
            # alive at a time: with the session's engines beside it, a second left too little memory for a KV cache
            key = repr(config)
            if key not in engines:
                close_all()
                starts.append(key)
                engine = make_engine(config)
                entry = (engine, engine.close)
                engines[key] = entry
                # No context window asked for is the model's own: asking for that same window is the same engine.
                window = getattr(engine, "max_model_len", None)
                if window is not None and config.max_model_len in (None, window):
                    for value in (None, window):
                        engines[repr(dataclasses.replace(config, max_model_len=value))] = entry
                engine.close = lambda: None   # a block's `with` leaves it open for the next block
            return engines[key][0]

        suffice.judge.make_engine = shared
        for block in json.load(open(sys.argv[1], encoding="utf-8")):
            print(f"=== {block['name']}", flush=True)
            exec(compile(block["code"], block["name"], "exec"), {"__name__": "__main__"})
        close_all()
        print(f"=== all blocks ran on {len(starts)} engine start(s)", flush=True)
    """
)


@pytest.mark.engine
def test_engine_blocks_run(tmp_path: Path) -> None:
    """The blocks that open an engine, in one subprocess: the real engine, as a reader
    who pastes them into a script would run them, except that blocks asking for the same
    engine settings share one engine (each block's ``Judge.open`` is otherwise a start)."""
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps([{"name": block.name, "code": block.code} for block in ENGINE]), encoding="utf-8")
    runner = tmp_path / "run_blocks.py"
    runner.write_text(RUNNER, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(runner), str(blocks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=ENGINE_TIMEOUT_S,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "=== all blocks ran" in done.stdout, output[-6000:]
    for block in ENGINE:
        assert f"=== {block.name}" in done.stdout
