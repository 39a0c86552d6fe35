"""The post-generation recovery gate: cited answer or abstention, routed in code.

Under a threshold that accepts partial support, a PARTIALLY_SUFFICIENT verdict is
delivered as the checked answer with caveats (see :func:`decide`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from suffice.exceptions import ConfigError, VerdictError
from suffice.gates.base import Gate, GateOptions
from suffice.gates.recovery.decision import SufficiencyThreshold, decide
from suffice.gates.recovery.grammar import (
    DEFAULT_BOUNDS,
    Classification,
    RecoveryBounds,
    RecoveryOutput,
    RecoveryVerdict,
    at_limit,
    recovery_constraint,
    relabel_citations,
)
from suffice.grammars.constraint import Constraint
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt, source_labels
from suffice.prompts.templates import load_prompt, normalise
from suffice.records.item import Chunk, Item

TEMPLATES = Path(__file__).parent / "templates"

B = RecoveryBounds


class RecoveryOptions(GateOptions):
    threshold: str | dict[str, Any] = Field(
        default="strict",
        description=(
            "the threshold routing applies: a preset (strict, loose) or explicit values, "
            "e.g. min_passages=2,min_cumulative_score=1.5,required_support_ratio=0.8,min_passage_score=0.3 "
            "(keys left out come from strict)"
        ),
    )

    max_claims: int = Field(
        default=B.CLAIMS_MAX,
        ge=B.CLAIMS_RANGE[0],
        le=B.CLAIMS_RANGE[1],
        description=(
            f"claims the model may list as supported, and as unsupported ({B.CLAIMS_RANGE[0]}-{B.CLAIMS_RANGE[1]}, "
            f"default {B.CLAIMS_MAX}); a list filled to it is named in the row's at_limit"
        ),
    )
    max_cited_sentences: int = Field(
        default=B.ANSWER_SENTENCES,
        ge=B.SENTENCES_RANGE[0],
        le=B.SENTENCES_RANGE[1],
        description=(
            f"sentences of a SUFFICIENT answer, each with one citation ({B.SENTENCES_RANGE[0]}-"
            f"{B.SENTENCES_RANGE[1]}, default {B.ANSWER_SENTENCES}): the most sources a verdict can cite, so "
            "min_passages may not exceed it"
        ),
    )

    retrieval_exhausted: bool = Field(
        default=False,
        description="no retrieval is left for any record (no retriever): a shortfall abstains (high stakes: a person)",
    )

    per_request = frozenset({"threshold", "retrieval_exhausted"})

    @field_validator("threshold")
    @classmethod
    def _known_threshold(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        SufficiencyThreshold.from_spec(value)  # a ConfigError names the key at fault
        return value

    @model_validator(mode="after")
    def _reachable(self) -> RecoveryOptions:
        check_reachable(SufficiencyThreshold.from_spec(self.threshold), self.bounds)
        return self

    @property
    def bounds(self) -> RecoveryBounds:
        return RecoveryBounds(claims_max=self.max_claims, sentences=self.max_cited_sentences)


def check_reachable(threshold: SufficiencyThreshold, bounds: RecoveryBounds) -> None:
    """Refuse a threshold no verdict can meet under ``bounds``: each cited sentence names one source, so a
    verdict cites at most ``max_cited_sentences`` sources; counted one chunk per source, ``min_passages`` above
    that would send every SUFFICIENT verdict to retrieval."""
    if threshold.min_passages > bounds.sentences:
        raise ConfigError(
            "min_passages",
            threshold.min_passages,
            f"is more than max_cited_sentences={bounds.sentences}, the most sources a verdict can cite: "
            f"with one chunk per source no verdict could meet min_passages={threshold.min_passages} "
            f"(raise max_cited_sentences to at least {threshold.min_passages}, or lower min_passages)",
        )


class RecoveryGate(Gate):
    name = "recovery"
    options_model = RecoveryOptions
    needs_response = True
    decision_key = "classification"
    decision_json_values = ('"SUFFICIENT"', '"PARTIALLY_SUFFICIENT"', '"INSUFFICIENT"')
    positive_value = '"SUFFICIENT"'
    verdict_model = RecoveryVerdict

    def __init__(
        self,
        threshold: SufficiencyThreshold | None = None,
        prompt_version: str = "v3",
        bounds: RecoveryBounds = DEFAULT_BOUNDS,
        *,
        retrieval_exhausted: bool = False,
    ) -> None:
        self.template = load_prompt(TEMPLATES, self.name, prompt_version)
        # The options' default, so RecoveryGate() in Python is the gate the CLI, TOML and HTTP build by default.
        self.threshold = threshold or SufficiencyThreshold.from_spec(RecoveryOptions.model_fields["threshold"].default)
        self.bounds = bounds
        check_reachable(self.threshold, bounds)
        #: Every record is judged as if its ``retrieval_exhausted`` were set.
        self.retrieval_exhausted = retrieval_exhausted

    @classmethod
    def from_options(cls, options: GateOptions) -> RecoveryGate:
        assert isinstance(options, RecoveryOptions)
        return cls(
            SufficiencyThreshold.from_spec(options.threshold),
            bounds=options.bounds,
            retrieval_exhausted=options.retrieval_exhausted,
        )

    def can_retrieve(self, item: Item) -> bool:
        """Whether more retrieval may follow for ``item`` (neither the gate nor the record says it is exhausted)."""
        return not (self.retrieval_exhausted or item.retrieval_exhausted)

    def high_stakes(self, item: Item) -> bool:
        return self.threshold.high_stakes

    def is_positive(self, verdict: BaseModel) -> bool:
        """Whether the computed decision delivers (a SUFFICIENT class under the threshold
        does not; a partial answer under the loose preset does): what routes."""
        if not isinstance(verdict, RecoveryVerdict):
            return False
        if verdict.decision is None:
            return verdict.classification is Classification.SUFFICIENT
        return self.route(verdict).route == "deliver"

    def settings(self) -> dict[str, str]:
        settings = {
            **super().settings(),
            "threshold": self.threshold.describe(),
            "max_claims": str(self.bounds.claims_max),
            "max_cited_sentences": str(self.bounds.sentences),
        }
        if self.retrieval_exhausted:
            settings["retrieval_exhausted"] = "true"
        return settings

    def seed_extras(self, verdict: BaseModel) -> dict[str, Any]:
        """Beside the seed's shape: how much of the response was checked, lists at their bound."""
        if not isinstance(verdict, RecoveryVerdict):
            return {}
        row: dict[str, Any] = {
            "fitting": {
                "response_truncated": verdict.response_truncated,
                "response_chars": verdict.response_chars,
                "response_chars_checked": verdict.response_chars_checked,
            }
        }
        if verdict.at_limit:
            row["at_limit"] = list(verdict.at_limit)
        return row

    def route(self, verdict: BaseModel) -> Routing:
        """The decision computed in code (support ratio, passages, preset)."""
        if not isinstance(verdict, RecoveryVerdict) or verdict.decision is None:
            raise TypeError(f"the recovery gate cannot route a {type(verdict).__name__} without a decision")
        rd = verdict.decision
        scores = {
            "support_ratio": rd.support_ratio,
            "cumulative_score": rd.cumulative_score,
            "supporting_passages": rd.supporting_passages,
        }
        if rd.route == "deliver":
            return Routing.deliver(
                self,
                verdict,
                rd.reason,
                scores=scores,
                answer=verdict.delivered_answer,
                caveats=list(rd.caveats),
                citations=list(verdict.cited_sources),
                judge_answer=verdict.judge_answer,
            )
        return Routing(
            rd.route,
            rd.reason,
            queries=list(rd.queries),
            gap=list(rd.gap),
            scores=scores,
            judge_answer=verdict.judge_answer,
            rule=rd.rule,
        )

    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        """``decision`` is the computed route (what :meth:`is_positive` counts), not the
        class: a SUFFICIENT class under the threshold does not deliver, a partial one
        accepted with caveats does."""
        probs = verdict.get("class_probabilities") or {}
        decision = verdict.get("decision")
        positive = verdict["classification"] == "SUFFICIENT" if decision is None else decision["route"] == "deliver"
        return {"p_sufficient_class": probs.get("SUFFICIENT"), "decision": float(positive)}

    def seed_verdict(self, verdict: BaseModel) -> dict[str, Any]:
        if not isinstance(verdict, RecoveryVerdict):
            raise TypeError(f"the recovery gate cannot export a {type(verdict).__name__}")
        return verdict.to_seed()

    def shortcut(self, item: Item) -> RecoveryVerdict | None:
        if item.has_evidence:
            return None
        verdict = RecoveryVerdict(
            classification=Classification.INSUFFICIENT,
            supported_claims=[],
            unsupported_claims=["The answer's claims (no evidence was retrieved)."],
            abstention_notice="No evidence was retrieved, so no claim of the answer can be supported.",
            suggested_retrieval_queries=[item.question[: RecoveryBounds.QUERY_CHARS]],
            prompt_version=self.template.name,
            response_chars=None if item.response is None else len(normalise(item.response)),
            response_chars_checked=None if item.response is None else 0,
        )
        decision = decide(verdict, [], self.threshold, can_retrieve=self.can_retrieve(item))
        return verdict.model_copy(update={"decision": decision})

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        if probabilities is None:
            return verdict
        # Keyed by class name, not by its JSON text.
        by_class = {json.loads(value): p for value, p in probabilities.items()}
        return verdict.model_copy(update={"class_probabilities": by_class})

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return recovery_constraint(len(source_labels(shown)), self.bounds)

    def system_context(self, item: Item) -> dict[str, Any]:
        return {"bounds": self.bounds.for_prompt(), "threshold": self.threshold.describe()}

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> RecoveryVerdict:
        try:
            output = RecoveryOutput.model_validate(json.loads(text), context={"bounds": self.bounds})
        except (json.JSONDecodeError, ValidationError) as exc:
            raise VerdictError(f"output is not a valid recovery verdict: {exc}", text) from exc
        sources = fitted.sources
        answer: str | None = None
        cited: list[str] = []
        if output.answer is not None:
            try:
                answer, cited = relabel_citations(output.answer, sources)
            except (ValueError, IndexError) as exc:
                raise VerdictError(f"a citation names no source shown in the request: {exc}", text) from exc
        verdict = RecoveryVerdict(
            classification=output.classification,
            supported_claims=list(output.supported_claims),
            unsupported_claims=list(output.unsupported_claims),
            answer=answer,
            abstention_notice=output.abstention_notice,
            suggested_retrieval_queries=output.suggested_retrieval_queries,
            cited_sources=cited,
            prompt_version=self.template.name,
            truncated_chunk_ids=fitted.truncated_chunk_ids,
            omitted_chunk_ids=fitted.omitted_chunk_ids,
            question_truncated=fitted.question_truncated,
            response_truncated=fitted.response_truncated,
            response_chars=fitted.response_chars,
            response_chars_checked=fitted.response_chars_checked,
            at_limit=at_limit(output, self.bounds),
        )
        decision = decide(verdict, fitted.shown, self.threshold, can_retrieve=self.can_retrieve(item))
        update: dict[str, Any] = {"decision": decision}
        if decision.route == "deliver" and output.classification is Classification.PARTIALLY_SUFFICIENT:
            # Partial support accepted: the checked answer itself is what goes out,
            # with the decision's caveats (the seed's schema has no answer here).
            update["partial_answer"] = item.response
        elif decision.route == "deliver" and item.response:
            # The seed: accept the generated answer as-is; the judge's wording stays ``answer``.
            update["checked_answer"] = item.response
        return verdict.model_copy(update=update)

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's class SUFFICIENT, beside the computed route's ``deliver``."""
        if not isinstance(verdict, RecoveryVerdict):
            return None
        return verdict.classification is Classification.SUFFICIENT
