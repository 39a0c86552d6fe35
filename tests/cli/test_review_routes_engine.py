"""On the real engine: ``suffice judge --audit-db`` queues a record that a high-stakes threshold sends
to a person.  Through the session's vLLM server (no engine of its own).

The record is forced, not the model: one chunk under ``strict`` (two supporting passages) with no
retrieval left leaves no verdict that delivers: SUFFICIENT misses the passages, PARTIALLY_SUFFICIENT
is high-stakes, INSUFFICIENT abstains under high stakes, so every class the model may choose goes to a
person, each by its rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suffice.audit import AuditLog
from suffice.exceptions import EXIT_OK
from tests.vllm_server import through

pytestmark = pytest.mark.engine

RULES = {"partial_under_high_stakes", "abstained_high_stakes"}


def test_a_forced_high_stakes_record_lands_in_the_review_queue(tmp_path: Path, vllm_server: str) -> None:
    record = {
        "id": "forced",
        "question": "Who wrote the notes on the Analytical Engine, and in which year?",
        "chunks": [{"id": "ada", "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "a"}],
        "response": "Ada Lovelace wrote the notes in 1843.",
        "retrieval_exhausted": True,
    }
    source, out, db = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "audit.db"
    source.write_text(json.dumps(record) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "suffice.cli.main",
            "judge",
            str(source),
            "-o",
            str(out),
            "--gate",
            "recovery",
            "--threshold",
            "strict",
            "--audit-db",
            str(db),
            "--no-progress",
            *through(vllm_server),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    decision = row["verdict"]["decision"]
    assert decision["route"] == "human_review" and decision["rule"] in RULES
    log = AuditLog(db)
    try:
        [review] = log.reviews()
        [evaluation] = list(log.rows())
    finally:
        log.close()
    payload = json.loads(review["payload"])
    assert payload["rule"] == decision["rule"] and review["reason"].startswith(decision["rule"] + ": ")
    assert payload["question"] == record["question"] and payload["response"] == record["response"]
    assert payload["verdict"]["classification"] == row["verdict"]["classification"]
    assert review["evaluation_seq"] == evaluation["seq"] and evaluation["decision"] == "human_review"
    assert "1 record(s) sent to a person: queued for review" in proc.stderr
