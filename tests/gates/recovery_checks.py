"""What every recovery verdict must hold, whatever the model said and whichever entry point judged it (issue 49):
each segment of the response judged once, in order, citing only sources shown; the cited answer is the response
outside its markers; a delivered answer is the response with markers only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from suffice.gates.recovery.citing import UNSUPPORTED_MARKER, strip_markers
from suffice.gates.recovery.grammar import parse_citations
from suffice.gates.recovery.segments import segment

#: 20 sentences, one of them supported by BRIDGE: several windows at max_response_tokens=100.
WINDOWED = "The Sydney Harbour Bridge opened on 19 March 1932. " + " ".join(
    f"Its span number {i} was painted grey in the year {1900 + i}." for i in range(19)
)
SHORT = "The Sydney Harbour Bridge opened on 19 March 1932. It was painted pink by Napoleon."
BRIDGE = {"id": 0, "text": "The Sydney Harbour Bridge opened on 19 March 1932.", "source": "bridge.pdf"}
OTHER = {"id": 1, "text": "Sydney is the capital of New South Wales."}
QUESTION = "When did the Sydney Harbour Bridge open?"


def records() -> list[dict[str, Any]]:
    return [
        {"id": "short", "question": QUESTION, "response": SHORT, "chunks": [BRIDGE, OTHER]},
        {"id": "windowed", "question": QUESTION, "response": WINDOWED, "chunks": [BRIDGE, OTHER]},
    ]


def assert_judged_whole(
    record: Mapping[str, Any], verdict: Mapping[str, Any], marker: str = UNSUPPORTED_MARKER
) -> None:
    response = record["response"]
    segments = verdict["segments"]
    assert [(s["index"], s["start"], s["end"], s["text"]) for s in segments] == [
        (s.index, s.start, s.end, s.text) for s in segment(response)
    ]
    omitted = set(verdict.get("omitted_chunk_ids") or [])
    shown = {c.get("source") or str(c["id"]) for c in record["chunks"] if c["id"] not in omitted}
    for s in segments:
        assert set(s["sources"]) <= shown, s
        assert bool(s["sources"]) == (s["label"] in ("supported", "partial")), s
    assert strip_markers(verdict["cited_answer"]) == response
    assert parse_citations(verdict["cited_answer"]) == [source for s in segments for source in s["sources"]]
    assert not verdict["response_truncated"]
    if verdict["answer"] is not None:
        assert verdict["decision"]["route"] == "deliver"
        assert strip_markers(verdict["answer"], marker) == response
        assert set(parse_citations(verdict["answer"])) <= shown
