import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.gates.adequacy.grammar import DIMENSIONS, AdequacyBounds, AdequacyOutput, adequacy_constraint
from tests.grammars.drawing import allowed_strings

B = AdequacyBounds


def sample(**overrides):
    obj = {
        "adequacy_decision": "PASS",
        "adequacy_score": 0.8,
        "dimensions": {d: {"score": 0.8, "assessment": "ok"} for d in DIMENSIONS},
        "missing_information": [],
        "recommendation": "PROCEED_WITH_ANSWER",
        "rationale": "All criteria met.",
    }
    obj.update(overrides)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def test_seed_schema_accepted_and_one_shared_form():
    assert adequacy_constraint().matches(sample())
    assert adequacy_constraint() is adequacy_constraint()


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
    assert not adequacy_constraint().matches(sample(**overrides))


def test_worst_case_is_exact():
    wide = "\u4e2d"
    text = sample(
        adequacy_decision="FAIL",
        adequacy_score=0.55,
        dimensions={d: {"score": 0.55, "assessment": wide * B.ASSESSMENT_CHARS} for d in DIMENSIONS},
        missing_information=[wide * B.MISSING_CHARS] * B.MISSING_MAX,
        recommendation="FLAG_AS_UNANSWERABLE",
        rationale=wide * B.RATIONALE_CHARS,
    )
    c = adequacy_constraint()
    assert c.matches(text) and len(text.encode()) == c.max_bytes


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_allowed_string_is_a_valid_output(data):
    text = data.draw(allowed_strings(adequacy_constraint().pattern))
    assert adequacy_constraint().matches(text)
    out = AdequacyOutput.model_validate(json.loads(text))
    assert set(out.scores()) == set(DIMENSIONS)
