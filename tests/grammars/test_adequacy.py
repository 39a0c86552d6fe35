import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.gates.adequacy.grammar import (
    DIMENSIONS,
    MAX_CRITERIA,
    AdequacyBounds,
    AdequacyOutput,
    adequacy_constraint,
)
from tests.grammars.drawing import allowed_strings

B = AdequacyBounds
#: The criteria of the constraint these tests hold outputs to (the clinical rubric's four).
N = 4


def criteria(*numbers, score=0.8):
    return [{"criterion": n, "score": score, "assessment": "met"} for n in numbers or range(1, N + 1)]


def sample(**overrides):
    obj = {
        "adequacy_decision": "PASS",
        "adequacy_score": 0.8,
        "criteria": criteria(),
        "dimensions": {d: {"score": 0.8, "assessment": "ok"} for d in DIMENSIONS},
        "missing_information": [],
        "recommendation": "PROCEED_WITH_ANSWER",
        "rationale": "All criteria met.",
    }
    obj.update(overrides)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def test_seed_schema_accepted_and_one_shared_form():
    assert adequacy_constraint(criteria=N).matches(sample())
    assert adequacy_constraint(criteria=N) is adequacy_constraint(criteria=N)


@pytest.mark.parametrize(
    "overrides",
    [
        {"adequacy_score": 1.2},
        {"adequacy_decision": "MAYBE"},
        {"recommendation": "GUESS"},
        {"dimensions": {d: {"score": 0.8, "assessment": "ok"} for d in DIMENSIONS[:4]}},
        {"dimensions": {d: {"score": 2, "assessment": "ok"} for d in DIMENSIONS}},
        {"missing_information": ["a", "b", "c", "d"]},
        {"rationale": "x" * (B.RATIONALE_CHARS + 1)},
    ],
)
def test_out_of_bounds_rejected(overrides):
    assert not adequacy_constraint(criteria=N).matches(sample(**overrides))


@pytest.mark.parametrize(
    "numbers",
    [
        (1, 2, 4),  # one skipped: the wrong count too
        (1, 2, 3),  # one short
        (1, 2, 3, 4, 5),  # one invented
        (1, 2, 2, 4),  # one repeated in another's place
        (1, 3, 2, 4),  # two swapped
        (2, 1, 3, 4),
        (0, 1, 2, 3),  # numbered from 0
    ],
)
def test_criteria_skipped_repeated_reordered_or_miscounted_are_refused(numbers):
    c = adequacy_constraint(criteria=N)
    assert not c.matches(sample(criteria=criteria(*numbers)))
    assert c.matches(sample(criteria=criteria(1, 2, 3, 4)))


@pytest.mark.parametrize(
    "entry",
    [
        {"criterion": 1, "score": 1.5, "assessment": "met"},  # off the dimensions' scale
        {"criterion": 1, "score": 0.8, "assessment": ""},
        {"criterion": 1, "score": 0.8, "assessment": "x" * (B.CRITERION_ASSESSMENT_CHARS + 1)},
        {"criterion": 1, "score": 0.8, "assessment": "met", "met": True},  # no field of its own
        {"criterion": 1, "score": 0.8},
        {"score": 0.8, "assessment": "met"},
    ],
)
def test_a_criterion_is_its_number_a_score_on_the_dimensions_scale_and_a_bounded_assessment(entry):
    assert not adequacy_constraint(criteria=N).matches(sample(criteria=[entry, *criteria(2, 3, 4)]))


def test_the_criteria_come_between_the_score_and_the_dimensions():
    text = sample()
    assert text.index('"adequacy_score"') < text.index('"criteria"') < text.index('"dimensions"')
    moved = json.loads(text)
    moved = {k: moved[k] for k in ("adequacy_decision", "adequacy_score", "dimensions", "criteria")} | moved
    assert not adequacy_constraint(criteria=N).matches(json.dumps(moved, separators=(",", ":")))


def test_each_count_of_criteria_is_its_own_form_and_out_of_range_counts_are_refused():
    assert adequacy_constraint(criteria=3).key != adequacy_constraint(criteria=4).key
    assert adequacy_constraint(criteria=3).matches(sample(criteria=criteria(1, 2, 3)))
    assert not adequacy_constraint(criteria=3).matches(sample())
    for count in (0, MAX_CRITERIA + 1, True):
        with pytest.raises(ValueError, match="criteria"):
            adequacy_constraint(criteria=count)


def test_an_output_with_criteria_out_of_order_fails_validation_too():
    """An engine without the constraint (a server that ignores it) is held to the same order."""
    with pytest.raises(ValueError, match="numbered 1 to 4 in order"):
        AdequacyOutput.model_validate_json(sample(criteria=criteria(1, 3, 2, 4)))


def test_worst_case_is_exact():
    wide = "\u4e2d"
    text = sample(
        adequacy_decision="FAIL",
        adequacy_score=0.55,
        criteria=[
            {"criterion": n, "score": 0.55, "assessment": wide * B.CRITERION_ASSESSMENT_CHARS} for n in range(1, N + 1)
        ],
        dimensions={d: {"score": 0.55, "assessment": wide * B.ASSESSMENT_CHARS} for d in DIMENSIONS},
        missing_information=[wide * B.MISSING_CHARS] * B.MISSING_MAX,
        recommendation="FLAG_AS_UNANSWERABLE",
        rationale=wide * B.RATIONALE_CHARS,
    )
    c = adequacy_constraint(criteria=N)
    assert c.matches(text) and len(text.encode()) == c.max_bytes


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_allowed_string_is_a_valid_output(data):
    text = data.draw(allowed_strings(adequacy_constraint(criteria=N).pattern))
    assert adequacy_constraint(criteria=N).matches(text)
    out = AdequacyOutput.model_validate(json.loads(text))
    assert set(out.scores()) == set(DIMENSIONS)
    assert [c.criterion for c in out.criteria] == list(range(1, N + 1))
