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
from suffice.exceptions import EXIT_OK
from suffice.judge import Judge
from suffice.results import JudgeResult
from suffice.serving.engine_config import EngineConfig
from suffice.serving.openai import OpenAIEngine
from tests.conftest import load_records
from tests.vllm_server import SERVED, through

pytestmark = pytest.mark.engine


def judged(url: str, gate: str, records: list[dict[str, object]], **options: object) -> list[JudgeResult]:
    engine_config = EngineConfig(kind="openai", base_url=url)
    config = JudgeConfig(gate=gate, engine=engine_config, options=options)
    with Judge(OpenAIEngine(engine_config), config=config) as judge:
        return judge.judge_batch(records)


def worst_cases(url: str, gate: str, records: list[dict[str, object]], **options: object) -> list[int | None]:
    """Each record's worst case of completion tokens: its requests' constraints' (prompts fitted, nothing generated),
    summed over the windows a response judged segment by segment takes (recovery: one request a window)."""
    engine_config = EngineConfig(kind="openai", base_url=url)
    config = JudgeConfig(gate=gate, engine=engine_config, options=options)
    with Judge(OpenAIEngine(engine_config), config=config) as judge:
        bounds = [[request.constraint.max_completion_tokens for request in judge.requests([r])] for r in records]
    return [None if None in windows else sum(b for b in windows if b is not None) for windows in bounds]


def records_for(gate: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    """The records each gate judges here, and its options."""
    if gate == "recovery":
        with_answers = [r for r in load_records("squad2.jsonl", 12) if r.get("answer")][:3]
        return [{**r, "response": r["answer"]} for r in with_answers], {}
    if gate == "adequacy":
        return load_records("squad2.jsonl", 3), {"rubric": "customer-support"}
    return load_records("squad2.jsonl", 3), {}


@pytest.fixture(scope="module")
def sufficiency_results(vllm_server: str) -> list[JudgeResult]:
    records, options = records_for("sufficiency")
    return judged(vllm_server, "sufficiency", records, **options)


@pytest.fixture(scope="module")
def recovery_results(vllm_server: str) -> list[JudgeResult]:
    records, options = records_for("recovery")
    return judged(vllm_server, "recovery", records, **options)


@pytest.fixture(scope="module")
def adequacy_results(vllm_server: str) -> list[JudgeResult]:
    records, options = records_for("adequacy")
    return judged(vllm_server, "adequacy", records, **options)


def test_the_engine_names_the_served_model(vllm_server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
        assert engine.model_id == SERVED


def test_the_engine_reads_the_servers_context_window(vllm_server: str):
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
        assert engine.max_model_len == 8192


def test_the_engine_reads_the_servers_scheduling_and_kv_cache(vllm_server: str):
    """Both of the in-process engine's scheduling rules hold on the server: it says so, and nothing is noted."""
    with OpenAIEngine(EngineConfig(kind="openai", base_url=vllm_server)) as engine:
        assert engine.scheduling.policy == "priority"
        assert engine.scheduling.capacity is not None and engine.scheduling.capacity >= 8192
        assert engine.scheduling.notes == []


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


def over_their_worst_case(results: list[JudgeResult], bounds: list[int | None]) -> list[tuple[str | None, int, int]]:
    """(id, completion tokens, bound) of each verdict over its constraint's worst case, every attempt counted."""
    assert len(bounds) == len(results) and None not in bounds
    return [
        (r.id, r.tokens.completion, bound * (r.retries + 1))
        for r, bound in zip(results, bounds, strict=True)
        if bound is not None and r.tokens.completion > bound * (r.retries + 1)
    ]


@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_every_verdicts_output_tokens_are_within_its_constraints_worst_case(
    gate: str, vllm_server: str, request: pytest.FixtureRequest
):
    results = request.getfixturevalue(f"{gate}_results")
    records, options = records_for(gate)
    assert over_their_worst_case(results, worst_cases(vllm_server, gate, records, **options)) == []


@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_every_verdict_was_decoded_by_the_model(gate: str, request: pytest.FixtureRequest):
    """The positive control of the bound above: the verdicts cost tokens."""
    assert all(r.tokens.completion > 0 for r in request.getfixturevalue(f"{gate}_results"))


#: A reasoning bound well under the default (200), in characters.
SHORT_REASONING = 24


@pytest.fixture(scope="module")
def short_reasoning_results(vllm_server: str) -> list[JudgeResult]:
    return judged(vllm_server, "sufficiency", load_records("squad2.jsonl", 2), reasoning_chars=SHORT_REASONING)


def test_verdicts_under_a_short_reasoning_bound_are_verdicts(short_reasoning_results: list[JudgeResult]):
    assert [r.error for r in short_reasoning_results] == [None, None]


def test_verdicts_under_a_short_reasoning_bound_keep_their_reasoning_within_it(
    short_reasoning_results: list[JudgeResult],
):
    assert all(len(getattr(r.verdict, "reasoning", "")) <= SHORT_REASONING for r in short_reasoning_results)


def test_verdicts_under_a_short_reasoning_bound_are_within_its_smaller_worst_case(
    short_reasoning_results: list[JudgeResult], vllm_server: str
):
    records = load_records("squad2.jsonl", 2)
    bounds = worst_cases(vllm_server, "sufficiency", records, reasoning_chars=SHORT_REASONING)
    assert over_their_worst_case(short_reasoning_results, bounds) == []
