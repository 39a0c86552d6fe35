"""Issue 37, as recovery v4 (issue 49) answers it, on the scripted engine: a response of any length is judged whole,
in windows of at most ``max_response_tokens``, so none is cut or goes to a person for its length; every row says how
it was judged; and the one bound on what the model writes for a segment, ``max_sources_per_segment``, is an option
shown in the prompt and enforced by the constraint.

(v3's ``max_claims`` and ``max_cited_sentences`` options and its ``at_limit`` field are gone: the model writes one
label per segment, every segment, and no claim list or answer of its own.)

The engine is scripted (whitespace tokens): these prove the gate's rules, not the model's judgement; the real
engine's long-response row is in test_recovery_engine.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.formats.verdicts import export
from suffice.gates import roles
from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.gate import RecoveryGate, RecoveryOptions
from suffice.gates.recovery.grammar import RecoveryBounds, RecoveryVerdict, recovery_constraint
from suffice.gates.recovery.segments import segment
from suffice.gates.registry import gate_class, gate_names
from suffice.judge import Judge
from suffice.prompts.windows import SEGMENT_FENCE_TOKENS, WINDOW_SEGMENTS
from suffice.records.item import Chunk
from suffice.serving.base import GenerationRequest
from suffice.settings import declared, json_schema
from tests.fakes import Labeller, ScriptedEngine, prompt_segments, recovery_reply

SHORT = "Ada Lovelace wrote the notes."
#: 400 words: far over a 16-token response limit on the scripted engine.
LONG = SHORT + " " + " ".join(f"Claim{i} is made here." for i in range(100))


def one_unsupported(index: int, text: str) -> str:
    """Every claim supported but Claim50 (under the loose threshold, a partial answer delivered with caveats)."""
    return "unsupported" if text.startswith("Claim50 ") else "supported"


def record(response: str, chunks: int = 1) -> dict[str, object]:
    return {
        "id": "ada",
        "question": "Who wrote the notes?",
        "response": response,
        "chunks": [
            {"id": i, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": f"ada{i}.txt"}
            for i in range(chunks)
        ],
    }


def judged(
    label: str | Labeller,
    response: str,
    options: Mapping[str, object] | None = None,
    chunks: int = 1,
    script: Any = None,
    **config: int,
) -> tuple[Judge, RecoveryVerdict, list[GenerationRequest]]:
    seen: list[GenerationRequest] = []

    def replied(request: GenerationRequest) -> str:
        seen.append(request)
        return script(request) if script is not None else recovery_reply(request, label)

    judge = Judge(ScriptedEngine(replied), config=JudgeConfig(gate="recovery", options=dict(options or {}), **config))
    result = judge.judge_batch([record(response, chunks)])[0]
    assert result.error is None, result.error
    assert isinstance(result.verdict, RecoveryVerdict)
    return judge, result.verdict, seen


@pytest.mark.parametrize(
    ("label", "threshold"), [("supported", "min_passages=1"), (one_unsupported, "loose")], ids=["sufficient", "partial"]
)
def test_a_response_longer_than_max_response_tokens_is_judged_whole_in_windows_and_delivered(label, threshold):
    judge, whole, seen = judged(label, SHORT, {"threshold": threshold}, max_response_tokens=16)
    assert whole.decision is not None and whole.decision.route == "deliver"
    assert whole.windows == len(seen) == 1 and not whole.response_truncated

    judge, long, seen = judged(label, LONG, {"threshold": threshold}, max_response_tokens=16)
    # Every segment judged once, in order, in windows of at most 16 (whitespace) tokens with their fence lines; a
    # segment longer than that alone is a window of its own.
    assert long.windows == len(seen) > 1 and not long.response_truncated
    shown = [prompt_segments(request) for request in seen]
    assert (
        [i for window in shown for i, _ in window]
        == list(range(len(segment(LONG))))
        == [s.index for s in long.segments]
    )
    for window in shown:
        cost = sum(len(text.split()) + SEGMENT_FENCE_TOKENS for _, text in window)
        assert cost <= 16 or len(window) == 1
    # The last word of the response was judged: nothing goes to a person for the response's length.
    assert long.segments[-1].text == "Claim99 is made here." and long.segments[-1].label == "supported"
    assert long.decision is not None and long.decision.route == "deliver"
    assert long.decision.rule is None and long.delivered_answer is not None
    routing = judge.gate.route(long)
    assert routing.route == "deliver" and routing.citations == ["ada0.txt"]
    assert routing.answer == long.delivered_answer
    assert strip_markers(routing.answer, judge.gate.unsupported_marker) == LONG


def test_a_window_judges_at_most_its_segment_bound_whatever_the_token_room():
    """Each segment adds its entry to the output's worst case: a window holds at most WINDOW_SEGMENTS of them."""
    many = " ".join(f"C{i}." for i in range(WINDOW_SEGMENTS * 2 + 1))
    _, verdict, seen = judged("supported", many, {"threshold": "min_passages=1"})
    assert [len(prompt_segments(request)) for request in seen] == [WINDOW_SEGMENTS, WINDOW_SEGMENTS, 1]
    assert [request.constraint.key for request in seen] == [
        f"recovery/1/n{WINDOW_SEGMENTS}",
        f"recovery/1/n{WINDOW_SEGMENTS}",
        "recovery/1/n1",
    ]
    assert verdict.windows == 3 and len(verdict.segments) == WINDOW_SEGMENTS * 2 + 1


@pytest.mark.parametrize("fmt", ["suffice", "seed"])
def test_every_row_says_how_the_response_was_judged(fmt):
    judge, verdict, seen = judged("supported", LONG, {"threshold": "min_passages=1"}, max_response_tokens=16)
    row = export(judge.gate, verdict, fmt)
    where = row["verdict"] if fmt == "suffice" else row["fitting"]
    assert where["windows"] == len(seen) > 1
    if fmt == "suffice":
        assert where["response_truncated"] is False
        assert [s["label"] for s in where["segments"]] == ["supported"] * len(segment(LONG))
    else:
        assert [s["label"] for s in row["segments"]] == ["supported"] * len(segment(LONG))


def test_the_seed_row_says_how_many_windows_judged_the_response():
    judge, verdict, _ = judged("supported", LONG, {"threshold": "min_passages=1"}, max_response_tokens=16)
    assert export(judge.gate, verdict, "seed")["fitting"]["windows"] == verdict.windows > 1


def test_a_record_without_evidence_judges_every_segment_unsupported_without_the_model():
    gate = RecoveryGate()
    verdict = gate.shortcut(roles.parse_item(gate, {**record(LONG), "chunks": []}))
    assert verdict is not None and verdict.windows == 0 and not verdict.response_truncated
    assert [s.text for s in verdict.segments] == [s.text for s in segment(LONG)]
    assert {s.label for s in verdict.segments} == {"unsupported"} and verdict.cited_answer == LONG


def test_sources_per_segment_are_an_option_shown_in_the_prompt_and_enforced():
    five = lambda index, text: ("supported", [0, 1, 2, 3, 4])  # noqa: E731
    _, verdict, seen = judged(five, SHORT, {"max_sources_per_segment": 5}, chunks=5)
    assert "(at most 5)" in seen[0].messages[0]["content"]
    assert verdict.segments[0].sources == [f"ada{i}.txt" for i in range(5)]
    _, _, seen = judged("supported", SHORT, chunks=5)
    assert "(at most 3)" in seen[0].messages[0]["content"]
    # Over the bound: outside the constraint (a model without one is refused, never read).
    four = json.dumps(
        {"classification": "SUFFICIENT", "segments": [[0, "supported", [0, 1, 2, 3]]]}, separators=(",", ":")
    )
    assert not seen[0].constraint.matches(four)
    with pytest.raises(AssertionError, match="VerdictError"):
        judged("supported", SHORT, chunks=5, script=lambda request: four)


def test_the_constraint_follows_the_bound():
    default = recovery_constraint(2, 0, 1)
    wider = recovery_constraint(2, 0, 1, RecoveryBounds(sources_max=6))
    assert wider.key != default.key and wider.max_tokens > default.max_tokens
    chunk = Chunk(id=0, text="x")
    assert RecoveryGate(bounds=RecoveryBounds(sources_max=6)).constraint_for([chunk]).key == "recovery/1/n1/k6"
    assert RecoveryGate().constraint_for([chunk]).key == "recovery/1/n1"


@pytest.mark.parametrize("value", [0, 9])
def test_a_bound_out_of_range_is_refused_by_name(value):
    option = "max_sources_per_segment"
    assert getattr(RecoveryOptions.parse("recovery", {option: 8}), option) == 8
    assert getattr(RecoveryOptions.parse("recovery", {option: 1}), option) == 1
    with pytest.raises(ConfigError) as info:
        RecoveryOptions.parse("recovery", {option: value})
    assert info.value.parameter == option
    with pytest.raises(ConfigError) as info:
        RecoveryBounds(sources_max=value)
    assert info.value.parameter == option


@pytest.mark.parametrize("option", ["max_claims", "max_cited_sentences"])
def test_the_v3_limits_are_refused_not_ignored(option):
    with pytest.raises(ConfigError) as info:
        RecoveryOptions.parse("recovery", {option: 3})
    assert info.value.parameter == option


def test_a_threshold_of_many_passages_is_reachable_by_a_response_of_several_segments():
    """v3 refused min_passages above max_cited_sentences (no verdict could meet it); v4 bounds no count of cited
    sources: segments together cite any of the sources shown."""
    JudgeConfig(gate="recovery", options={"threshold": "min_passages=99"})
    pairs = lambda index, text: ("supported", [2 * index, 2 * index + 1])  # noqa: E731
    _, verdict, _ = judged(pairs, "A is true. B is true.", {"threshold": "min_passages=4"}, chunks=4)
    assert verdict.decision is not None and verdict.decision.route == "deliver"
    assert verdict.decision.supporting_passages == 4


DOCS = Path(__file__).resolve().parents[2] / "docs" / "gates.md"


def option_schemas() -> dict[str, dict[str, Any]]:
    """Every registered gate's whole-number options: name -> JSON schema (default, minimum, maximum)."""
    out: dict[str, dict[str, Any]] = {}
    for name in gate_names():
        for d in declared(gate_class(name).options_model):
            if d.type is int:
                out[d.name] = json_schema(d)
    return out


def test_the_docs_state_the_defaults_and_ranges_the_options_have():
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    schemas = option_schemas()
    checked = 0
    for key, default in re.findall(r"`(\w+)` \(default (\d+)\)", text):
        if key in schemas:
            assert int(default) == schemas[key]["default"], f"docs/gates.md: {key} default {default}"
            checked += 1
    # Overlapping matches: a row's first column (the gate) must not hide its option's cell.
    for key, cell in re.findall(r"(?=\| `(\w+)` \| ([^|]*) \|)", text):
        if key in schemas and "default" in cell:
            s = schemas[key]
            assert f"{s['minimum']}-{s['maximum']} (default {s['default']}" in cell, f"docs/gates.md: {key}: {cell}"
            checked += 1
    assert checked >= 6  # the prose's mentions (the options' tables are docs/settings.md's, generated)


def test_the_docs_state_the_recovery_bounds_the_code_has():
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    b = RecoveryBounds
    assert (
        f"`supported` and `partial` name one to `max_sources_per_segment` (default {b.SOURCES_MAX}) source numbers"
    ) in text
    assert (
        f"the notice at most {b.NOTICE_CHARS} characters, the queries at most {b.QUERIES_MAX} of at most "
        f"{b.QUERY_CHARS}."
    ) in text
    assert (
        f"A window holds at most `max_response_tokens` (a `JudgeConfig` setting, default "
        f"{JudgeConfig.max_response_tokens}) tokens of segments, each counted with its fence line, at most "
        f"{b.WINDOW_SEGMENTS} segments"
    ) in text
