"""Issue 37 on the scripted engine: a response checked only in part is never delivered as checked, every row says
how much of the response was checked, and the verdict's list limits are options reported in ``at_limit``.

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
from pydantic import ValidationError

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.formats.verdicts import export
from suffice.gates import roles
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate, RecoveryOptions
from suffice.gates.recovery.grammar import RecoveryBounds, RecoveryOutput, RecoveryVerdict, recovery_constraint
from suffice.gates.registry import gate_class, gate_names
from suffice.judge import Judge
from suffice.records.item import Chunk
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine

SHORT = "Ada Lovelace wrote the notes."
#: 400 words: far over a 16-token response limit on the scripted engine.
LONG = SHORT + " " + " ".join(f"Claim{i} is made here." for i in range(100))
SUFFICIENT = {
    "classification": "SUFFICIENT",
    "supported_claims": ["Ada Lovelace wrote the notes"],
    "unsupported_claims": [],
    "answer": "Ada Lovelace wrote the notes [CITATION:0]",
}
PARTIAL = {
    "classification": "PARTIALLY_SUFFICIENT",
    "supported_claims": ["a", "b", "c"],
    "unsupported_claims": ["d"],
    "abstention_notice": "No passage gives d.",
    "suggested_retrieval_queries": ["d"],
}


def record(response: str) -> dict[str, object]:
    return {
        "id": "ada",
        "question": "Who wrote the notes?",
        "response": response,
        "chunks": [{"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"}],
    }


def judged(
    output: Mapping[str, object], response: str, options: Mapping[str, object] | None = None, **config: int
) -> tuple[Judge, RecoveryVerdict, list[GenerationRequest]]:
    seen: list[GenerationRequest] = []

    def script(request: GenerationRequest) -> str:
        seen.append(request)
        return json.dumps(output, separators=(",", ":"))

    judge = Judge(ScriptedEngine(script), config=JudgeConfig(gate="recovery", options=dict(options or {}), **config))
    result = judge.judge_batch([record(response)])[0]
    assert result.error is None, result.error
    assert isinstance(result.verdict, RecoveryVerdict)
    return judge, result.verdict, seen


@pytest.mark.parametrize(
    ("output", "threshold"), [(SUFFICIENT, "min_passages=1"), (PARTIAL, "loose")], ids=["sufficient", "partial"]
)
def test_a_response_longer_than_max_response_tokens_goes_to_a_person_with_what_was_checked(output, threshold):
    judge, whole, _ = judged(output, SHORT, {"threshold": threshold}, max_response_tokens=16)
    assert whole.decision is not None and whole.decision.route == "deliver"
    assert (whole.response_chars, whole.response_chars_checked) == (len(SHORT), len(SHORT))

    judge, cut, seen = judged(output, LONG, {"threshold": threshold}, max_response_tokens=16)
    assert cut.response_truncated and cut.decision is not None
    assert cut.decision.route == "human_review" and not cut.delivered and cut.delivered_answer is None
    assert cut.response_chars == len(LONG)
    # The scripted engine's tokens are words: 12 words and the " [truncated]" mark were shown.
    shown = " ".join(LONG.split()[:12])
    assert cut.response_chars_checked == len(shown)
    assert shown + " [truncated]" in seen[0].messages[-1]["content"]
    assert cut.decision.rule == "response_not_fully_checked"
    assert cut.decision.reason.startswith(f"only {len(shown)} of {len(LONG)} characters")
    assert cut.decision.gap == [
        f"characters {len(shown) + 1}-{len(LONG)} of the response ({len(LONG) - len(shown)} of {len(LONG)}) "
        "were never checked"
    ]
    routing = judge.gate.route(cut)
    assert routing.route == "human_review" and routing.answer is None and routing.citations == []
    assert routing.rule == "response_not_fully_checked"


@pytest.mark.parametrize("fmt", ["suffice", "seed"])
def test_every_row_says_how_much_of_the_response_was_checked(fmt):
    judge, verdict, _ = judged(SUFFICIENT, LONG, {"threshold": "min_passages=1"}, max_response_tokens=16)
    row = export(judge.gate, verdict, fmt)
    where = row["verdict"] if fmt == "suffice" else row["fitting"]
    assert where["response_chars"] == len(LONG)
    assert 0 < where["response_chars_checked"] < len(LONG)
    assert where["response_truncated"] is True


def test_a_record_without_evidence_checked_nothing_of_its_response():
    gate = RecoveryGate()
    verdict = gate.shortcut(roles.parse_item(gate, {**record(SHORT), "chunks": []}))
    assert verdict is not None
    assert (verdict.response_chars, verdict.response_chars_checked) == (len(SHORT), 0)


def test_claims_and_cited_sentences_are_options_shown_in_the_prompt_and_enforced():
    _, verdict, seen = judged(PARTIAL, SHORT, {"max_claims": 5, "max_cited_sentences": 4})
    assert "At most 5 claims per list, 4 cited sentences, 3 queries." in seen[0].messages[0]["content"]
    assert verdict.at_limit == []
    _, verdict, _ = judged(PARTIAL, SHORT)
    assert verdict.at_limit == ["supported_claims"]  # 3 of the default 3
    # A verdict over the limit is refused (the constraint keeps the model within it; this is a model without one).
    with pytest.raises(ValidationError, match="supported_claims holds more than max_claims=2"):
        RecoveryOutput.model_validate(PARTIAL, context={"bounds": RecoveryBounds(claims_max=2)})
    with pytest.raises(AssertionError, match="VerdictError"):
        judged(PARTIAL, SHORT, {"max_claims": 2})
    too_many = {**SUFFICIENT, "answer": "One [CITATION:0]Two [CITATION:0]"}
    with pytest.raises(ValidationError, match="cites more than max_cited_sentences=1"):
        RecoveryOutput.model_validate(too_many, context={"bounds": RecoveryBounds(sentences=1)})


def test_a_full_answer_reports_its_cited_sentences_at_their_limit():
    answer = {**SUFFICIENT, "answer": "One [CITATION:0]Two [CITATION:0]"}
    _, verdict, _ = judged(answer, SHORT, {"threshold": "min_passages=1", "max_cited_sentences": 2})
    assert verdict.at_limit == ["answer"]
    row = export(RecoveryGate(bounds=RecoveryBounds(sentences=2)), verdict, "seed")
    assert row["at_limit"] == ["answer"]


def test_the_constraint_follows_the_limits():
    default = recovery_constraint(2)
    wider = recovery_constraint(2, RecoveryBounds(claims_max=6, sentences=5))
    assert wider.key != default.key and wider.max_tokens > default.max_tokens
    chunk = Chunk(id=0, text="x")
    gate = RecoveryGate(bounds=RecoveryBounds(claims_max=6, sentences=5))
    assert gate.constraint_for([chunk]).key == "recovery/1/c6/s5"


@pytest.mark.parametrize(
    ("option", "value"), [("max_claims", 0), ("max_claims", 9), ("max_cited_sentences", 0), ("max_cited_sentences", 9)]
)
def test_a_limit_out_of_range_is_refused_by_name(option, value):
    assert getattr(RecoveryOptions.parse("recovery", {option: 8}), option) == 8
    with pytest.raises(ConfigError) as info:
        RecoveryOptions.parse("recovery", {option: value})
    assert info.value.parameter == option


def test_a_threshold_no_verdict_can_meet_is_refused_when_the_configuration_is_made():
    with pytest.raises(ConfigError) as info:
        JudgeConfig(gate="recovery", options={"threshold": "min_passages=4"})
    assert info.value.parameter == "min_passages"
    assert "min_passages=4" in str(info.value) and "max_cited_sentences=3" in str(info.value)
    with pytest.raises(ConfigError, match="max_cited_sentences=2"):
        RecoveryGate(SufficiencyThreshold(min_passages=3), bounds=RecoveryBounds(sentences=2))
    # Raising the limit makes the same threshold reachable.
    JudgeConfig(gate="recovery", options={"threshold": "min_passages=4", "max_cited_sentences": 4})


DOCS = Path(__file__).resolve().parents[2] / "docs" / "gates.md"


def option_schemas() -> dict[str, dict[str, Any]]:
    """Every registered gate's whole-number options: name -> JSON schema (default, minimum, maximum)."""
    out: dict[str, dict[str, Any]] = {}
    for name in gate_names():
        for key, schema in gate_class(name).options_model.model_json_schema()["properties"].items():
            if schema.get("type") == "integer":
                out[key] = schema
    return out


def test_the_docs_state_the_defaults_and_ranges_the_options_have():
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    schemas = option_schemas()
    checked = 0
    for key, default in re.findall(r"`(\w+)` \(default (\d+)\)", text):
        if key in schemas:
            assert int(default) == schemas[key]["default"], f"docs/gates.md: {key} default {default}"
            checked += 1
    for key, cell in re.findall(r"\| `(\w+)` \| ([^|]*) \|", text):
        if key in schemas and "default" in cell:
            s = schemas[key]
            assert f"{s['minimum']}-{s['maximum']} (default {s['default']}" in cell, f"docs/gates.md: {key}: {cell}"
            checked += 1
    assert checked >= 8  # the option table's rows and the prose's mentions


def test_the_docs_state_the_recovery_bounds_the_code_has():
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    b = RecoveryBounds
    assert (
        f"each claim list holds at most `max_claims` (default {b.CLAIMS_MAX}) claims of at most {b.CLAIM_CHARS} "
        f"characters, the answer at most `max_cited_sentences` (default {b.ANSWER_SENTENCES}) sentences of at most "
        f"{b.SENTENCE_CHARS}, the abstention notice at most {b.NOTICE_CHARS} characters, the queries at most "
        f"{b.QUERIES_MAX} of at most {b.QUERY_CHARS}."
    ) in text
    assert f"default {JudgeConfig.max_response_tokens})" in text
