"""Every example of README.md and docs/*.md runs as written.

Every fenced block names its language. The ```python and ```console blocks are examples, and each runs, in a
temporary folder holding the files the examples name (:data:`FILES`):

- Python that opens an engine (``Judge.open``, ``judge_file`` without a service) runs, with the others like it,
  in one subprocess on the real engine (marked ``engine``), each block as ``__main__`` so its
  ``if __name__ == "__main__":`` part runs.
- Python that is a test module (it asks for ``suffice_gate``) is run by pytest with ``--suffice-server``.
- Other Python runs here; where it calls a service (``127.0.0.1:PORT``), that is a real ``suffice serve`` on a
  scripted model (:func:`service`), its URL's port replaced by the service's.
- A console block runs as one bash script, ``suffice`` (and ``.venv/bin/suffice``) being the real command
  on a scripted model (tests/docs/scripted_cli.py).  A ``suffice serve`` line starts its service in the
  background on a free port, ready before the next line and stopped at the block's end; the block's URLs
  are that service's, else :func:`service`'s.

A block preceded by ``<!-- docs-test: illustration: REASON -->`` is not run (a Python one is compiled): what
cannot run here (a Ray cluster, a GPU, an install from an index, the reader's own files), the reason given.
What ran is counted in the session's summary (:func:`tests.docs.blocks.summary_line`).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.docs.blocks import BLOCKS, ENGINE, EXAMPLES, LANGUAGES, PYTHON, ROOT, RUN, URL, Block
from tests.server.scripted_serve import wait_ready
from tests.setup_or_fail import need
from tests.vllm_server import free_port

SERVE = re.compile(r"^(?:\w+=\S+\s+)*(?:\.venv/bin/)?suffice serve\b")
KEY = "docs-example-key-0123456789abcdef"
#: The engine blocks together: one engine start per engine config on two cores, and their judging.
ENGINE_TIMEOUT_S = 1800
#: One console block or test module, services started and stopped included.
BLOCK_TIMEOUT_S = 300


def _example(name: str) -> str:
    """The code of the first Python block of ``name`` that is a test module."""
    return next(b.code for b in PYTHON if b.path.name == name and b.kind == "pytest")


def _record(i: int, question: str, text: str, **more: object) -> dict[str, object]:
    return {"id": f"q{i}", "question": question, "chunks": [{"id": f"d{i}", "text": text}], **more}


TRACES = [
    _record(1, "Who designed the Sydney Harbour Bridge?", "John Bradfield designed the Sydney Harbour Bridge."),
    _record(2, "When did the bridge open?", "The bridge opened in March 1932."),
    _record(3, "How long is the warranty?", "Items may be returned within 30 days."),
]
BRIDGE = {
    "id": "bridge",
    "question": "When did the Sydney Harbour Bridge open, and who designed it?",
    "chunks": [
        {"id": 0, "text": "The Sydney Harbour Bridge opened on 19 March 1932.", "source": "bridge.pdf"},
        {
            "id": 1,
            "text": "The bridge was designed and built by Dorman Long of Middlesbrough.",
            "source": "history.html",
        },
    ],
    "response": "The bridge opened on 19 March 1932. It was designed by Dorman Long. It is painted pink every spring.",
}
#: Labeled as the scripted model decides (sufficient where a chunk holds a word of the question).
GOLDEN = [
    _record(
        1,
        "How many days do customers have to return an item?",
        "Items may be returned within 30 days.",
        sufficient=True,
    ),
    _record(2, "Who designed the Sydney Harbour Bridge?", "John Bradfield designed the bridge.", sufficient=True),
    _record(
        3, "How long is the warranty on refurbished phones?", "Items may be returned within 30 days.", sufficient=False
    ),
    _record(4, "When did the launch happen?", "Apollo 11 carried three astronauts.", sufficient=False),
]


def _jsonl(records: Sequence[object]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def write_files(folder: Path) -> None:
    """The files the examples name, as a reader would have them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in ("client.key", "key"):
        (folder / name).write_text(KEY + "\n", encoding="utf-8")
        (folder / name).chmod(0o600)
    (folder / "traces.jsonl").write_text(_jsonl(TRACES), encoding="utf-8")
    (folder / "traces.jsonl.gz").write_bytes(gzip.compress(_jsonl(TRACES).encode()))
    pq.write_table(pa.Table.from_pylist(TRACES), folder / "traces.parquet")
    queries = [{"query" if key == "question" else key: value for key, value in r.items()} for r in TRACES]
    pq.write_table(pa.Table.from_pylist(queries), folder / "queries.parquet")
    (folder / "ten.jsonl").write_text(_jsonl([dict(TRACES[0], id=f"q{i}") for i in range(10)]), encoding="utf-8")
    (folder / "bridge.jsonl").write_text(_jsonl([BRIDGE]), encoding="utf-8")
    (folder / "tests").mkdir()
    (folder / "tests" / "golden.jsonl").write_text(_jsonl(GOLDEN), encoding="utf-8")
    (folder / "tests" / "answer.json").write_text(json.dumps(dict(BRIDGE, response="It opened on 19 March 1932.")))
    (folder / "tests" / "test_rag_quality.py").write_text(_example("testing-your-rag.md"), encoding="utf-8")
    command = f'#!/bin/sh\nexec {sys.executable} -m tests.docs.scripted_cli "$@"\n'
    for bin_dir in (folder / ".bin", folder / ".venv" / "bin"):
        bin_dir.mkdir(parents=True)
        (bin_dir / "suffice").write_text(command, encoding="utf-8")
        (bin_dir / "suffice").chmod(0o755)


def environment(folder: Path) -> dict[str, str]:
    path = os.pathsep.join([str(folder / ".bin"), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PATH": path, "PYTHONPATH": python_path, "SUFFICE_CACHE": str(folder / ".cache")}


def with_port(code: str, port: int) -> str:
    return URL.sub(f"127.0.0.1:{port}", code)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a real ``suffice serve`` (sufficiency and recovery) on the scripted model, keyed with KEY."""
    folder = tmp_path_factory.mktemp("docs-service")
    write_files(folder)
    port = free_port()
    command = [sys.executable, "-m", "tests.docs.scripted_cli", "serve", "--port", str(port), "--api-key-file"]
    command += ["client.key", "--gate", "sufficiency", "--gate", "recovery", "--audit-db", "audit.sqlite"]
    log = folder / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT, env=environment(folder))
    try:
        wait_ready(process, port, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


#: Prepended to a console block: ``ready PORT`` waits for a service started in the background, and every
#: service the block started is stopped when it ends.
PRELUDE = textwrap.dedent(
    f"""\
    set -eo pipefail
    ready() {{
        {sys.executable} -c 'import sys, time, httpx
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{{sys.argv[1]}}/ready", timeout=2).status_code == 200: sys.exit(0)
        except httpx.TransportError: pass
        time.sleep(0.2)
    sys.exit("suffice serve not ready")' "$1"
    }}
    trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT
    """
)


def console_script(code: str, shared_port: int, own_port: int) -> str:
    """The block as bash: ``$`` prompts dropped, each ``suffice serve`` line started in the background on
    ``own_port`` and waited for, the URLs pointed at that service or else at the shared one."""
    lines = []
    starts_service = False
    for line in code.replace("\\\n", " ").splitlines():
        line = line.removeprefix("$ ")
        if SERVE.match(line):
            starts_service = True
            line = line.split(" #", 1)[0].rstrip().removesuffix("&").rstrip()
            line = re.sub(r"--port \d+", f"--port {own_port}", line)
            if "--port" not in line:
                line += f" --port {own_port}"
            line += f" &\nready {own_port}"
        lines.append(line)
    return PRELUDE + with_port("\n".join(lines), own_port if starts_service else shared_port) + "\n"


def run_console(block: Block, folder: Path, port: int) -> None:
    if re.search(r"^\s*curl\b", block.code, re.M):
        need(shutil.which("curl"), "curl, which the example calls")
    script = folder / "example.sh"
    script.write_text(console_script(block.code, port, free_port()), encoding="utf-8")
    done = subprocess.run(
        ["bash", str(script)],
        cwd=folder,
        env=environment(folder),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{block.name}:\n{script.read_text()}\n{done.stdout[-3000:]}{done.stderr[-6000:]}"


def run_test_module(block: Block, folder: Path, port: int) -> None:
    (folder / "tests" / "test_example.py").write_text(with_port(block.code, port), encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_example.py"]
    key_file = folder / "client.key"
    key_file.write_text(KEY + "\n", encoding="utf-8")
    command += ["--suffice-server", f"http://127.0.0.1:{port}", "--suffice-api-key-file", str(key_file)]
    done = subprocess.run(
        command, cwd=folder, env=environment(folder), capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
    )
    assert done.returncode == 0, f"{block.name}:\n{done.stdout[-6000:]}{done.stderr[-3000:]}"


def test_the_documents_have_examples_of_each_kind() -> None:
    kinds = {block.kind for block in EXAMPLES}
    assert kinds >= {"engine", "run", "service", "pytest", "console", "illustration"}, kinds


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_block_names_its_language(block: Block) -> None:
    assert block.language in LANGUAGES, f"{block.name}: ```{block.language}: give one of {LANGUAGES}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker is not None], ids=lambda block: block.name)
def test_a_marker_is_an_illustration_with_its_reason(block: Block) -> None:
    assert block.reason, f"{block.name}: write <!-- docs-test: illustration: WHY IT CANNOT RUN HERE -->"
    assert block.language in ("python", "console"), f"{block.name}: only an example is an illustration"


@pytest.mark.parametrize("block", PYTHON, ids=lambda block: block.name)
def test_python_block_compiles(block: Block) -> None:
    compile(block.code, block.name, "exec")


@pytest.mark.parametrize("block", RUN, ids=lambda block: block.name)
def test_example_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    write_files(tmp_path)
    port: int = request.getfixturevalue("service")
    if block.kind == "console":
        run_console(block, tmp_path, port)
    elif block.kind == "pytest":
        run_test_module(block, tmp_path, port)
    else:
        from suffice.serving import factory

        def no_engine(kind: str) -> None:
            raise AssertionError(f"{block.name} starts an engine without Judge.open: mark it an illustration")

        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setattr(factory, "engine_class", no_engine)
        monkeypatch.chdir(tmp_path)
        exec(compile(with_port(block.code, port), block.name, "exec"), {"__name__": "__main__"})


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
    write_files(tmp_path)
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
