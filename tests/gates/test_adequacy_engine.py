"""The adequacy gate on the real engine, every backend: rubric per item, decision in code."""

from __future__ import annotations

import json
import re
import shutil

import jsonschema
import pytest

from suffice.gates.adequacy.decision import RISK_MARGIN, decide
from suffice.gates.adequacy.gate import AdequacyGate
from suffice.gates.adequacy.grammar import AdequacyOutput, AdequacyVerdict, adequacy_constraint
from suffice.gates.adequacy.store import RubricStore, builtin_dir
from suffice.judge import Judge
from suffice.serving.engine_config import DEFAULT_BACKEND
from tests.conftest import load_records

pytestmark = pytest.mark.engine


@pytest.fixture(scope="session")
def rubric_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rubrics")
    for path in builtin_dir().glob("*.json"):
        shutil.copy(path, folder)
    bad = json.loads((folder / "customer-support@1.0.0.json").read_text())
    bad.update(name="zero-weights", weights={"factual_coverage": 0.0})
    (folder / "zero-weights@1.json").write_text(json.dumps(bad))
    return folder


#: Records that get an error row, and one with no chunks (a verdict without the model).
BAD = [
    {"id": "unknown-rubric", "question": "Q?", "chunks": [{"id": 0, "text": "x"}], "rubric": "nope"},
    {"id": "unknown-version", "question": "Q?", "chunks": [{"id": 0, "text": "x"}], "rubric": "legal-review@9"},
    {"id": "zero-weights", "question": "Q?", "chunks": [{"id": 0, "text": "x"}], "rubric": "zero-weights"},
    {"id": "dup", "question": "Q?", "chunks": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]},
]
EMPTY = {"id": "empty", "question": "Q?", "chunks": []}
#: A clinical question under the clinical rubric, whose criteria include critical ones (issue 49).
CLINICAL = {
    "id": "clinical",
    "question": "What is the adult dose of amoxicillin for acute otitis media, and who must not take it?",
    "chunks": [
        {
            "id": "g1",
            "text": "Acute otitis media in adults: amoxicillin 500 mg by mouth every 8 hours for 5 days. "
            "Do not give it to patients with a penicillin allergy.",
            "source": "national-antibiotic-guideline.pdf",
            "date": "2025-03-01",
        }
    ],
    "rubric": "clinical-guidance",
}


@pytest.fixture(scope="session")
def adequacy_judged(engine, rubric_dir):
    # Decoding is this gate's cost (about 35 s a verdict here): two real records (one
    # per rubric) on the other backends, four on the default one.
    records = load_records("squad2.jsonl", 3) + load_records("musique.jsonl", 1)
    records = records if engine.backend == DEFAULT_BACKEND else records[:2]
    records[1] = {**records[1], "rubric": "customer-support@1.0.0"}
    records += [CLINICAL, *BAD, EMPTY]
    store = RubricStore(rubric_dir)
    judge = Judge(engine, AdequacyGate(store, "legal-review"))
    return judge, store, records, judge.judge_batch(records)


@pytest.mark.any_backend
def test_rubric_and_input_errors_are_per_item(adequacy_judged):
    _, _, _, results = adequacy_judged
    errors = {r.id: r.error.field for r in results if r.error is not None}
    assert errors == {
        "unknown-rubric": "rubric",
        "unknown-version": "rubric",
        "zero-weights": "rubric.weights",
        "dup": "chunks[1].id",
    }


@pytest.mark.any_backend  # each backend's grammar: tests/grammars/test_backends.py
def test_verdicts_valid_and_decision_computed_from_the_rubric(adequacy_judged):
    judge, store, records, results = adequacy_judged
    verdicts = [(rec, r) for rec, r in zip(records, results, strict=True) if r.verdict is not None]
    assert len(verdicts) == len(records) - len(BAD)
    for record, result in verdicts:
        v = result.verdict
        assert isinstance(v, AdequacyVerdict)
        jsonschema.validate(v.model_dump(mode="json"), AdequacyVerdict.model_json_schema())
        rubric = store.get(record.get("rubric") or "legal-review")
        assert v.rubric == rubric.ref and v.risk_level == rubric.risk_level
        scores = v.scores()
        by_hand = sum(rubric.weight(d) * s for d, s in scores.items()) / sum(rubric.weights.values())
        assert v.decision.composite_score == pytest.approx(by_hand, abs=1e-6)
        threshold = min(1.0, rubric.pass_threshold + RISK_MARGIN[rubric.risk_level])
        floors_ok = all(scores[d] >= f for d, f in rubric.critical.items())
        minimums_ok = all(scores[d] >= rubric.minimum(d) for d in rubric.dimension_names)
        criteria_ok = all(c.score >= c.minimum for c in v.criteria)
        expected = by_hand >= threshold - 1e-9 and floors_ok and minimums_ok and criteria_ok
        assert (v.decision.decision == "PASS") == (expected and not v.decision.conservative_vetoes)
        assert (v.decision.route == "deliver") == (
            v.decision.decision == "PASS" and v.recommendation not in ("ESCALATE_TO_HUMAN", "FLAG_AS_UNANSWERABLE")
        )
        if result.raw_text is not None:
            assert v.p_model_pass is not None and 0.0 <= v.p_model_pass <= 1.0
            assert (v.p_model_pass if v.adequacy_decision == "PASS" else 1 - v.p_model_pass) > 0
            pattern = adequacy_constraint(rubric.dimension_names, criteria=len(rubric.criteria)).pattern
            assert re.fullmatch(pattern, result.raw_text)
            AdequacyOutput.model_validate(json.loads(result.raw_text))
    assert judge.stats.length_cutoffs == 0 and judge.stats.retry_failures == 0


@pytest.mark.any_backend  # each backend's grammar: tests/grammars/test_backends.py
def test_a_rubric_with_its_own_dimensions_yields_exactly_them(engine, tmp_path):
    """The model writes the rubric's own dimension names (the constraint generates them),
    and the composite is computed over them."""
    own = {"symptom_coverage": "whether every symptom in the question is addressed", "steps_present": "fix steps"}
    rubric = json.loads((builtin_dir() / "customer-support@1.0.0.json").read_text())
    rubric.update(
        name="own-dims",
        version="1",
        dimensions=own,
        weights={"symptom_coverage": 2.0, "steps_present": 1.0},
        critical={"steps_present": 0.3},
    )
    (tmp_path / "own-dims@1.json").write_text(json.dumps(rubric))
    store = RubricStore(tmp_path)
    [result] = Judge(engine, AdequacyGate(store, "own-dims")).judge_batch(load_records("squad2.jsonl", 1))
    assert result.verdict is not None, result.error
    v = result.verdict
    assert isinstance(v, AdequacyVerdict)
    assert list(v.dimensions) == list(own)
    scores = v.scores()
    by_hand = (2 * scores["symptom_coverage"] + scores["steps_present"]) / 3
    assert v.decision.composite_score == pytest.approx(by_hand, abs=1e-6)


@pytest.mark.any_backend  # each backend's grammar: tests/grammars/test_backends.py
def test_a_clinical_verdict_judges_each_criterion_of_its_rubric_and_routes_by_them(adequacy_judged):
    """The model scores exactly the clinical rubric's criteria, in order (the constraint writes their numbers), and
    the route is the one the decision computes from them: a critical criterion not met is a FAIL, whatever the
    dimensions say."""
    judge, store, records, results = adequacy_judged
    result = results[records.index(CLINICAL)]
    assert result.raw_text is not None, result.error
    v = result.verdict
    assert isinstance(v, AdequacyVerdict)
    rubric = store.get("clinical-guidance")
    assert v.rubric == rubric.ref
    assert [(c.criterion, c.text, c.critical, c.minimum) for c in v.criteria] == [
        (n, c.text, c.critical, c.minimum) for n, c in enumerate(rubric.criteria, 1)
    ]
    assert [c.met for c in v.criteria] == [c.score >= c.minimum for c in v.criteria]
    written = AdequacyOutput.model_validate(json.loads(result.raw_text))
    assert [(c.score, c.assessment) for c in written.criteria] == [(c.score, c.assessment) for c in v.criteria]
    # The decision and its route are the ones decide() computes from what the model wrote.
    assert v.decision == decide(written, rubric, question_truncated=v.question_truncated)
    assert judge.gate.route(v).route == v.decision.route
    critical_unmet = [c.criterion for c in v.criteria if c.critical and not c.met]
    assert v.decision.failed_critical_criteria == critical_unmet
    if critical_unmet:
        assert v.decision.decision == "FAIL" and v.decision.route != "deliver"
        assert f"critical criterion {critical_unmet[0]} not met" in v.decision.reason
