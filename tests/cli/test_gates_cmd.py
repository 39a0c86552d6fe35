"""Both new gates through the CLI on a sample of the labeled data (real engine).

The engine test judges through the session's vLLM server (``--engine openai``): its
subject is the gates' rows, not the in-process engine, whose start costs about 55 s
a process on two cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from suffice.exceptions import EXIT_ITEM_ERRORS, EXIT_OK, EXIT_USAGE
from suffice.gates.recovery.grammar import SEED_SCHEMA
from tests.conftest import load_records
from tests.vllm_server import through

WRONG = "The answer is certainly Atlantis, founded in 3000 BC by dolphins."


def suffice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "suffice.cli.main", *args], capture_output=True, text=True, timeout=900
    )


def test_rubrics_list_and_unknown_rubric_is_a_usage_error(tmp_path):
    proc = suffice("rubrics", "list")
    assert proc.returncode == EXIT_OK
    for name in ("legal-review@1.0.0", "clinical-guidance@1.0.0", "customer-support@1.0.0"):
        assert name in proc.stdout
    (tmp_path / "in.jsonl").write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    proc = suffice(
        "judge",
        str(tmp_path / "in.jsonl"),
        "-o",
        str(tmp_path / "o.jsonl"),
        "--gate",
        "adequacy",
        "--rubric",
        "no-such-rubric",
    )
    assert proc.returncode == EXIT_USAGE and "no-such-rubric" in proc.stderr


@pytest.mark.engine
def test_recovery_and_adequacy_on_a_data_sample(tmp_path: Path, vllm_server: str) -> None:
    server = through(vllm_server)
    answerable = [r for r in load_records("squad2.jsonl", 40) if r.get("answer")][:4]
    records = [{**r, "response": r["answer"] if i % 2 == 0 else WRONG} for i, r in enumerate(answerable)]
    records.append({"id": "no-response", "question": "Q?", "chunks": [{"id": 0, "text": "x"}]})
    source = tmp_path / "recovery.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))

    out = tmp_path / "recovery-out.jsonl"
    proc = suffice(
        "judge",
        str(source),
        "-o",
        str(out),
        "--gate",
        "recovery",
        "--threshold",
        "loose",
        "--format",
        "seed",
        *server,
        "--no-progress",
    )
    assert proc.returncode == EXIT_ITEM_ERRORS, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [str(r["id"]) for r in records]
    assert rows[-1]["error"]["field"] == "response"
    for row in rows[:-1]:
        jsonschema.validate(row["verdict"], SEED_SCHEMA)
        assert row["decision"]["route"] in {"deliver", "retrieve_more", "abstain", "human_review"}
        assert row["prompt_version"] == "recovery/v4"

    out = tmp_path / "adequacy-out.jsonl"
    proc = suffice(
        "judge",
        str(source),
        "-o",
        str(out),
        "--gate",
        "adequacy",
        "--rubric",
        "customer-support",
        *server,
        "--no-progress",
    )
    assert proc.returncode == EXIT_OK, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(records)
    for row in rows:
        verdict = row["verdict"]
        assert verdict["rubric"] == "customer-support@1.0.0"
        assert verdict["decision"]["decision"] in {"PASS", "FAIL"}
        assert 0 <= verdict["decision"]["composite_score"] <= 1
