"""The pre-generation sufficiency gate (RAGFlow's ``sufficiency_select``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from suffice.exceptions import ConfigError, VerdictError
from suffice.gates.base import CalibrationChoice, Gate, GateOptions, ReasoningOptions
from suffice.gates.sufficiency.calibration import GateConfig, sufficiency_score
from suffice.gates.sufficiency.grammar import (
    DEFAULT_BOUNDS,
    CalibratedDecision,
    SufficiencyBounds,
    SufficiencyOutput,
    SufficiencyVerdict,
    sufficiency_constraint,
    to_verdict,
)
from suffice.grammars.constraint import Constraint
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt
from suffice.prompts.templates import load_prompt
from suffice.records.item import Chunk, Item
from suffice.settings import setting

TEMPLATES = Path(__file__).parent / "templates"


B = SufficiencyBounds


@dataclass(frozen=True)
class SufficiencyOptions(ReasoningOptions):
    gate_config: Path | None = setting(None, "a calibrated threshold file written by `suffice calibrate --save PATH`")
    max_entities: int = setting(
        B.ENTITIES_MAX,
        f"required entities the model may list; the default {B.ENTITIES_MAX} covers 99.25% of the labeled questions "
        "in shared/data (HotpotQA's p90; 6 would cover 99.7% but doubles the coarse head's compile time); each one "
        "adds ~150 bytes to max_tokens",
        minimum=B.ENTITIES_RANGE[0],
        maximum=B.ENTITIES_RANGE[1],
    )
    max_useful_chunks: int = setting(
        B.USEFUL_MAX,
        f"useful chunk ids the model may list; the default {B.USEFUL_MAX} covers 100% of the labeled "
        "useful_chunk_ids in shared/data (p100: at most 4)",
        minimum=B.USEFUL_RANGE[0],
        maximum=B.USEFUL_RANGE[1],
    )
    max_retrieval_queries: int = setting(
        B.QUERIES_MAX,
        f"search queries for the missing information an insufficient verdict lists (each at most {B.QUERY_CHARS} "
        f"characters; {B.QUERIES_MAX}: off, the verdict has no retrieval_queries); they become the route's queries",
        minimum=B.QUERIES_RANGE[0],
        maximum=B.QUERIES_RANGE[1],
        per_request=True,
    )

    @property
    def bounds(self) -> SufficiencyBounds:
        return SufficiencyBounds(
            entities_max=self.max_entities,
            useful_max=self.max_useful_chunks,
            reasoning_chars=self.reasoning_chars,
            queries_max=self.max_retrieval_queries,
        )


class SufficiencyGate(Gate):
    name = "sufficiency"
    options_model = SufficiencyOptions
    decision_key = "is_sufficient"
    decision_json_values = ("true", "false")
    positive_value = "true"
    saveable_scores = ("p_sufficient", "self_confidence")
    verdict_model = SufficiencyVerdict

    def __init__(
        self,
        prompt_version: str = "v6",
        calibration: GateConfig | None = None,
        bounds: SufficiencyBounds = DEFAULT_BOUNDS,
    ) -> None:
        self.template = load_prompt(TEMPLATES, self.name, prompt_version)
        self.calibration = calibration
        self.bounds = bounds

    @classmethod
    def build(cls, options: GateOptions) -> SufficiencyGate:
        assert isinstance(options, SufficiencyOptions)
        path = options.gate_config
        calibration = None if path is None else GateConfig.load(path)
        if calibration is not None and calibration.gate != cls.name:
            raise ConfigError("gate_config", str(path), f"is for the {calibration.gate} gate")
        return cls(calibration=calibration, bounds=options.bounds)

    @property
    def decision_delivers(self) -> bool:
        """Without a calibrated threshold the rule is the model's ``is_sufficient``: the decision token alone
        decides it, so a decision-only verdict may deliver (a gate config's threshold reads the full verdict)."""
        return self.calibration is None

    def check_detail(self, detail: str) -> None:
        if detail == "decision" and self.calibration is not None:
            raise ConfigError(
                "gate_config",
                "<calibrated>",
                "applies to full verdicts; with --detail decision use the decision probability directly",
            )

    def save_problem(self, destination: Path | None, report_dir: Path) -> str | None:
        if destination is None:
            return "the sufficiency gate saves its threshold to a gate config file: name it (--save PATH)"
        if destination.is_dir():
            return f"{str(destination)!r} is a folder; name the file to write"
        return None

    def calibrated_under(self) -> Mapping[str, str] | None:
        return None if self.calibration is None else self.calibration.fitted_under

    def save_calibration(self, choice: CalibrationChoice, destination: Path | None, report_dir: Path) -> str:
        problem = self.save_problem(destination, report_dir)
        if problem is not None or destination is None:
            raise ConfigError("save", str(destination), problem or "no path")
        GateConfig(
            gate="sufficiency",
            score=choice.score,  # type: ignore[arg-type]
            threshold=choice.threshold,
            calibrated_on=str(choice.golden),
            metrics=dict(choice.metrics),
            fitted_under=dict(choice.fitted_under) or None,
        ).save(destination)
        return f"saved {choice.score} >= {choice.threshold:.3f} to {destination}"

    def decide(self, verdict: SufficiencyVerdict) -> SufficiencyVerdict:
        """Apply the calibrated threshold, if any; without a score the model's boolean stands.
        A decision the constraint forced (``forced_by``) stands whatever the score."""
        config = self.calibration
        if config is None or not verdict.model_called:
            return verdict
        score = sufficiency_score(verdict, config.score)
        if verdict.forced_by is not None:
            sufficient = False
            reason = f"the constraint forced insufficient ({verdict.forced_by.replace('_', ' ')})"
        elif score is None:
            sufficient, reason = verdict.is_sufficient, f"no {config.score} available: the model's decision stands"
        else:
            sufficient = score >= config.threshold
            relation = ">=" if sufficient else "<"
            reason = f"{config.score} {score:.3f} {relation} calibrated threshold {config.threshold:.3f}"
        gap, queries = ([], []) if sufficient or not verdict.is_sufficient else _overridden_gap(verdict, reason)
        decision = CalibratedDecision(
            score_name=config.score,
            score=score,
            threshold=config.threshold,
            sufficient=sufficient,
            reason=reason,
            gap=gap,
            queries=queries,
        )
        return verdict.model_copy(update={"decision": decision})

    def settings(self) -> dict[str, str]:
        config = self.calibration
        calibrated = "none" if config is None else f"{config.score}>={config.threshold!r}"
        return {**super().settings(), "gate_config": calibrated}

    def is_positive(self, verdict: BaseModel) -> bool:
        """Whether the route delivers: the calibrated decision when a gate config set one, else the model's
        boolean, never a decision the constraint forced, and never a verdict on a question cut to fit."""
        return isinstance(verdict, SufficiencyVerdict) and self.route(verdict).route == "deliver"

    @staticmethod
    def _sufficient(verdict: SufficiencyVerdict) -> bool:
        """The decision the rule reads: the calibrated one, else the model's boolean; a decision the constraint
        forced is never sufficient, whatever ``p_sufficient`` (the model's own) says."""
        if verdict.forced_by is not None:
            return False
        return verdict.decision.sufficient if verdict.decision is not None else verdict.is_sufficient

    def route(self, verdict: BaseModel) -> Routing:
        """The seed's rule: sufficient -> deliver the evidence; otherwise retrieve more, the missing
        information as the gap.  A calibrated decision, when set, decides.  ``queries`` are the verdict's
        ``retrieval_queries`` (``max_retrieval_queries`` > 0), else empty: a description of what is missing is
        not a retrieval query, and a caller reading both would get the gap twice."""
        if not isinstance(verdict, SufficiencyVerdict):
            raise TypeError(f"the sufficiency gate cannot route a {type(verdict).__name__}")
        scores: dict[str, Any] = {"confidence": verdict.confidence, "p_sufficient": verdict.p_sufficient}
        decision = verdict.decision
        if decision is not None:
            scores[decision.score_name] = decision.score
        if self._sufficient(verdict):
            why = "the context is sufficient" if decision is None else decision.reason
            return Routing.deliver(self, verdict, why, scores=scores)
        gap = verdict.missing(False)
        why = "the context is insufficient" if decision is None else decision.reason
        queries = list(decision.queries) if decision is not None and decision.gap else []
        if not queries and verdict.retrieval_queries and not verdict.is_sufficient:
            queries = list(verdict.retrieval_queries)
        return Routing("retrieve_more", why, queries=queries, gap=gap, scores=scores)

    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        """``p_sufficient`` is the model's own probability, also when the constraint forced ``false``
        (``forced_by``): calibration fits the model, while ``decision`` is the one that routes."""
        confidence = float(verdict["confidence"])
        sufficient = bool(verdict["is_sufficient"]) and verdict.get("forced_by") is None
        decision = verdict.get("decision")
        return {
            "p_sufficient": verdict.get("p_sufficient"),
            "self_confidence": confidence if sufficient else 1.0 - confidence,
            "decision": float(decision["sufficient"] if decision else sufficient),
        }

    def useful_chunk_ids(self, verdict: Mapping[str, Any]) -> list[Any] | None:
        if not verdict.get("model_called", True):
            return None
        return list(verdict.get("useful_chunk_ids", []))

    def seed_verdict(self, verdict: BaseModel) -> dict[str, Any]:
        """RAGFlow's shape; both of its decision keys carry the decision that routes."""
        if not isinstance(verdict, SufficiencyVerdict):
            raise TypeError(f"the sufficiency gate cannot export a {type(verdict).__name__}")
        return verdict.to_ragflow(sufficient=self.is_positive(verdict))

    def seed_extras(self, verdict: BaseModel) -> dict[str, Any]:
        """Beside the seed's shape: the model's own decision beside the calibrated one, lists filled to their
        limit, a decision the constraint forced."""
        if not isinstance(verdict, SufficiencyVerdict):
            return {}
        row: dict[str, Any] = {}
        if verdict.decision is not None:
            row["model_is_sufficient"] = verdict.is_sufficient
        if verdict.at_limit:
            row["at_limit"] = list(verdict.at_limit)
        if verdict.retrieval_queries is not None:
            decision = verdict.decision
            if self.is_positive(verdict):
                row["retrieval_queries"] = []  # a sufficient decision searches for nothing
            elif decision is not None and decision.gap:
                row["retrieval_queries"] = list(decision.queries)
            else:
                row["retrieval_queries"] = list(verdict.retrieval_queries)
        if verdict.forced_by is not None:
            row["forced_by"] = verdict.forced_by
            row["p_sufficient"] = verdict.p_sufficient
        return row

    def shortcut(self, item: Item) -> SufficiencyVerdict | None:
        if item.has_evidence:
            return None
        return SufficiencyVerdict(
            is_sufficient=False,
            required_entities=[],
            coverage={},
            missing_information=["No content was retrieved for this question."],
            # Nothing was retrieved: the question itself is the query to search again with.
            retrieval_queries=[item.question[: B.QUERY_CHARS]] if self.bounds.queries_max else None,
            contradictions=[],
            confidence=1.0,
            reasoning="No chunk holds any text, so no answer can be inferred; the model was not called.",
            useful_chunk_ids=[],
            prompt_version=self.template.name,
            model_called=False,
        )

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return sufficiency_constraint(len(shown), self.bounds)

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        """``p_sufficient`` is the model's P(true) as read from the log-probabilities, also when an uncovered
        entity left the constraint only ``false``: the forced decision is ``is_sufficient``/``forced_by``."""
        if probabilities is not None:
            verdict = verdict.model_copy(update={"p_sufficient": probabilities["true"]})
        return self.decide(verdict) if isinstance(verdict, SufficiencyVerdict) else verdict

    def system_context(self, item: Item) -> dict[str, Any]:
        return {"bounds": self.bounds.for_prompt()}

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> SufficiencyVerdict:
        try:
            output = SufficiencyOutput.model_validate(json.loads(text), context={"bounds": self.bounds})
        except (json.JSONDecodeError, ValidationError) as exc:
            raise VerdictError(f"output is not a valid sufficiency verdict: {exc}", text) from exc
        n = len(fitted.shown)
        outside = [label for label in output.useful_chunk_ids if label >= n]
        if outside:
            raise VerdictError(f"useful_chunk_ids names {outside}, not among the {n} chunks shown (0..{n - 1})", text)
        if output.is_sufficient == bool(output.missing_information):
            raise VerdictError("missing_information must be empty exactly when is_sufficient is true", text)
        verdict = to_verdict(
            output,
            fitted.chunk_ids,
            prompt_version=self.template.name,
            truncated_chunk_ids=fitted.truncated_chunk_ids,
            omitted_chunk_ids=fitted.omitted_chunk_ids,
            question_truncated=fitted.question_truncated,
            bounds=self.bounds,
        )
        return self.decide(verdict)

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's own ``is_sufficient``, which a calibrated decision may override (``None``: not asked)."""
        if not isinstance(verdict, SufficiencyVerdict) or not verdict.model_called:
            return None
        return verdict.is_sufficient


def _overridden_gap(verdict: SufficiencyVerdict, reason: str) -> tuple[list[str], list[str]]:
    """What is missing, and what to search for, where a calibrated threshold overrode the model's ``true``: the
    model named nothing missing, so the gap is the evidence for each required entity the threshold does not accept
    (queries: the entities), or, with no entity named, the threshold's own reason (no query: the question is
    searched again)."""
    entities = [e for e in verdict.required_entities if e.strip()][: B.MISSING_MAX]
    if not entities:
        return [f"evidence the calibrated threshold accepts ({reason})"], []
    gap = [f"evidence for {entity}"[: B.MISSING_CHARS] for entity in entities]
    return gap, [entity[: B.QUERY_CHARS] for entity in entities]
