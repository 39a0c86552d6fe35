"""The openai engine against a real vLLM OpenAI-compatible server on the embedded model.

The session's server (``vllm_server``, tests/vllm_server.py; its start-up, about a
minute, is paid by whichever test uses it first).  Every gate judges a few real records
through it, and the command line judges a file through it.  Few records: about two
minutes of judging on two cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exit_codes import EXIT_OK
from suffice.judge import Judge
from suffice.results import JudgeResult
from suffice.serving.engine_config import EngineConfig
from suffice.serving.openai import OpenAIEngine
from tests.conftest import load_records
from tests.vllm_server import SERVED, through

pytestmark = pytest.mark.engine


def judged(url: str, gate: str, records: list[dict[str, object]], rubric: str | None = None) -> list[JudgeResult]:
    engine_config = EngineConfig(kind="openai", base_url=url)
    config = JudgeConfig(gate=gate, engine=engine_config, options={"rubric": rubric} if rubric else {})
    with Judge(OpenAIEngine(engine_config), config=config) as judge:
        return judge.judge_batch(records)


@pytest.fixture(scope="module")
def sufficiency_results(vllm_server: str) -> list[JudgeResult]:
    return judged(vllm_server, "sufficiency", load_records("squad2.jsonl", 3))


@pytest.fixture(scope="module")
def recovery_results(vllm_server: str) -> list[JudgeResult]:
    with_answers = [r for r in load_records("squad2.jsonl", 12) if r.get("answer")][:3]
    return judged(vllm_server, "recovery", [{**r, "response": r["answer"]} for r in with_answers])


@pytest.fixture(scope="module")
def adequacy_results(vllm_server: str) -> list[JudgeResult]:
    return judged(vllm_server, "adequacy", load_records("squad2.jsonl", 3), rubric="customer-support")


def test_the_engine_names_the_served_model(vllm_server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
        assert engine.model_id == SERVED


def test_the_engine_reads_the_servers_context_window(vllm_server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
        assert engine.max_model_len == 8192


def test_the_servers_tokenizer_counts_tokens(vllm_server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
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
def command_line(vllm_server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """``suffice judge`` on two records through the server: its exit code and output."""
    folder = tmp_path_factory.mktemp("cli")
    source = folder / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in load_records("squad2.jsonl", 2)))
    output = folder / "out.jsonl"
    code = main(["judge", str(source), "-o", str(output), *through(vllm_server), "--no-progress"])
    return code, output


def test_the_command_line_judges_a_file_through_the_server(command_line: tuple[int, Path]):
    assert command_line[0] == EXIT_OK


def test_the_command_line_writes_one_row_per_input_line(command_line: tuple[int, Path]):
    assert len(command_line[1].read_text().splitlines()) == 2
