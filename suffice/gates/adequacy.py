"""The pre-generation adequacy gate: rubric-driven, decision computed in code."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from suffice.decisions.adequacy import check_threshold, decide, effective_threshold
from suffice.exceptions import InputError, VerdictError
from suffice.gates.base import Gate
from suffice.grammars.adequacy import (
    DIMENSIONS,
    AdequacyBounds,
    AdequacyOutput,
    AdequacyVerdict,
    Dimension,
    Dimensions,
    adequacy_constraint,
)
from suffice.grammars.constraint import Constraint
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt
from suffice.prompts.templates import load_prompt
from suffice.records import Chunk, Item
from suffice.rubric_store import Rubric, RubricStore


class AdequacyGate(Gate):
    """``rubric`` is the default reference; a record's own ``rubric`` field overrides it."""

    name = "adequacy"
    decision_key = "adequacy_decision"
    decision_json_values = ('"PASS"', '"FAIL"')
    positive_value = '"PASS"'
    saveable_scores = ("composite",)
    calibration_target = "rubric"
    verdict_model = AdequacyVerdict

    def __init__(
        self,
        store: RubricStore | None = None,
        rubric: str | None = None,
        *,
        threshold: float | None = None,
        prompt_version: str = "v2",
    ) -> None:
        self.template = load_prompt("adequacy", prompt_version)
        self.store = store or RubricStore()
        self.default_rubric = rubric
        check_threshold(threshold)
        self.threshold = threshold
        if rubric is not None:
            self.store.get(rubric)  # fail at construction for a bad default

    def settings(self) -> dict[str, str]:
        """The default rubric as resolved now (``name@version``) and a hash of every
        rubric in the store: records may name their own rubric, often without a version
        (the newest), so a new version saved by ``calibrate`` changes the settings."""
        rubric = "none" if self.default_rubric is None else self.store.get(self.default_rubric).ref
        digest = hashlib.sha256()
        for path in sorted(self.store.folder.glob("*.json")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return {**super().settings(), "rubric": rubric, "rubrics": digest.hexdigest()}

    def route(self, verdict: BaseModel) -> Routing:
        """The rubric's weighted composite against its threshold, computed in code."""
        if not isinstance(verdict, AdequacyVerdict):
            raise TypeError(f"the adequacy gate cannot route a {type(verdict).__name__}")
        d = verdict.decision
        scores = {"composite": d.composite_score, "threshold": d.threshold, **verdict.dimensions.scores()}
        return Routing(
            d.route,
            d.reason,
            queries=list(verdict.missing_information),
            gap=list(verdict.missing_information),
            scores=scores,
            rubric=verdict.rubric,
        )

    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        decision = verdict["decision"]
        return {
            "composite": float(decision["composite_score"]),
            "p_model_pass": verdict.get("p_model_pass"),
            "decision": float(decision["decision"] == "PASS"),
        }

    def seed_verdict(self, verdict: BaseModel) -> dict[str, Any]:
        if not isinstance(verdict, AdequacyVerdict):
            raise TypeError(f"the adequacy gate cannot export a {type(verdict).__name__}")
        return verdict.to_seed()

    def rubric_for(self, item: Item) -> Rubric:
        ref = item.rubric or self.default_rubric
        if ref is None:
            raise InputError("rubric", "no rubric given: pass --rubric NAME[@VERSION] or a per-record 'rubric'")
        return self.store.get(ref)

    def parse_item(self, record: object) -> Item:
        item = super().parse_item(record)
        self.rubric_for(item)  # an unknown or broken rubric is this item's error
        return item

    def is_positive(self, verdict: BaseModel) -> bool:
        """The PASS computed in code from the rubric (not the model's own opinion)."""
        decision = getattr(verdict, "decision", None)
        return isinstance(verdict, AdequacyVerdict) and getattr(decision, "decision", None) == "PASS"

    def shortcut(self, item: Item) -> AdequacyVerdict | None:
        if item.has_evidence:
            return None
        rubric = self.rubric_for(item)
        empty = Dimension(score=0.0, assessment="No context was retrieved.")
        output = AdequacyOutput(
            adequacy_decision="FAIL",
            adequacy_score=0.0,
            dimensions=Dimensions(**{d: empty for d in DIMENSIONS}),
            missing_information=["Any retrieved context for the question."],
            recommendation="RETRIEVE_MORE",
            rationale="No chunk holds any text; the model was not called.",
        )
        return self._verdict(output, rubric, None)

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        if probabilities is None:
            return verdict
        return verdict.model_copy(update={"p_model_pass": probabilities['"PASS"']})

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return adequacy_constraint()

    def system_context(self, item: Item) -> dict[str, Any]:
        rubric = self.rubric_for(item)
        return {
            "bounds": AdequacyBounds,
            "rubric": rubric,
            "dimensions": DIMENSIONS,
            "pass_threshold": effective_threshold(rubric, self.threshold),
        }

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> AdequacyVerdict:
        try:
            output = AdequacyOutput.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise VerdictError(f"output is not a valid adequacy verdict: {exc}", text) from exc
        return self._verdict(output, self.rubric_for(item), fitted)

    def _verdict(self, output: AdequacyOutput, rubric: Rubric, fitted: FittedPrompt | None) -> AdequacyVerdict:
        return AdequacyVerdict(
            **output.model_dump(),
            rubric=rubric.ref,
            risk_level=rubric.risk_level,
            prompt_version=self.template.name,
            truncated_chunk_ids=fitted.truncated_chunk_ids if fitted else [],
            omitted_chunk_ids=fitted.omitted_chunk_ids if fitted else [],
            question_truncated=fitted.question_truncated if fitted else False,
            decision=decide(output, rubric, threshold=self.threshold),
        )
