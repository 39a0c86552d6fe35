"""The calibration report a person opens: report.html, one self-contained file, read in a real headless Chromium
from disk with nothing else beside it (the PNGs removed): the table holds report.json's numbers, every plot is
drawn from the page itself, and the page asks for nothing outside it."""

from __future__ import annotations

import json
from pathlib import Path

from suffice.calibration.report import build_report, write_report
from suffice.gates.sufficiency import SufficiencyGate
from tests.browser import browser
from tests.calibration.test_report import rows_and_records, with_tokens


def test_the_html_report_is_one_self_contained_page(tmp_path: Path):
    records, rows = rows_and_records()
    report = build_report(SufficiencyGate(), records, with_tokens(rows, [100, 120, 140, 160, 180, 0, 999]), 1.0)
    out = tmp_path / "calib"
    write_report(report, out)
    saved = json.loads((out / "report.json").read_text())
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "report.html").write_bytes((out / "report.html").read_bytes())  # without the PNGs or anything else
    with browser(tmp_path / "profile") as page:
        page.goto((alone / "report.html").as_uri())
        assert page.evaluate("document.title") == "Calibration report: sufficiency gate"
        cells = page.evaluate(
            "[...document.querySelectorAll('#scores tbody tr')].map(r => [...r.cells].map(c => c.innerText))"
        )
        assert [row[0] for row in cells] == list(saved["scores"])
        for row in cells:
            score = saved["scores"][row[0]]
            assert row[1] == str(score["n"]) and row[2] == f"{score['auc']:.3f}"
            assert row[3] == f"{score['best_f1']['threshold']:.3f}" and row[6] == f"{score['best_f1']['f1']:.3f}"
        images = page.evaluate(
            "[...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight, i.src.slice(0, 22)])"
        )
        assert len(images) == len(saved["plots"]) == len(saved["scores"])
        assert all(
            done and width > 500 and height > 200 and src == "data:image/png;base64,"
            for done, width, height, src in images
        )
        fetched = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        assert fetched == []
        assert "Output tokens per verdict: mean 140, max 180" in page.text()
