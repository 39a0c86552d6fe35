"""The pre-generation sufficiency gate (RAGFlow's ``sufficiency_select``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from suffice.calibration.thresholds import GateConfig, sufficiency_score
from suffice.exceptions import VerdictError
from suffice.gates.base import Gate
from suffice.grammars.constraint import Constraint
from suffice.grammars.sufficiency import (
    CalibratedDecision,
    SufficiencyBounds,
    SufficiencyOutput,
    SufficiencyVerdict,
    sufficiency_constraint,
    to_verdict,
)
from suffice.prompts.fitting import FittedPrompt
from suffice.prompts.templates import load_prompt
from suffice.records import Chunk, Item


class SufficiencyGate(Gate):
    name = "sufficiency"
    decision_key = "is_sufficient"
    decision_json_values = ("true", "false")
    positive_value = "true"

    def __init__(self, prompt_version: str = "v2", calibration: GateConfig | None = None) -> None:
        self.template = load_prompt("sufficiency", prompt_version)
        self.calibration = calibration

    def decide(self, verdict: SufficiencyVerdict) -> SufficiencyVerdict:
        """Apply the calibrated threshold, if any; without a score the model's boolean stands."""
        config = self.calibration
        if config is None or not verdict.model_called:
            return verdict
        score = sufficiency_score(verdict, config.score)
        if score is None:
            sufficient, reason = verdict.is_sufficient, f"no {config.score} available: the model's decision stands"
        else:
            sufficient = score >= config.threshold
            relation = ">=" if sufficient else "<"
            reason = f"{config.score} {score:.3f} {relation} calibrated threshold {config.threshold:.3f}"
        decision = CalibratedDecision(
            score_name=config.score, score=score, threshold=config.threshold, sufficient=sufficient, reason=reason
        )
        return verdict.model_copy(update={"decision": decision})

    def settings(self) -> dict[str, str]:
        config = self.calibration
        calibrated = "none" if config is None else f"{config.score}>={config.threshold!r}"
        return {**super().settings(), "gate_config": calibrated}

    def is_positive(self, verdict: BaseModel) -> bool:
        """The calibrated decision when a gate config set one, else the model's boolean."""
        if not isinstance(verdict, SufficiencyVerdict):
            return False
        return verdict.decision.sufficient if verdict.decision is not None else verdict.is_sufficient

    def shortcut(self, item: Item) -> SufficiencyVerdict | None:
        if item.chunks:
            return None
        return SufficiencyVerdict(
            is_sufficient=False,
            required_entities=[],
            coverage={},
            missing_information=["No content was retrieved for this question."],
            contradictions=[],
            confidence=1.0,
            reasoning="The chunk list is empty, so no answer can be inferred; the model was not called.",
            useful_chunk_ids=[],
            prompt_version=self.template.name,
            model_called=False,
        )

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return sufficiency_constraint(len(shown))

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        if probabilities is not None:
            verdict = verdict.model_copy(update={"p_sufficient": probabilities["true"]})
        return self.decide(verdict) if isinstance(verdict, SufficiencyVerdict) else verdict

    def system_context(self, item: Item) -> dict[str, Any]:
        return {"bounds": SufficiencyBounds}

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> SufficiencyVerdict:
        try:
            output = SufficiencyOutput.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise VerdictError(f"output is not a valid sufficiency verdict: {exc}", text) from exc
        n = len(fitted.shown)
        if len(output.chunk_useful) != n:
            raise VerdictError(f"chunk_useful has {len(output.chunk_useful)} letters for {n} chunks shown", text)
        if output.is_sufficient == bool(output.missing_information):
            raise VerdictError("missing_information must be empty exactly when is_sufficient is true", text)
        verdict = to_verdict(
            output,
            fitted.chunk_ids,
            prompt_version=self.template.name,
            truncated_chunk_ids=fitted.truncated_chunk_ids,
            omitted_chunk_ids=fitted.omitted_chunk_ids,
            question_truncated=fitted.question_truncated,
        )
        return self.decide(verdict)
