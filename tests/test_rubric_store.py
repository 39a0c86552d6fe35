import json

import pytest

from suffice.exceptions import InputError, RubricError
from suffice.gates.adequacy.grammar import MAX_CRITERIA
from suffice.gates.adequacy.store import DEFAULT_CRITERION_MINIMUM, Criterion, RubricStore


def write(folder, name, version, **overrides):
    doc = {
        "name": name,
        "version": version,
        "use_case": "u",
        "risk_level": "LOW",
        "criteria": ["c"],
        "weights": {"factual_coverage": 1.0},
        "critical": {},
        "pass_threshold": 0.5,
    }
    doc.update(overrides)
    (folder / f"{name}@{version}.json").write_text(json.dumps(doc))


def test_builtin_rubrics():
    store = RubricStore()
    names = {n for n, _ in store.refs()}
    assert {"legal-review", "clinical-guidance", "customer-support"} <= names
    assert store.get("legal-review").risk_level == "HIGH"
    assert store.get("customer-support@1.0.0").ref == "customer-support@1.0.0"


def test_newest_version_when_none_given(tmp_path):
    for v in ("1.2.0", "1.10.0", "1.9.3"):
        write(tmp_path, "faq", v, pass_threshold=0.1)
    store = RubricStore(tmp_path)
    assert store.get("faq").version == "1.10.0"
    assert store.get("faq@1.2.0").version == "1.2.0"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"weights": {"factual_coverage": 0.0}}, "rubric.weights"),
        ({"weights": {"factual_coverage": -1.0, "source_authority": 0.5}}, "rubric.weights"),
        ({"weights": {"vibes": 1.0}}, "rubric.weights"),
        ({"weights": {"factual_coverage": float("inf")}}, "rubric.weights"),
        ({"weights": {"factual_coverage": 1e308, "source_authority": 1e308}}, "rubric.weights"),
        ({"risk_level": "EXTREME"}, "rubric.risk_level"),
        ({"pass_threshold": 1.5}, "rubric.pass_threshold"),
        ({"critical": {"factual_coverage": 2}}, "rubric.critical"),
        ({"criteria": []}, "rubric.criteria"),
        ({"criteria": [f"c{i}" for i in range(MAX_CRITERIA + 1)]}, "rubric.criteria"),
        ({"criteria": ["  "]}, "rubric.criteria.0.text"),
        ({"criteria": ["c", {"critical": True}]}, "rubric.criteria.1.text"),
        ({"criteria": [{"text": "c", "critical": "yes please"}]}, "rubric.criteria.0.critical"),
        ({"criteria": [{"text": "c", "minimum": 1.5}]}, "rubric.criteria.0.minimum"),
        ({"criteria": [{"text": "c", "weight": 2}]}, "rubric.criteria.0.weight"),
        ({"extra": 1}, "rubric.extra"),
    ],
)
def test_bad_rubrics_name_the_field(tmp_path, overrides, field):
    write(tmp_path, "bad", "1", **overrides)
    with pytest.raises(RubricError) as info:
        RubricStore(tmp_path).get("bad")
    assert info.value.field == field
    assert isinstance(info.value, InputError)


def test_unknown_rubric_and_version(tmp_path):
    write(tmp_path, "faq", "1")
    store = RubricStore(tmp_path)
    with pytest.raises(RubricError, match="unknown rubric 'nope'") as info:
        store.get("nope")
    assert info.value.field == "rubric"
    with pytest.raises(RubricError, match="no version '2'"):
        store.get("faq@2")


def test_a_criterion_is_its_text_alone_or_an_object_that_may_mark_it_critical(tmp_path):
    write(tmp_path, "mixed", "1", criteria=["plain", {"text": "vital", "critical": True, "minimum": 0.7}])
    rubric = RubricStore(tmp_path).get("mixed")
    assert rubric.criteria == [
        Criterion(text="plain", critical=False, minimum=DEFAULT_CRITERION_MINIMUM),
        Criterion(text="vital", critical=True, minimum=0.7),
    ]


def test_the_clinical_rubric_marks_its_safety_criteria_critical():
    """Contraindications, the patient population and dosages with units: the seed's own clinical examples of what
    a rubric must require ("explicit mention of contraindications"), each a FAIL when unmet."""
    criteria = RubricStore().get("clinical-guidance").criteria
    assert [c.critical for c in criteria] == [False, True, True, True]
    assert "Contraindications" in criteria[1].text and "Dosages" in criteria[3].text
