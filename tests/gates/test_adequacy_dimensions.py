"""A rubric names its own dimensions: the prompt lists them, the constraint generates
exactly them, the composite and critical floors are computed over them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from suffice.exceptions import RubricError
from suffice.gates.adequacy.gate import AdequacyGate
from suffice.gates.adequacy.grammar import DIMENSIONS, AdequacyVerdict, adequacy_constraint
from suffice.gates.adequacy.store import RubricStore, builtin_dir, load_rubric_file
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine

OWN = {"symptom_coverage": "whether every symptom is addressed", "product_version_match": "the version matches"}


def own_rubric(**changes: Any) -> dict[str, Any]:
    return {
        "name": "support",
        "version": "1",
        "use_case": "customer support",
        "risk_level": "LOW",
        "criteria": ["the steps fix the symptom"],
        "dimensions": OWN,
        "weights": {"symptom_coverage": 3.0, "product_version_match": 1.0},
        "critical": {"product_version_match": 0.5},
        "pass_threshold": 0.6,
        **changes,
    }


@pytest.fixture
def store(tmp_path: Path) -> RubricStore:
    for path in builtin_dir().glob("*.json"):
        shutil.copy(path, tmp_path)
    (tmp_path / "support@1.json").write_text(json.dumps(own_rubric()))
    return RubricStore(tmp_path)


def answer(scores: dict[str, float], criteria: int = 1) -> str:
    return json.dumps(
        {
            "adequacy_decision": "PASS",
            "adequacy_score": 0.7,
            "criteria": [{"criterion": n, "score": 0.9, "assessment": "a"} for n in range(1, criteria + 1)],
            "dimensions": {d: {"score": s, "assessment": "a"} for d, s in scores.items()},
            "missing_information": [],
            "recommendation": "PROCEED_WITH_ANSWER",
            "rationale": "r",
        },
        separators=(",", ":"),
    )


RECORD = {"id": "q", "question": "Why does it crash?", "chunks": [{"id": 0, "text": "Update to 2.1."}]}


def test_a_rubric_with_its_own_dimensions_is_judged_over_them(store: RubricStore) -> None:
    seen: list[GenerationRequest] = []

    def script(request: GenerationRequest) -> str:
        seen.append(request)
        return answer({"symptom_coverage": 0.8, "product_version_match": 0.4})

    judge = Judge(ScriptedEngine(script), AdequacyGate(store, "support"))
    [result] = judge.judge_batch([RECORD])
    verdict = result.verdict
    assert isinstance(verdict, AdequacyVerdict)
    assert list(verdict.dimensions) == list(OWN)
    assert verdict.decision.composite_score == pytest.approx((3 * 0.8 + 0.4) / 4)
    assert verdict.decision.failed_critical == {"product_version_match": 0.4}
    assert verdict.decision.decision == "FAIL"
    # The prompt lists them with what they measure; the constraint generates exactly them.
    system = seen[0].messages[0]["content"]
    assert "- symptom_coverage: whether every symptom is addressed" in system
    assert "factual_coverage" not in system
    constraint = seen[0].constraint
    assert constraint is adequacy_constraint(tuple(OWN), criteria=1)
    assert constraint.matches(answer({"symptom_coverage": 0.8, "product_version_match": 0.4}))
    assert not constraint.matches(answer(dict.fromkeys(DIMENSIONS, 0.5)))


def test_equal_dimension_tuples_share_one_compiled_form() -> None:
    assert adequacy_constraint(("a_b", "c"), criteria=2) is adequacy_constraint(("a_b", "c"), criteria=2)
    assert adequacy_constraint(("a_b", "c"), criteria=2).key != adequacy_constraint(criteria=2).key
    assert adequacy_constraint(DIMENSIONS, criteria=2) is adequacy_constraint(criteria=2)


def test_an_output_with_other_dimensions_is_retried_then_an_error(store: RubricStore) -> None:
    judge = Judge(ScriptedEngine(lambda r: answer(dict.fromkeys(DIMENSIONS, 0.9))), AdequacyGate(store, "support"))
    [result] = judge.judge_batch([RECORD])
    assert result.error is not None and result.error.type == "VerdictError" and result.retries == 1
    assert "symptom_coverage" in result.error.message


def test_a_rubric_without_dimensions_keeps_the_seed_five(store: RubricStore) -> None:
    four = answer(dict.fromkeys(DIMENSIONS, 0.9), criteria=4)
    judge = Judge(ScriptedEngine(lambda r: four), AdequacyGate(store, "legal-review"))
    [result] = judge.judge_batch([RECORD])
    assert result.verdict is not None
    assert tuple(result.verdict.dimensions) == DIMENSIONS


def test_no_chunks_scores_the_rubrics_own_dimensions_zero(store: RubricStore) -> None:
    judge = Judge(ScriptedEngine(lambda r: "unused"), AdequacyGate(store, "support"))
    [result] = judge.judge_batch([{"id": "e", "question": "q?", "chunks": []}])
    assert isinstance(result.verdict, AdequacyVerdict)
    assert result.verdict.scores() == dict.fromkeys(OWN, 0.0)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"dimensions": {"only_one": "x"}}, "rubric.dimensions"),
        ({"dimensions": {f"d{'_' * i}x": "x" for i in range(9)}}, "rubric.dimensions"),
        ({"dimensions": {"Upper": "x", "lower": "y"}}, "rubric.dimensions"),
        ({"dimensions": {"has2digits": "x", "lower": "y"}}, "rubric.dimensions"),
        ({"dimensions": {"a_b": "", "c": "y"}}, "rubric.dimensions"),
        ({"weights": {"factual_coverage": 1.0}}, "rubric.weights"),
        ({"critical": {"factual_coverage": 0.5}}, "rubric.critical"),
    ],
)
def test_bad_own_dimensions_are_refused_naming_the_field(tmp_path: Path, changes: dict[str, Any], field: str) -> None:
    path = tmp_path / "support@1.json"
    path.write_text(json.dumps(own_rubric(**changes)))
    with pytest.raises(RubricError) as err:
        load_rubric_file(path)
    assert err.value.field == field
