"""A recovery verdict queued for a person shows the response segment by segment, coloured by label, each with the
sources it cites: the reviewer sees which sentence failed (issue 49)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from fastapi.testclient import TestClient

from suffice.config import JudgeConfig
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.fakes import ScriptedEngine, recovery_reply
from tests.server.test_reviews import CLIENT_TOKEN, bearer, login, make_keys

RESPONSE = "Ada wrote the notes. Hello there! She wrote them <b>in 1843</b>. They cover loops."


def label(index: int, text: str) -> str | tuple[str, list[int]]:
    if "1843" in text:
        return "unsupported"
    if "loops" in text:
        return "partial", [1]
    return "no_claim" if text.startswith("Hello") else "supported"


def test_a_recovery_review_shows_each_segment_with_its_label_and_sources(tmp_path: Path):
    db = tmp_path / "audit.db"
    keys = make_keys(tmp_path / "reviewers", "alice")
    config = ServeConfig(
        judge=JudgeConfig(gate="recovery"), gates=("recovery",), audit_db=db, reviewer_keys=tmp_path / "reviewers"
    )
    service = GateService(config, ScriptedEngine(lambda request: recovery_reply(request, label)))
    client = TestClient(create_app(service, config, CLIENT_TOKEN), base_url="http://127.0.0.1")
    try:
        chunks = [{"id": 0, "text": "Ada wrote the notes.", "source": "ada.txt"}, {"id": 1, "text": "Loops."}]
        record = {"id": "ada", "question": "Who wrote the notes?", "response": RESPONSE, "chunks": chunks}
        judged = client.post("/v1/judge/recovery", json={"items": [record]}, headers=bearer(CLIENT_TOKEN.decode()))
        assert judged.status_code == 200, judged.text
        # The strict preset sends a partial verdict to a person.
        assert judged.json()["results"][0]["verdict"]["decision"]["rule"] == "partial_under_high_stakes"
        login(client, keys["alice"])
        page = client.get("/reviews/1").text
    finally:
        client.close()
        service.close()
    section = page.split("<h2>Response, segment by segment</h2>", 1)[1].split("</section>", 1)[0]
    rows = re.findall(r'<tr class="segment seg-(\w+)">(.*?)</tr>', section)
    cells = [(kind, re.findall(r"<td>(.*?)</td>", row)) for kind, row in rows]
    assert cells == [
        ("supported", ["0", "Ada wrote the notes.", "supported", "ada.txt"]),
        ("no_claim", ["1", "Hello there!", "no claim", "—"]),
        ("unsupported", ["2", html.escape("She wrote them <b>in 1843</b>.", quote=True), "NOT supported", "—"]),
        ("partial", ["3", "They cover loops.", "partly supported", "1"]),
    ]
    assert "<b>in 1843" not in page  # escaped as every value is
    # Shown once: not again among the verdict's flattened values.
    assert "segments[0]" not in page.split("<h2>Verdict and scores</h2>", 1)[1].split("</section>", 1)[0]
