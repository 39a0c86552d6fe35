import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from suffice.gates.sufficiency.grammar import (
    IDS_KEY,
    RAGFLOW_SCHEMA,
    SufficiencyBounds,
    SufficiencyOutput,
    listed_ids,
    sufficiency_constraint,
    to_verdict,
)
from suffice.grammars.constraint import Segment
from suffice.grammars.regex import STRING_CHAR_MAX_BYTES
from tests.grammars.drawing import allowed_strings
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
        "useful_chunk_ids": [0, 2],
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
        ({"useful_chunk_ids": [0, 3]}, "a fourth chunk is not in a 3-chunk request"),
        ({"useful_chunk_ids": [2, 0]}, "not ascending"),
        ({"useful_chunk_ids": [0, 0]}, "a chunk named twice"),
        ({"useful_chunk_ids": ["0"]}, "strings instead of labels"),
        ({"useful_chunk_ids": [-1]}, "a negative label"),
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
        ({"useful_chunk_ids": []}, "sufficient with no useful chunk"),
        ({"reasoning": ""}, "no reasoning"),
    ],
)
def test_constraint_rejects_what_the_seed_forbids(overrides, why):
    assert not sufficiency_constraint(3).matches(output(**overrides)), why


def test_insufficient_branch_requires_missing_information():
    c = sufficiency_constraint(2)
    assert c.matches(output(is_sufficient=False, missing_information=["the year"], useful_chunk_ids=[]))


def test_constraints_are_shared_by_chunk_count():
    assert sufficiency_constraint(7) is sufficiency_constraint(7)
    assert sufficiency_constraint(7).pattern != sufficiency_constraint(8).pattern


@pytest.mark.parametrize("n", [1, 8, 64, 128])
def test_the_large_segment_is_the_same_for_every_chunk_count(n):
    assert sufficiency_constraint(n).first_segment() == sufficiency_constraint(1).first_segment()


@pytest.mark.parametrize(
    ("n", "ids", "id_pieces"),
    [
        (1, [0], ["0]}"]),
        (3, [0], ["0]}"]),
        (3, [0, 2], ["0,2]}"]),  # the whole list: one segment
        (80, [0, 3, 6, 9, 12, 15, 18, 21], ["0,3,6,9,12,15,18,21]}"]),  # the bound
    ],
)
def test_segments_compose_to_the_whole_output(n, ids, id_pieces):
    c = sufficiency_constraint(n)
    text = output(useful_chunk_ids=ids)
    pieces = c.segments_of(text)
    assert [segment.key for segment, _ in pieces][:3] == [
        "sufficiency/head",
        "sufficiency/decision",
        "sufficiency/after-true",
    ]
    assert "".join(piece for _, piece in pieces) == text
    assert [piece for _, piece in pieces[3:]] == id_pieces
    assert [segment.key for segment, _ in pieces if segment.logprobs] == ["sufficiency/decision"]


def test_each_id_segment_offers_only_labels_above_the_last():
    c = sufficiency_constraint(12)
    segment = c.next_segment(head_text() + "3")
    assert segment is not None
    assert re.fullmatch(segment.pattern, ",4")
    assert re.fullmatch(segment.pattern, ",11]}")  # the last label closes the list
    assert re.fullmatch(segment.pattern, "]}")
    assert not re.fullmatch(segment.pattern, ",3")
    assert not re.fullmatch(segment.pattern, ",2")
    assert not re.fullmatch(segment.pattern, ",12")


def test_the_id_segments_do_not_grow_with_the_output():
    c = sufficiency_constraint(64)
    segment = c.next_segment(head_text() + "60")
    assert segment is not None
    assert len(segment.pattern) < 40
    assert segment.per_request


def test_the_bound_on_useful_ids_closes_the_list():
    c = sufficiency_constraint(64)
    listed = ",".join(str(i) for i in range(B.USEFUL_MAX - 1))
    segment = c.next_segment(head_text() + listed)
    assert segment is not None
    assert re.fullmatch(segment.pattern, ",9]}")
    assert not re.fullmatch(segment.pattern, ",9")


def test_a_sufficient_decision_needs_a_first_useful_id():
    segment = sufficiency_constraint(5).next_segment(head_text())
    assert segment is not None
    assert segment.key == "ids/5/list/some"
    assert not re.fullmatch(segment.pattern, "]}")


def test_an_insufficient_decision_may_name_no_chunk():
    segment = sufficiency_constraint(5).next_segment(head_text(is_sufficient=False, missing_information=["x"]))
    assert segment is not None
    assert re.fullmatch(segment.pattern, "]}")


def test_no_chunk_shown_leaves_only_false():
    text = output().split('"is_sufficient":')[0] + '"is_sufficient":'
    segment = sufficiency_constraint(0).next_segment(text)
    assert segment is not None
    assert segment.pattern == "false"


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
    return output(**overrides).split('"useful_chunk_ids":[')[0] + '"useful_chunk_ids":['


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
        useful_chunk_ids=list(range(n))[-B.USEFUL_MAX :],
    )


@pytest.mark.parametrize("n", [0, 1, 10, 80])
def test_max_tokens_is_the_exact_worst_case(n):
    c = sufficiency_constraint(n)
    text = worst_case(n)
    assert c.matches(text)
    assert len(text.encode("utf-8")) == c.max_bytes
    assert c.max_tokens == c.max_bytes + 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_string_the_constraint_allows_is_a_valid_verdict(data):
    n = data.draw(st.integers(min_value=0, max_value=4))
    c = sufficiency_constraint(n)
    drawn = data.draw(allowed_strings(c.pattern))
    # The pattern allows the ids in any order (``check`` adds the order): put them in it.
    head, ids = drawn.rsplit(IDS_KEY, 1)
    labels = sorted({int(label) for label in ids.removesuffix("]}").split(",") if label})
    text = head + IDS_KEY + ",".join(map(str, labels)) + "]}"
    assert c.matches(text)
    assert len(text.encode("utf-8")) <= c.max_bytes
    parsed = SufficiencyOutput.model_validate(json.loads(text))
    assert parsed.is_sufficient == (not parsed.missing_information)
    assert all(label < n for label in parsed.useful_chunk_ids)
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
            useful_chunk_ids=[0, 2],
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
    text = output(useful_chunk_ids=[n - 1])
    pieces = c.segments_of(text, coarse=True)
    assert [segment.key for segment, _ in pieces] == ["sufficiency/coarse-head", f"ids/{n}/list/some"]
    assert "".join(piece for _, piece in pieces) == text


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_ascending_list_of_labels_is_generated_by_the_id_segments(data):
    n = data.draw(st.integers(min_value=1, max_value=130))
    labels = sorted(data.draw(st.sets(st.integers(min_value=0, max_value=n - 1), min_size=1, max_size=B.USEFUL_MAX)))
    c = sufficiency_constraint(n)
    text = output(useful_chunk_ids=labels)
    assert c.matches(text)
    pieces = c.segments_of(text)
    id_pieces = [piece for segment, piece in pieces if segment.per_request]
    assert json.loads("[" + "".join(id_pieces).removesuffix("}")) == labels
    for segment, piece in pieces:
        assert re.fullmatch(segment.pattern, piece.removeprefix(segment.prefix))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_label_listed_twice_or_out_of_order_is_refused(data):
    n = data.draw(st.integers(min_value=2, max_value=130))
    a = data.draw(st.integers(min_value=0, max_value=n - 1))
    b = data.draw(st.integers(min_value=0, max_value=a))
    assert not sufficiency_constraint(n).matches(output(useful_chunk_ids=[a, b]))


def test_the_id_list_is_one_speculative_segment_of_the_request_labels():
    segment = sufficiency_constraint(12).next_segment(head_text())
    assert segment is not None
    assert segment.speculative
    assert segment.per_request
    assert re.fullmatch(segment.pattern, "7,2,11]}")  # any order: settle cuts it
    assert not re.fullmatch(segment.pattern, "12]}")  # not a label of this request


def test_the_id_list_segment_holds_at_most_the_bound():
    segment = sufficiency_constraint(12).next_segment(head_text())
    assert segment is not None
    assert re.fullmatch(segment.pattern, ",".join(str(k) for k in range(B.USEFUL_MAX)) + "]}")
    assert not re.fullmatch(segment.pattern, ",".join(str(k) for k in range(B.USEFUL_MAX + 1)) + "]}")


def test_a_list_cut_off_after_a_comma_reads_as_its_ids():
    assert listed_ids(head_text() + "3,") == [3]


def test_an_ascending_id_list_is_kept_whole():
    c = sufficiency_constraint(12)
    text = head_text() + "2,5,11]}"
    assert c.settled(text, len(head_text())) == text


@pytest.mark.parametrize(
    ("listed", "kept"),
    [("2,5,3]}", "2,5"), ("4,4]}", "4"), ("9,1,2,3]}", "9"), ("0,1,2,2,7]}", "0,1,2")],
)
def test_an_id_list_out_of_order_is_cut_after_its_ascending_start(listed, kept):
    c = sufficiency_constraint(12)
    assert c.settled(head_text() + listed, len(head_text())) == head_text() + kept


def test_a_cut_at_the_last_label_closes_the_list():
    c = sufficiency_constraint(3)
    settled = c.settled(head_text() + "2,0]}", len(head_text()))
    assert settled == head_text() + "2]}"
    assert c.next_segment(settled) is None


def test_after_a_cut_only_labels_above_the_last_kept_may_follow():
    c = sufficiency_constraint(12)
    segment = c.next_segment(c.settled(head_text() + "2,5,3]}", len(head_text())))
    assert segment is not None
    assert not segment.speculative
    assert re.fullmatch(segment.pattern, ",6")
    assert not re.fullmatch(segment.pattern, ",3")


def test_settle_may_not_cut_into_an_earlier_segment():
    c = sufficiency_constraint(12)
    with pytest.raises(ValueError, match="before its segment began"):
        c.settled(head_text() + "2,5,3]}", len(head_text()) + 4)  # kept "2,5" ends before 4


def test_a_speculative_segment_cannot_carry_log_probabilities():
    with pytest.raises(ValueError, match="speculative"):
        Segment("a", 1, "test/speculative", logprobs=True, speculative=True)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_list_the_model_writes_ends_in_the_language(data):
    """What an engine does, in order: the speculative list, settle, then one id
    segment at a time taking the model's next wish above the last id (or the end)."""
    n = data.draw(st.integers(min_value=1, max_value=40))
    sufficient = data.draw(st.booleans())
    wished = data.draw(
        st.lists(st.integers(min_value=0, max_value=n - 1), min_size=int(sufficient), max_size=min(B.USEFUL_MAX, n))
    )
    c = sufficiency_constraint(n)
    overrides = {} if sufficient else {"is_sufficient": False, "missing_information": ["x"]}
    text = head_text(**overrides)
    segment = c.next_segment(text)
    assert segment is not None
    piece = ",".join(str(k) for k in wished) + "]}"
    assert re.fullmatch(segment.pattern, piece)
    start, text = len(text), text + piece
    text = c.settled(text, start)
    segment = c.next_segment(text)
    while segment is not None:
        last = (listed_ids(text) or [-1])[-1]
        options = [f",{k}" for k in wished if k > last] + [f",{k}]}}" for k in wished if k > last] + ["]}"]
        piece = next(option for option in options if re.fullmatch(segment.pattern, option))
        text += piece
        segment = c.next_segment(text)
    assert c.matches(text)
    kept = listed_ids(text)
    assert kept is not None
    start = min(len(wished), 1)  # the wished list's ascending start is kept
    while start < len(wished) and wished[start - 1] < wished[start]:
        start += 1
    assert kept[:start] == wished[:start]
