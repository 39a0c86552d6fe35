import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from suffice.grammars.regex import STRING_CHAR_MAX_BYTES
from suffice.grammars.sufficiency import (
    RAGFLOW_SCHEMA,
    SufficiencyBounds,
    SufficiencyOutput,
    sufficiency_constraint,
    to_verdict,
)
from tests.grammars.segments import assert_splits_into_segments

B = SufficiencyBounds


def output(**overrides):
    base = {
        "required_entities": [{"entity": "Paris", "covered": True}],
        "contradictions": [],
        "reasoning": "Chunk 0 names the capital.",
        "is_sufficient": True,
        "missing_information": [],
        "confidence": 0.9,
        "chunk_useful": "YNY",
    }
    base.update(overrides)
    return json.dumps(base, separators=(",", ":"), ensure_ascii=False)


def test_constraint_accepts_a_conforming_verdict():
    c = sufficiency_constraint(3)
    assert c.matches(output())
    assert c.key == "sufficiency/3"


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"chunk_useful": "YNYY"}, "a fourth chunk is not in a 3-chunk request"),
        ({"chunk_useful": "YN"}, "a chunk left out"),
        ({"chunk_useful": [0, 2]}, "ids instead of letters"),
        ({"chunk_useful": "YnY"}, "only Y and N"),
        ({"missing_information": ["a date"]}, "missing info while sufficient"),
        ({"is_sufficient": False}, "insufficient with nothing missing"),
        ({"confidence": 1.5}, "confidence above 1"),
        ({"confidence": 0.123}, "more than two decimals"),
        ({"required_entities": []}, "no entity"),
        ({"required_entities": [{"entity": "e", "covered": True}] * (B.ENTITIES_MAX + 1)}, "too many entities"),
        ({"reasoning": "x" * (B.REASONING_CHARS + 1)}, "reasoning too long"),
        ({"reasoning": 'say "hi"'}, "quote needs an escape"),
        ({"required_entities": [{"entity": "Paris", "covered": False}]}, "sufficient with an uncovered entity"),
        (
            {"required_entities": [{"entity": "a", "covered": True}, {"entity": "b", "covered": False}]},
            "sufficient with a later uncovered entity",
        ),
        ({"chunk_useful": "NNN"}, "sufficient with no useful chunk"),
        ({"reasoning": ""}, "no reasoning"),
    ],
)
def test_constraint_rejects_what_the_seed_forbids(overrides, why):
    assert not sufficiency_constraint(3).matches(output(**overrides)), why


def test_insufficient_branch_requires_missing_information():
    c = sufficiency_constraint(2)
    assert c.matches(output(is_sufficient=False, missing_information=["the year"], chunk_useful="NN"))


def test_constraints_are_shared_by_chunk_count():
    assert sufficiency_constraint(7) is sufficiency_constraint(7)
    assert sufficiency_constraint(7).pattern != sufficiency_constraint(8).pattern


@pytest.mark.parametrize("n", [1, 8, 64, 128])
def test_the_large_segment_is_the_same_for_every_chunk_count(n):
    assert sufficiency_constraint(n).first_segment() == sufficiency_constraint(1).first_segment()


@pytest.mark.parametrize("n", [1, 3, 80])
def test_segments_compose_to_the_whole_output(n):
    c = sufficiency_constraint(n)
    text = output(chunk_useful="".join("Y" if i % 3 == 0 else "N" for i in range(n)))
    pieces = c.segments_of(text)
    assert [segment.key for segment, _ in pieces] == [
        "sufficiency/head",
        "sufficiency/decision",
        "sufficiency/after-true",
        f"flags/{n}/some",
    ]
    assert "".join(piece for _, piece in pieces) == text
    assert pieces[-1][1] == '"' + "".join("Y" if i % 3 == 0 else "N" for i in range(n)) + '"}'
    assert [segment.key for segment, _ in pieces if segment.logprobs] == ["sufficiency/decision"]


def test_the_request_dependent_segment_is_small():
    c = sufficiency_constraint(64)
    after = c.next_segment(head_text().split('"is_sufficient":')[0] + '"is_sufficient":true')
    flags = c.next_segment(head_text(is_sufficient=False, missing_information=["x"]))
    assert flags is not None
    assert after is not None
    assert len(flags.pattern) < 60
    assert len(after.pattern) > 5 * len(flags.pattern)


def test_a_sufficient_decision_is_followed_by_flags_with_a_useful_chunk():
    flags = sufficiency_constraint(5).next_segment(head_text())
    assert flags.key == "flags/5/some"


def test_an_uncovered_entity_leaves_only_false_as_the_decision():
    text = output(required_entities=[{"entity": "a", "covered": False}]).split('"is_sufficient":')[0]
    decision = sufficiency_constraint(3).next_segment(text + '"is_sufficient":')
    assert decision.pattern == "false"


def test_the_reasoning_comes_before_the_decision():
    text = output()
    assert text.index('"reasoning"') < text.index('"is_sufficient"')


def test_the_output_model_refuses_an_uncovered_entity_judged_sufficient():
    raw = json.loads(output(required_entities=[{"entity": "a", "covered": False}]))
    with pytest.raises(ValidationError):
        SufficiencyOutput.model_validate(raw)


def head_text(**overrides) -> str:
    return output(**overrides).split('"chunk_useful":')[0] + '"chunk_useful":'


def worst_case(n: int) -> str:
    """The longest text the constraint allows, built by hand: every bound at its maximum."""
    wide = "\u4e2d"  # 3 bytes in UTF-8
    assert len(wide.encode()) == STRING_CHAR_MAX_BYTES
    return output(
        required_entities=[{"entity": wide * B.ENTITY_CHARS, "covered": False}] * B.ENTITIES_MAX,
        is_sufficient=False,
        missing_information=[wide * B.MISSING_CHARS] * B.MISSING_MAX,
        contradictions=[wide * B.CONTRADICTION_CHARS] * B.CONTRADICTIONS_MAX,
        confidence=0.55,
        reasoning=wide * B.REASONING_CHARS,
        chunk_useful="N" * n,
    )


@pytest.mark.parametrize("n", [0, 1, 10, 80])
def test_max_tokens_is_the_exact_worst_case(n):
    c = sufficiency_constraint(n)
    text = worst_case(n)
    assert c.matches(text)
    assert len(text.encode("utf-8")) == c.max_bytes
    assert c.max_tokens == c.max_bytes + 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_string_the_constraint_allows_is_a_valid_verdict(data):
    n = data.draw(st.integers(min_value=0, max_value=4))
    c = sufficiency_constraint(n)
    text = data.draw(st.from_regex(c.pattern, fullmatch=True))
    assert len(text.encode("utf-8")) <= c.max_bytes
    parsed = SufficiencyOutput.model_validate(json.loads(text))
    assert parsed.is_sufficient == (not parsed.missing_information)
    assert len(parsed.chunk_useful) == n
    assert_splits_into_segments(c, text)
    verdict = to_verdict(
        parsed,
        [f"c{i}" for i in range(n)],
        prompt_version="sufficiency/v2",
        truncated_chunk_ids=[],
        omitted_chunk_ids=[],
        question_truncated=False,
    )
    exported = verdict.to_ragflow()
    jsonschema.validate(exported, RAGFLOW_SCHEMA)
    assert set(exported["coverage"]) == set(exported["required_entities"])


def test_to_verdict_maps_ids_and_dedupes_entities():
    parsed = SufficiencyOutput.model_validate_json(
        output(
            required_entities=[
                {"entity": "A", "covered": True},
                {"entity": "B", "covered": False},
                {"entity": "A", "covered": False},
            ],
            is_sufficient=False,
            missing_information=["what B is"],
            chunk_useful="YNY",
        )
    )
    v = to_verdict(
        parsed,
        [10, 11, 12],
        prompt_version="sufficiency/v2",
        truncated_chunk_ids=[11],
        omitted_chunk_ids=[],
        question_truncated=False,
    )
    assert v.useful_chunk_ids == [10, 12]
    assert v.required_entities == ["A", "B"]
    assert v.coverage == {"A": False, "B": False}  # A is covered only if every mark says so
    exported = v.to_ragflow()
    assert exported["Sufficient Context"] is False and exported["is_sufficient"] is False
    jsonschema.validate(exported, RAGFLOW_SCHEMA)


def test_output_model_mirrors_grammar_bounds():
    with pytest.raises(ValidationError):
        SufficiencyOutput.model_validate_json(output(confidence=1.2))
    with pytest.raises(ValidationError):
        SufficiencyOutput.model_validate_json(output(extra_key=1))


@pytest.mark.parametrize("n", [1, 7])
def test_coarse_segments_compose_to_the_same_output(n):
    c = sufficiency_constraint(n)
    text = output(chunk_useful="Y" * n)
    pieces = c.segments_of(text, coarse=True)
    assert [segment.key for segment, _ in pieces] == ["sufficiency/coarse-head", f"flags/{n}/some"]
    assert "".join(piece for _, piece in pieces) == text
