"""The audit trail of a recovery verdict holds every segment of the response with its label and sources, and the
cited answer, in ``suffice audit export``'s JSON Lines and CSV alike, whether ``suffice judge`` or ``suffice serve``
wrote it (issue 49)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK
from suffice.gates.recovery.segments import segment
from suffice.judge import Judge
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.fakes import ScriptedEngine, recovery_reply

RESPONSE = "Ada wrote the notes. She wrote them in 1843.\n\n- They describe loops."
RECORDS = [
    {
        "id": "ada",
        "question": "Who wrote the notes, and when?",
        "response": RESPONSE,
        "chunks": [{"id": 0, "text": "Ada wrote the notes.", "source": "ada.txt"}, {"id": 1, "text": "Loops."}],
    }
]


def label(index: int, text: str) -> str | tuple[str, list[int]]:
    return "unsupported" if "1843" in text else ("supported", [index % 2])


def engine() -> ScriptedEngine:
    return ScriptedEngine(lambda request: recovery_reply(request, label))


def by_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    source, db = tmp_path / "in.jsonl", tmp_path / "audit.db"
    source.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    scripted = engine()
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: Judge(scripted, config=config)))
    args = ["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--no-progress", "--gate", "recovery"]
    assert main([*args, "--audit-db", str(db)]) in (EXIT_OK,)
    return db


def by_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "audit.db"
    config = ServeConfig(judge=JudgeConfig(gate="recovery"), gates=("recovery",), audit_db=db)
    service = GateService(config, engine())
    client = TestClient(create_app(service, config), base_url="http://127.0.0.1")
    response = client.post("/v1/judge/recovery", json={"items": RECORDS})
    service.close()
    assert response.status_code == 200, response.text
    return db


@pytest.mark.parametrize("entry", [by_judge, by_serve], ids=["judge", "serve"])
def test_each_recovery_row_exports_every_segment_and_the_cited_answer(tmp_path, monkeypatch, entry):
    db = entry(tmp_path, monkeypatch)
    expected = [(s.index, s.start, s.end, s.text) for s in segment(RESPONSE)]
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"export.{fmt}"
        assert main(["audit", "export", str(db), "--format", fmt, "-o", str(out)]) == EXIT_OK
        text = out.read_text(encoding="utf-8")
        if fmt == "jsonl":
            [verdict] = [r["verdict"] for r in map(json.loads, text.splitlines())]
        else:
            [verdict] = [json.loads(r["verdict"]) for r in csv.DictReader(io.StringIO(text))]
        assert [(s["index"], s["start"], s["end"], s["text"]) for s in verdict["segments"]] == expected, fmt
        assert [(s["label"], s["sources"]) for s in verdict["segments"]] == [
            ("supported", ["ada.txt"]),
            ("unsupported", []),
            ("supported", ["ada.txt"]),
        ]
        assert verdict["cited_answer"] == (
            "Ada wrote the notes.[CITATION:ada.txt] She wrote them in 1843.\n\n- They describe loops.[CITATION:ada.txt]"
        )
        assert verdict["unsupported_claims"] == ["She wrote them in 1843."]
