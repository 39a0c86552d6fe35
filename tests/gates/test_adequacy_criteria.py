"""Every rubric criterion judged on its own (issue 49): the prompt numbers the rubric's criteria, the constraint has
the model score and assess exactly them in order, the verdict carries each with its text and whether it is met, and
the decision computed in code needs every one met, a critical one above all (the seed: "A PASS decision requires all
rubric criteria to be met at an acceptable threshold. Partial coverage that fails any critical criterion must result
in FAIL.").  On a scripted engine: the harness's logic, not generation (tests/gates/test_adequacy_engine.py)."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from suffice.exceptions import ConfigError
from suffice.formats.verdicts import export
from suffice.gates.adequacy.decision import decide
from suffice.gates.adequacy.gate import AdequacyGate
from suffice.gates.adequacy.grammar import (
    DIMENSIONS,
    MAX_CRITERIA,
    AdequacyOutput,
    AdequacyVerdict,
    adequacy_constraint,
)
from suffice.gates.adequacy.grammar import AdequacyBounds as B
from suffice.gates.adequacy.store import DEFAULT_CRITERION_MINIMUM, RubricStore
from suffice.judge import Judge
from suffice.prompts.fitting import RETRY_RESERVE
from suffice.results import JudgeResult
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine
from tests.rows.test_tables import result, row_of, write_rows

CLINICAL = "clinical-guidance"
RECORD = {
    "id": "dose",
    "question": "What is the adult dose of amoxicillin for otitis media?",
    "chunks": [{"id": 0, "text": "Adults: 500 mg every 8 hours for 5 days (2025 guideline)."}],
}


def output(criteria: list[tuple[int, float]], dimensions: float = 0.95, **fields: Any) -> str:
    """The model's text: ``criteria`` as (number, score) in the order written, every dimension at ``dimensions``."""
    return json.dumps(
        {
            "adequacy_decision": "PASS",
            "adequacy_score": 0.9,
            "criteria": [{"criterion": n, "score": s, "assessment": f"criterion {n} judged"} for n, s in criteria],
            "dimensions": {d: {"score": dimensions, "assessment": "covered"} for d in DIMENSIONS},
            "missing_information": [],
            "recommendation": "PROCEED_WITH_ANSWER",
            "rationale": "The guideline gives the adult dose.",
            **fields,
        },
        separators=(",", ":"),
    )


def scored(*scores: float) -> list[tuple[int, float]]:
    return list(enumerate(scores, 1))


def judged(text: str, rubric: str = CLINICAL) -> tuple[JudgeResult, list[GenerationRequest]]:
    seen: list[GenerationRequest] = []

    def script(request: GenerationRequest) -> str:
        seen.append(request)
        return text

    [judgement] = Judge(ScriptedEngine(script), AdequacyGate(rubric=rubric)).judge_batch([RECORD])
    return judgement, seen


def verdict_of(judgement: JudgeResult) -> AdequacyVerdict:
    assert isinstance(judgement.verdict, AdequacyVerdict), judgement.error
    return judgement.verdict


# -- the constraint: the rubric's criteria, in order, each once -------------------------------------------------


def test_the_request_generates_exactly_the_rubrics_criteria_in_order() -> None:
    _, seen = judged(output(scored(0.9, 0.9, 0.9, 0.9)))
    constraint = seen[0].constraint
    assert constraint is adequacy_constraint(DIMENSIONS, criteria=len(RubricStore().get(CLINICAL).criteria))
    assert constraint.matches(output(scored(0.9, 0.9, 0.9, 0.9)))
    refused = {
        "skips one": [(1, 0.9), (2, 0.9), (4, 0.9)],
        "skips one, keeping the count": [(1, 0.9), (2, 0.9), (4, 0.9), (5, 0.9)],
        "repeats one": [(1, 0.9), (2, 0.9), (2, 0.9), (3, 0.9)],
        "repeats one, after the rest": [(1, 0.9), (2, 0.9), (3, 0.9), (4, 0.9), (4, 0.9)],
        "reorders two": [(1, 0.9), (3, 0.9), (2, 0.9), (4, 0.9)],
        "one short": scored(0.9, 0.9, 0.9),
        "one more": scored(0.9, 0.9, 0.9, 0.9, 0.9),
        "none": [],
    }
    assert [why for why, criteria in refused.items() if constraint.matches(output(criteria))] == []


def test_a_rubric_of_another_count_gets_its_own_form() -> None:
    _, seen = judged(output(scored(0.9, 0.9, 0.9)), rubric="customer-support")
    assert seen[0].constraint is adequacy_constraint(DIMENSIONS, criteria=3)
    assert not seen[0].constraint.matches(output(scored(0.9, 0.9, 0.9, 0.9)))


@pytest.mark.parametrize(
    "criteria",
    [scored(0.9, 0.9, 0.9), scored(0.9, 0.9, 0.9, 0.9, 0.9), [(1, 0.9), (3, 0.9), (2, 0.9), (4, 0.9)]],
    ids=["too-few", "too-many", "reordered"],
)
def test_an_engine_that_ignores_the_constraint_gets_an_error_after_its_retry(criteria: list[tuple[int, float]]) -> None:
    judgement, seen = judged(output(criteria))
    assert judgement.verdict is None and len(seen) == 2
    assert judgement.error is not None and judgement.error.type == "VerdictError"
    assert "criteria" in judgement.error.message


# -- the verdict: each criterion with its text, critical or not, met or not -------------------------------------


def test_the_verdict_carries_every_criterion_with_the_rubrics_text_and_met_computed() -> None:
    verdict = verdict_of(judged(output(scored(0.9, 0.2, 0.5, 0.49)))[0])
    rubric = RubricStore().get(CLINICAL)
    assert [(c.criterion, c.text, c.critical, c.minimum) for c in verdict.criteria] == [
        (n, c.text, c.critical, c.minimum) for n, c in enumerate(rubric.criteria, 1)
    ]
    assert [(c.score, c.met) for c in verdict.criteria] == [(0.9, True), (0.2, False), (0.5, True), (0.49, False)]
    assert [c.assessment for c in verdict.criteria] == [f"criterion {n} judged" for n in range(1, 5)]
    assert verdict.decision.failed_critical_criteria == [2, 4] and verdict.decision.unmet_criteria == []


# -- the decision, in code ---------------------------------------------------------------------------------------


def test_a_critical_criterion_not_met_forces_fail_where_the_dimensions_would_pass() -> None:
    passing = verdict_of(judged(output(scored(0.9, 0.9, 0.9, 0.9)))[0])
    assert passing.decision.decision == "PASS" and passing.decision.route == "deliver"  # the dimensions pass
    verdict = verdict_of(judged(output(scored(0.9, 0.9, 0.9, 0.3)))[0])
    d = verdict.decision
    assert (d.composite_score, d.failed_critical, d.below_minimum, d.conservative_vetoes) == (
        passing.decision.composite_score,
        {},
        {},
        [],
    )
    assert verdict.adequacy_decision == "PASS" and d.decision == "FAIL" and not d.agrees_with_model
    assert d.failed_critical_criteria == [4]
    # The FAIL routes as every FAIL does: the model recommended proceeding against it, so more retrieval.
    assert d.route == "retrieve_more"
    assert d.reason == "critical criterion 4 not met (0.30 < 0.50: Dosages are stated with units and frequency.)"
    gate = AdequacyGate(rubric=CLINICAL)
    routed = gate.route(verdict)
    assert routed.route == "retrieve_more" and routed.reason == d.reason and not gate.is_positive(verdict)


def test_every_criterion_met_lets_the_verdict_pass() -> None:
    verdict = verdict_of(judged(output(scored(0.5, 0.5, 0.5, 0.5)))[0])
    assert verdict.decision.decision == "PASS" and verdict.decision.route == "deliver"
    assert all(c.met for c in verdict.criteria) and "all 4 criteria met" in verdict.decision.reason


def test_a_criterion_that_is_not_critical_and_not_met_is_no_pass() -> None:
    verdict = verdict_of(judged(output(scored(0.4, 0.9, 0.9, 0.9)))[0])
    assert not verdict.criteria[0].critical and not verdict.criteria[0].met
    d = verdict.decision
    assert d.decision == "FAIL" and d.unmet_criteria == [1] and d.failed_critical_criteria == []
    assert d.reason.startswith("criterion 1 not met (0.40 < 0.50: Evidence comes from clinical guidelines")


def test_the_decision_is_the_one_decide_computes_from_the_criteria() -> None:
    judgement, _ = judged(output(scored(0.9, 0.2, 0.9, 0.9)))
    verdict = verdict_of(judgement)
    output_again = AdequacyOutput.model_validate(json.loads(output(scored(0.9, 0.2, 0.9, 0.9))))
    assert verdict.decision == decide(output_again, RubricStore().get(CLINICAL))


def test_no_chunks_scores_every_criterion_zero_without_the_model() -> None:
    [judgement] = Judge(ScriptedEngine(lambda r: "unused"), AdequacyGate(rubric=CLINICAL)).judge_batch(
        [{"id": "e", "question": "q?", "chunks": []}]
    )
    verdict = verdict_of(judgement)
    assert [(c.score, c.met) for c in verdict.criteria] == [(0.0, False)] * 4
    assert verdict.decision.failed_critical_criteria == [2, 3, 4] and verdict.decision.unmet_criteria == [1]


# -- where the verdict goes: the seed's shape, a Parquet row -----------------------------------------------------


def test_the_seed_format_keeps_the_seeds_shape_and_puts_the_criteria_beside_it() -> None:
    gate = AdequacyGate(rubric=CLINICAL)
    verdict = verdict_of(judged(output(scored(0.9, 0.2, 0.9, 0.9)))[0])
    row = export(gate, verdict, "seed")
    assert "criteria" not in row["verdict"]
    assert set(row["verdict"]) == {
        *("adequacy_decision", "adequacy_score", "dimensions", "missing_information", "recommendation", "rationale"),
    }
    assert row["criteria"] == [c.model_dump(mode="json") for c in verdict.criteria]
    assert row["decision"]["failed_critical_criteria"] == [2]


def test_a_parquet_row_keeps_every_criterion(tmp_path: Path) -> None:
    gate = AdequacyGate(rubric=CLINICAL)
    verdict = verdict_of(judged(output(scored(0.9, 0.2, 0.9, 0.9)))[0])
    [back] = write_rows(tmp_path / "out.parquet", gate, [row_of(result(gate, verdict), gate, 1)])
    assert back["verdict"]["criteria"] == [c.model_dump(mode="json") for c in verdict.criteria]


# -- the numbers docs/gates.md and docs/judge.md state -----------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs"


def flat_section(doc: str, heading: str | None = None) -> str:
    text = (DOCS / doc).read_text(encoding="utf-8")
    if heading is not None:
        text = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return " ".join(text.split())


def test_the_docs_state_the_bounds_and_default_the_code_has() -> None:
    adequacy = flat_section("gates.md", "Adequacy")
    assert f"A rubric lists 1 to {MAX_CRITERIA} of them (`MAX_CRITERIA`)" in adequacy
    assert (
        f"an assessment of at most {B.CRITERION_ASSESSMENT_CHARS} characters (`CRITERION_ASSESSMENT_CHARS`)" in adequacy
    )
    assert f"its `minimum` (default {DEFAULT_CRITERION_MINIMUM:g}, `DEFAULT_CRITERION_MINIMUM`)" in adequacy
    critical = [n for n, c in enumerate(RubricStore().get(CLINICAL).criteria, 1) if c.critical]
    assert critical == [2, 3, 4]  # "contraindications, patient population and dosage criteria critical"
    assert "marks its contraindications, patient population and dosage criteria critical" in adequacy


def test_the_docs_state_the_worst_case_each_criterion_adds() -> None:
    four, three = adequacy_constraint(criteria=4), adequacy_constraint(criteria=3)
    assert four.max_completion_tokens is not None and three.max_completion_tokens is not None
    step = four.max_completion_tokens - three.max_completion_tokens
    bounds = [adequacy_constraint(criteria=n).max_completion_tokens or 0 for n in range(1, MAX_CRITERIA + 1)]
    assert {b - a for a, b in pairwise(bounds)} == {step}
    stated = f"adequacy {four.max_completion_tokens:,} under a rubric of four criteria, {step} for each criterion"
    assert stated in flat_section("gates.md", "Output tokens per verdict")
    assert f"{four.max_tokens:,} (adequacy under a rubric of four criteria, such as `clinical-guidance`)" in (
        flat_section("judge.md")
    )
    # "4,096 no such adequacy verdict in full": the worst case and the retry reserve alone take more.
    assert four.max_tokens + RETRY_RESERVE > 4096
    with pytest.raises(ConfigError) as refused:
        Judge(ScriptedEngine(lambda r: "{}", max_model_len=4096), AdequacyGate(rubric=CLINICAL))
    assert refused.value.parameter == "max_model_len"


def test_assert_adequate_names_the_criteria_not_met() -> None:
    from suffice.testing import assert_adequate

    judge = Judge(ScriptedEngine(lambda r: output(scored(0.4, 0.9, 0.9, 0.3))), AdequacyGate(rubric=CLINICAL))
    with pytest.raises(AssertionError) as failed:
        assert_adequate(judge, RECORD, {"rubric": CLINICAL})
    assert "criteria not met: 4 (critical), 1" in str(failed.value)
