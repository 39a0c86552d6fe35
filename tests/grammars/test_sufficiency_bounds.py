"""Issue 30 at the constraint: bounds as options, worded free text, ``false`` names what is missing."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.gates.sufficiency.grammar import (
    IDS_KEY,
    SufficiencyBounds,
    SufficiencyOutput,
    sufficiency_constraint,
)
from suffice.grammars.regex import STRING_CHAR_MAX_BYTES
from tests.grammars.drawing import allowed_strings
from tests.grammars.segments import assert_splits_into_segments
from tests.grammars.test_sufficiency import output

B = SufficiencyBounds

#: The demo's bad verdict: insufficient, every entity covered, nothing named as missing.
COMMAS = output(
    required_entities=[{"entity": "Paris", "covered": True}],
    is_sufficient=False,
    missing_information=[",", ",", ","],
    useful_chunk_ids=[],
)


def entities(n: int, covered: bool = True) -> list[dict[str, object]]:
    return [{"entity": f"Entity {i}", "covered": covered} for i in range(n)]


def test_five_entities_fit_the_default_bounds():
    assert B.ENTITIES_MAX >= 5
    assert sufficiency_constraint(3).matches(output(required_entities=entities(5)))


def test_twelve_useful_chunks_fit_when_the_option_allows_them():
    twelve = SufficiencyBounds(useful_max=12)
    text = output(useful_chunk_ids=list(range(12)))
    assert not sufficiency_constraint(20).matches(text)
    assert sufficiency_constraint(20, twelve).matches(text)
    assert not sufficiency_constraint(20, twelve).matches(output(useful_chunk_ids=list(range(13))))


def test_the_entity_bound_is_the_option():
    three = SufficiencyBounds(entities_max=3)
    assert sufficiency_constraint(3, three).matches(output(required_entities=entities(3)))
    assert not sufficiency_constraint(3, three).matches(output(required_entities=entities(4)))
    nine = SufficiencyBounds(entities_max=9)
    assert sufficiency_constraint(3, nine).matches(output(required_entities=entities(9)))


def test_the_defaults_keep_the_keys_and_other_bounds_name_theirs():
    assert sufficiency_constraint(3, SufficiencyBounds()) is sufficiency_constraint(3)
    assert sufficiency_constraint(3).key == "sufficiency/3"
    other = sufficiency_constraint(3, SufficiencyBounds(entities_max=9, useful_max=12))
    assert other.key == "sufficiency/3/e9/u12"
    assert other.first_segment().key == "sufficiency/head/e9"
    assert other.first_segment(coarse=True).key == "sufficiency/coarse-head/e9"
    # Equal keys mean equal patterns: the head for other bounds is a different compiled form.
    assert other.first_segment().pattern != sufficiency_constraint(3).first_segment().pattern


def test_the_id_list_key_names_a_bound_only_where_it_changes_the_pattern():
    text = output(useful_chunk_ids=[0]).split(IDS_KEY)[0] + IDS_KEY
    small = sufficiency_constraint(5, SufficiencyBounds(useful_max=12)).next_segment(text)
    large = sufficiency_constraint(20, SufficiencyBounds(useful_max=12)).next_segment(text)
    assert small is not None and small.key == "ids/5/list/some"  # 5 chunks: 12 or 8, the same list
    assert large is not None and large.key == "ids/20/list/some/u12"


@pytest.mark.parametrize(("entities_max", "useful_max"), [(1, 1), (4, 8), (9, 12), (16, 64)])
def test_max_bytes_grows_with_the_bounds_and_is_the_exact_worst_case(entities_max, useful_max):
    bounds = SufficiencyBounds(entities_max=entities_max, useful_max=useful_max)
    n = 80
    c = sufficiency_constraint(n, bounds)
    wide = "\u4e2d"
    assert len(wide.encode()) == STRING_CHAR_MAX_BYTES
    text = output(
        required_entities=[{"entity": wide * B.ENTITY_CHARS, "covered": False}] * entities_max,
        is_sufficient=False,
        missing_information=[wide * B.MISSING_CHARS] * B.MISSING_MAX,
        contradictions=[wide * B.CONTRADICTION_CHARS] * B.CONTRADICTIONS_MAX,
        confidence=0.55,
        reasoning=wide * B.REASONING_CHARS,
        useful_chunk_ids=list(range(n))[-useful_max:],
    )
    assert c.matches(text)
    assert len(text.encode("utf-8")) == c.max_bytes
    assert c.max_tokens == c.max_bytes + 1
    assert_splits_into_segments(c, text)


def test_max_tokens_grows_with_each_option():
    base = sufficiency_constraint(80).max_tokens
    assert sufficiency_constraint(80, SufficiencyBounds(entities_max=B.ENTITIES_MAX + 1)).max_tokens > base
    assert sufficiency_constraint(80, SufficiencyBounds(useful_max=B.USEFUL_MAX + 1)).max_tokens > base


@pytest.mark.parametrize(("entities_max", "useful_max"), [(0, 8), (17, 8), (5, 0), (5, 65)])
def test_bounds_outside_their_range_are_refused_by_name(entities_max, useful_max):
    name = "max_entities" if entities_max != 5 else "max_useful_chunks"
    with pytest.raises(ValueError, match=name):
        SufficiencyBounds(entities_max=entities_max, useful_max=useful_max)


def test_the_demos_insufficient_verdict_naming_only_commas_is_refused():
    c = sufficiency_constraint(3)
    assert not c.matches(COMMAS)
    assert c.matches(COMMAS.replace('[",",",",","]', '["the year of the treaty"]'))


@pytest.mark.parametrize(
    "overrides",
    [
        {"is_sufficient": False, "missing_information": [","], "useful_chunk_ids": []},
        {"is_sufficient": False, "missing_information": ["the year", "--"], "useful_chunk_ids": []},
        {"is_sufficient": False, "missing_information": ["...."], "useful_chunk_ids": []},
        {"contradictions": [", ,"]},
        {"reasoning": "...."},
        {"required_entities": [{"entity": ",", "covered": True}]},
        {
            "required_entities": [{"entity": "?", "covered": False}],
            "is_sufficient": False,
            "missing_information": ["x"],
            "useful_chunk_ids": [],
        },
    ],
)
def test_every_free_text_item_holds_a_word(overrides):
    assert not sufficiency_constraint(3).matches(output(**overrides))


@pytest.mark.parametrize(
    "text",
    ["x", "7", "(a) the year", "$5 million", "\u00bfQu\u00e9?", "\u4e2d\u56fd", "-- a date", "\u00e9t\u00e9"],
)
def test_words_in_any_script_and_after_a_little_punctuation_are_accepted(text):
    overrides = {"is_sufficient": False, "missing_information": [text], "useful_chunk_ids": []}
    assert sufficiency_constraint(3).matches(output(**overrides))
    assert sufficiency_constraint(3).matches(output(reasoning=text, contradictions=[text]))


def test_false_always_names_what_is_missing_even_with_an_uncovered_entity():
    uncovered = [{"entity": "the treaty", "covered": False}]
    c = sufficiency_constraint(3)
    assert not c.matches(output(required_entities=uncovered, is_sufficient=False, useful_chunk_ids=[]))
    assert c.matches(
        output(
            required_entities=uncovered, is_sufficient=False, missing_information=["the treaty"], useful_chunk_ids=[]
        )
    )


def test_the_output_model_refuses_what_the_constraint_refuses():
    with pytest.raises(ValueError, match="names nothing"):
        SufficiencyOutput.model_validate(json.loads(COMMAS))
    five = json.loads(output(required_entities=entities(5), useful_chunk_ids=list(range(9))))
    with pytest.raises(ValueError, match="max_useful_chunks=8"):
        SufficiencyOutput.model_validate(five)
    assert SufficiencyOutput.model_validate(five, context={"bounds": SufficiencyBounds(useful_max=9)})
    with pytest.raises(ValueError, match="max_entities=4"):
        SufficiencyOutput.model_validate(five, context={"bounds": SufficiencyBounds(entities_max=4, useful_max=9)})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_under_other_bounds_every_allowed_string_is_a_valid_verdict_split_into_segments(data):
    bounds = SufficiencyBounds(
        entities_max=data.draw(st.integers(min_value=1, max_value=8)),
        useful_max=data.draw(st.integers(min_value=1, max_value=12)),
    )
    n = data.draw(st.integers(min_value=0, max_value=14))
    c = sufficiency_constraint(n, bounds)
    drawn = data.draw(allowed_strings(c.pattern))
    head, ids = drawn.rsplit(IDS_KEY, 1)
    labels = sorted({int(label) for label in ids.removesuffix("]}").split(",") if label})
    text = head + IDS_KEY + ",".join(map(str, labels)) + "]}"
    assert c.matches(text)
    parsed = SufficiencyOutput.model_validate(json.loads(text), context={"bounds": bounds})
    if not parsed.is_sufficient:
        assert parsed.missing_information  # false names what is missing
    assert_splits_into_segments(c, text)
