"""``suffice judge`` end to end: a subprocess on the real engine, and its exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from suffice.exceptions import EXIT_FATAL, EXIT_ITEM_ERRORS, EXIT_USAGE
from suffice.gates.sufficiency.grammar import RAGFLOW_SCHEMA
from tests.conftest import load_records
from tests.vllm_server import SERVED, through


def suffice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "suffice.cli.main", *args], capture_output=True, text=True, timeout=900
    )


def write_input(path: Path) -> list[str | None]:
    records = load_records("squad2.jsonl", 3)
    lines = [json.dumps(r) for r in records]
    lines.insert(1, json.dumps({"id": "no-question", "chunks": []}))
    lines.append("{not json")
    path.write_text("\n".join(lines) + "\n")
    return [str(records[0]["id"]), "no-question", *[str(r["id"]) for r in records[1:]], None]


def test_missing_model_folder_is_a_fatal_error_naming_the_path(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    proc = suffice("judge", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--model", "/no/such/model")
    assert proc.returncode == EXIT_FATAL
    assert "/no/such/model" in proc.stderr


def test_usage_errors(tmp_path):
    proc = suffice("judge", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl"))
    assert proc.returncode == EXIT_USAGE and "missing.jsonl" in proc.stderr
    proc = suffice("judge", "x.jsonl", "-o", "y.jsonl", "--backend", "nope")
    assert proc.returncode == EXIT_USAGE


@pytest.mark.engine
def test_judge_writes_one_line_per_record_and_resumes(tmp_path: Path, vllm_server: str) -> None:
    """Through the session's vLLM server: the subject is the rows and the resume, and an
    in-process engine start costs about 55 s a process on two cores.  That vLLM's own
    lines stay out of stderr is tested on the in-process runs of tests/cli/test_faults.py."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    expected_ids = write_input(source)
    server = through(vllm_server)
    same = (*server, "--format", "ragflow")
    proc = suffice("judge", str(source), "-o", str(out), *same)
    assert proc.returncode == EXIT_ITEM_ERRORS, proc.stderr[-2000:]
    assert "%|" in proc.stderr  # the progress bar
    assert "rec/s" in proc.stderr or "s/rec" in proc.stderr  # with its rate
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == expected_ids
    assert rows[1]["error"]["field"] == "question"
    assert rows[4]["error"]["field"] == "record"
    for row in (rows[0], rows[2], rows[3]):
        jsonschema.validate(row["verdict"], RAGFLOW_SCHEMA)
        assert row["gate"] == "sufficiency"
        assert row["backend"] == "server"
        assert row["prompt_version"] == "sufficiency/v6"
        assert row["tokens"]["completion"] > 0
        assert row["model"] == SERVED
    # A crash mid-write: two lines and a half remain; the rerun completes the rest.
    kept = out.read_text().splitlines()[:2]
    out.write_text("\n".join(kept) + "\n" + '{"id": "partial')
    proc = suffice("judge", str(source), "-o", str(out), *same, "--no-progress")
    assert proc.returncode == EXIT_ITEM_ERRORS, proc.stderr[-2000:]
    assert "resuming: 2 of 5" in proc.stderr
    lines = out.read_text().splitlines()
    assert lines[:2] == kept
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == expected_ids
    jsonschema.validate(rows[2]["verdict"], RAGFLOW_SCHEMA)
    proc = suffice("judge", str(source), "-o", str(out), *same, "--no-progress")
    assert proc.returncode == EXIT_ITEM_ERRORS
    assert "nothing to do" in proc.stderr
    # Other settings are refused, naming the setting; the output is untouched.
    proc = suffice("judge", str(source), "-o", str(out), *server, "--format", "suffice")
    assert proc.returncode == EXIT_USAGE
    assert "format='ragflow'" in proc.stderr
    assert out.read_text().splitlines() == lines


# What -v tells of the settings is shown by the first run of tests/cli/test_faults.py (an engine start is about
# a minute of CI): test_faults.py::test_verbose_decision_mode_shows_settings_and_writes_decisions.


def test_bad_cores_are_a_usage_error(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    proc = suffice("judge", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--cores", "9999")
    assert proc.returncode == EXIT_USAGE
    assert "cores" in proc.stderr


def test_an_audit_key_without_a_database_is_a_usage_error(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    key = tmp_path / "k"
    key.write_text("00" * 32)
    proc = suffice("judge", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--audit-key", str(key))
    assert proc.returncode == EXIT_USAGE
    assert "audit_key" in proc.stderr


def test_the_input_as_output_is_a_usage_error(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    proc = suffice("judge", str(source), "-o", str(source))
    assert proc.returncode == EXIT_USAGE
    assert "is the input itself" in proc.stderr


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--engine", "transformers", "--backend", "xgrammar"], "backend='xgrammar': not used by the transformers"),
        (["--engine", "openai"], "base_url=None"),
        (["--base-url", "http://127.0.0.1:9"], "base_url='http://127.0.0.1:9': not used by the vllm engine"),
        (["--engine", "openai", "--base-url", "http://x", "--kv-cache-gib", "2"], "kv_cache_gib"),
        (["--tensor-parallel-size", "0"], "tensor_parallel_size=0: must be at least 1"),
        (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization=1.5"),
        (["--engine", "transformers", "--tensor-parallel-size", "2"], "tensor_parallel_size='2': not used by the"),
    ],
)
def test_an_engine_option_the_engine_does_not_take_is_a_usage_error(tmp_path, options, named):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    proc = suffice("judge", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), *options)
    assert proc.returncode == EXIT_USAGE
    assert named in proc.stderr


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--field", "question"], "field='question'"),
        (["--field", "answer=response"], "'answer' is not a record field"),
        (["--actors", "2"], "actors=2: needs --ray"),
        (["--ray", "local", "--actors", "0"], "actors=0: must be at least 1"),
        (["--batch-size", "0"], "batch_size=0"),
        (["--format", "seed", "--output-format", "parquet"], "format='seed'"),
    ],
)
def test_a_batch_option_that_cannot_work_is_a_usage_error(tmp_path, options, named):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    proc = suffice("judge", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), *options)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert named in proc.stderr


def test_an_output_of_unknown_format_is_a_usage_error_naming_the_option(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": []}\n')
    proc = suffice("judge", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.csv"))
    assert proc.returncode == EXIT_USAGE
    assert "output-format" in proc.stderr
