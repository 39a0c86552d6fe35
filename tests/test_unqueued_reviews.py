"""No silent routes (issue 48): a Python ``Judge`` with nobody to queue its routes to a person says how many it
sent, once per batch; whoever queues them (the Pipeline, an integration with an audit log, the batch run, the
service) takes that over.  Scripted engine: the subject is the harness, not generation."""

from __future__ import annotations

import logging

from suffice.audit import AuditLog
from suffice.config import JudgeConfig
from suffice.integrations.gating import DocumentGate, Evidence
from suffice.judge import Judge
from tests.audit.test_routes_reach_a_person import CHUNK, PARTIAL, QUESTION, RESPONSE, record
from tests.fakes import ScriptedEngine


def partial_judge() -> Judge:
    return Judge(ScriptedEngine(PARTIAL), config=JudgeConfig(gate="recovery", cache=False))


def test_a_judge_with_no_queue_says_how_many_went_to_a_person_once_per_batch(caplog):
    judge = partial_judge()
    with caplog.at_level(logging.WARNING, logger="suffice"):
        judge.judge_batch([record("a"), record("b"), record("c")])
    said = [r.getMessage() for r in caplog.records if "routed to a person" in r.getMessage()]
    assert said == [
        "3 of 3 record(s) routed to a person (human_review), but this Judge has no review queue: give the "
        "Pipeline or the integration an audit log (audit=...), or judge with suffice judge --audit-db"
    ]


def test_a_judge_for_other_options_says_it_too(caplog):
    judge = partial_judge()
    with caplog.at_level(logging.WARNING, logger="suffice"):
        judge.judge_batch([record("a")], options={"threshold": "strict"})
    assert sum("routed to a person" in r.getMessage() for r in caplog.records) == 1


def test_nothing_is_said_when_nothing_went_to_a_person(caplog):
    from tests.decisions.test_delivery_earned import CHUNKS, SUFFICIENCY

    judge = Judge(ScriptedEngine(lambda request: SUFFICIENCY), config=JudgeConfig(cache=False))
    with caplog.at_level(logging.WARNING, logger="suffice"):
        judge.judge_batch([{"id": "q", "question": QUESTION, "chunks": CHUNKS}])
    assert not [r for r in caplog.records if "routed to a person" in r.getMessage()]


def test_an_integration_with_an_audit_log_queues_instead(tmp_path, caplog):
    judge = partial_judge()
    log = AuditLog(tmp_path / "audit.db")
    gate = DocumentGate(judge, on_insufficient="empty", audit=log)
    with caplog.at_level(logging.WARNING, logger="suffice"):
        kept, outcome = gate.select(QUESTION, [Evidence(CHUNK["text"], id="ada", source="ada.txt")], RESPONSE)
    assert kept == [] and outcome is not None and outcome.dropped == [0]
    assert not [r for r in caplog.records if "routed to a person" in r.getMessage()]
    assert len(log.reviews()) == 1
    log.close()


def test_the_audit_row_records_the_policy_that_dropped_the_documents(tmp_path):
    import json as _json

    log = AuditLog(tmp_path / "audit.db")
    gate = DocumentGate(partial_judge(), on_insufficient="keep", audit=log)
    kept, outcome = gate.select(QUESTION, [Evidence(CHUNK["text"], id="ada", source="ada.txt")], RESPONSE)
    assert kept == [] and outcome is not None and outcome.policy == "human_review: on_review='empty'"
    [row] = list(log.rows())
    settings = row["settings"] if isinstance(row["settings"], dict) else _json.loads(row["settings"])
    assert (row["decision"], settings["on_insufficient"], settings["on_review"]) == ("human_review", "keep", "empty")
    log.close()
