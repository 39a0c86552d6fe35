"""The post-generation recovery gate: cited answer or abstention, routed in code.

Under a threshold that accepts partial support, a PARTIALLY_SUFFICIENT verdict is
delivered as the checked answer with caveats (see :func:`decide`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from suffice.exceptions import ConfigError, InputError, VerdictError
from suffice.gates.base import Gate, GateOptions
from suffice.gates.recovery.citing import UNSUPPORTED_MARKER, check_marker, cite
from suffice.gates.recovery.decision import SufficiencyThreshold, decide
from suffice.gates.recovery.grammar import (
    CITING,
    DEFAULT_BOUNDS,
    Classification,
    JudgedSegment,
    RecoveryBounds,
    RecoveryOutput,
    RecoveryVerdict,
    recovery_constraint,
    settle,
    tally,
    weakest,
)
from suffice.gates.recovery.segments import Segment, segment
from suffice.grammars.constraint import Constraint
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt, source_labels
from suffice.prompts.templates import load_prompt
from suffice.records.item import Chunk, Item
from suffice.settings import setting

TEMPLATES = Path(__file__).parent / "templates"

B = RecoveryBounds


def _threshold(value: Any) -> Any:
    """A threshold as the options hold it (text, or a mapping of keys as a dict), refused as the ``threshold``
    option with the key at fault in the reason."""
    try:
        SufficiencyThreshold.from_spec(value)
    except ConfigError as exc:
        raise ConfigError("threshold", value, str(exc)) from None
    return value if isinstance(value, str) else dict(value)


@dataclass(frozen=True)
class RecoveryOptions(GateOptions):
    threshold: str | dict[str, Any] = setting(
        "strict",
        "the threshold routing applies: a preset (strict, loose) or explicit values, e.g. "
        "min_passages=2,min_cumulative_score=1.5,required_support_ratio=0.8,min_passage_score=0.3 (keys left out "
        "come from strict)",
        convert=_threshold,
        schema={"anyOf": [{"type": "string"}, {"type": "object"}]},
        per_request=True,
    )
    max_sources_per_segment: int = setting(
        B.SOURCES_MAX,
        "sources the model may name for one segment of the response",
        minimum=B.SOURCES_RANGE[0],
        maximum=B.SOURCES_RANGE[1],
    )
    unsupported_marker: str = setting(
        UNSUPPORTED_MARKER,
        "what follows each segment not fully supported in a partial answer that is delivered (loose threshold), so "
        "no application shows it as supported",
        per_request=True,
    )
    retrieval_exhausted: bool = setting(
        False,
        "no retrieval is left for any record (no retriever): a shortfall abstains (high stakes: a person)",
        per_request=True,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _threshold(self.threshold)  # text: its flag's and a query parameter's
        check_marker(self.unsupported_marker)

    @property
    def bounds(self) -> RecoveryBounds:
        return RecoveryBounds(sources_max=self.max_sources_per_segment)


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
        prompt_version: str = "v4",
        bounds: RecoveryBounds = DEFAULT_BOUNDS,
        *,
        retrieval_exhausted: bool = False,
        unsupported_marker: str = UNSUPPORTED_MARKER,
    ) -> None:
        self.template = load_prompt(TEMPLATES, self.name, prompt_version)
        # The options' default, so RecoveryGate() in Python is the gate the CLI, TOML and HTTP build by default.
        self.threshold = threshold or SufficiencyThreshold.from_spec(RecoveryOptions.threshold)
        self.bounds = bounds
        #: Every record is judged as if its ``retrieval_exhausted`` were set.
        self.retrieval_exhausted = retrieval_exhausted
        self.unsupported_marker = check_marker(unsupported_marker)

    @classmethod
    def build(cls, options: GateOptions) -> RecoveryGate:
        assert isinstance(options, RecoveryOptions)
        return cls(
            SufficiencyThreshold.from_spec(options.threshold),
            bounds=options.bounds,
            retrieval_exhausted=options.retrieval_exhausted,
            unsupported_marker=options.unsupported_marker,
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
        return {**super().settings(), "threshold": self.threshold.describe()}

    def seed_extras(self, verdict: BaseModel) -> dict[str, Any]:
        """Beside the seed's shape: every segment with its label and sources, the model's own classification, and
        how the response was judged."""
        if not isinstance(verdict, RecoveryVerdict):
            return {}
        return {
            "segments": [s.model_dump(mode="json") for s in verdict.segments],
            "model_classification": verdict.model_classification.value,
            "disagreement": verdict.disagreement,
            "fitting": {"windows": verdict.windows},
        }

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
            )
        return Routing(
            rd.route,
            rd.reason,
            queries=list(rd.queries),
            gap=list(rd.gap),
            scores=scores,
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

    def response_segments(self, item: Item) -> list[Segment]:
        """The response's sentences and claims, each judged (:func:`~suffice.gates.recovery.segments.segment`)."""
        found = segment(item.response or "")
        if not found:
            raise InputError("response", "holds no sentence or claim to check (only whitespace and markup)")
        return found

    def shortcut(self, item: Item) -> RecoveryVerdict | None:
        if item.has_evidence:
            return None  # the response is segmented once, where its prompt is fitted
        found = self.response_segments(item)
        # No evidence was retrieved: nothing the response says can be supported (the model is not asked).
        judged = [_judged(s, "unsupported", []) for s in found]
        verdict = RecoveryVerdict(
            classification=Classification.INSUFFICIENT,
            model_classification=Classification.INSUFFICIENT,
            segments=judged,
            supported_claims=[],
            unsupported_claims=[s.text for s in found],
            cited_answer=item.response or "",
            abstention_notice="No evidence was retrieved, so no claim of the answer can be supported.",
            suggested_retrieval_queries=[item.question[: RecoveryBounds.QUERY_CHARS]],
            prompt_version=self.template.name,
            windows=0,
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
        """A window of one segment (what a prompt measured without its response needs at least)."""
        return recovery_constraint(len(source_labels(shown)), 0, 1, self.bounds)

    def window_constraint(self, item: Item, shown: Sequence[Chunk], window: tuple[int, int]) -> Constraint:
        first, count = window
        return recovery_constraint(len(source_labels(shown)), first, count, self.bounds)

    def system_context(self, item: Item) -> dict[str, Any]:
        return {"bounds": self.bounds.for_prompt(), "threshold": self.threshold.describe()}

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> RecoveryVerdict:
        """One verdict from the outputs of every window (``text``: one line each, in order)."""
        outputs = text.split("\n")
        prompts = fitted.prompts
        if len(outputs) != len(prompts):
            raise VerdictError(f"{len(outputs)} outputs for {len(prompts)} windows", text)
        read: list[RecoveryOutput] = []
        for number, (output, (_, constraint)) in enumerate(zip(outputs, prompts, strict=True)):
            if not constraint.matches(output):
                raise VerdictError(f"window {number}'s output is not in the form its constraint allows", output)
            try:
                read.append(RecoveryOutput.model_validate(json.loads(output)))
            except (json.JSONDecodeError, ValidationError) as exc:
                raise VerdictError(f"output is not a valid recovery verdict: {exc}", output) from exc
        sources = fitted.sources
        entries = [entry for output in read for entry in output.segments]
        if [index for index, _, _ in entries] != list(range(len(fitted.segments))):
            raise VerdictError("the windows' entries do not number the response's segments once each, in order", text)
        judged = [
            _judged(seg, label, [sources[k] for k in numbers] if label in CITING else [])
            for seg, (_, label, numbers) in zip(fitted.segments, entries, strict=True)
        ]
        labels = [s.label for s in judged]
        model = weakest(*(output.classification for output in read))
        computed = tally(labels)
        notices = [o.abstention_notice for o in read if o.abstention_notice]
        queries = list(dict.fromkeys(q for o in read for q in o.suggested_retrieval_queries or []))
        classification = settle(computed, model)
        response = item.response or ""
        abstaining = classification is not Classification.SUFFICIENT
        verdict = RecoveryVerdict(
            classification=classification,
            model_classification=model,
            disagreement=computed is not model,
            segments=judged,
            supported_claims=[s.text for s in judged if s.label == "supported"],
            unsupported_claims=[s.text for s in judged if s.label in ("partial", "unsupported")],
            cited_answer=cite(response, judged),
            abstention_notice=(notices[0] if notices else None) if abstaining else None,
            suggested_retrieval_queries=(queries[: B.QUERIES_MAX] or None) if abstaining else None,
            cited_sources=list(dict.fromkeys(source for s in judged for source in s.sources)),
            prompt_version=self.template.name,
            windows=len(prompts),
            truncated_chunk_ids=fitted.truncated_chunk_ids,
            omitted_chunk_ids=fitted.omitted_chunk_ids,
            question_truncated=fitted.question_truncated,
        )
        decision = decide(verdict, fitted.shown, self.threshold, can_retrieve=self.can_retrieve(item))
        answer = None
        if decision.route == "deliver":
            # The response itself goes out (the seed: "accept the answer as-is"), cited; a partial one with every
            # segment not fully supported marked, so it cannot be shown as supported by accident.
            partial = classification is not Classification.SUFFICIENT
            answer = cite(response, judged, self.unsupported_marker) if partial else verdict.cited_answer
        return verdict.model_copy(update={"decision": decision, "answer": answer})

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's class SUFFICIENT, beside the computed route's ``deliver``."""
        if not isinstance(verdict, RecoveryVerdict):
            return None
        return verdict.classification is Classification.SUFFICIENT


def _judged(seg: object, label: str, sources: list[str]) -> JudgedSegment:
    assert isinstance(seg, Segment), "the recovery gate's fitted segments are its own"
    return JudgedSegment(
        index=seg.index,
        start=seg.start,
        end=seg.end,
        kind=seg.kind,
        text=seg.text,
        label=label,  # type: ignore[arg-type]
        sources=list(dict.fromkeys(sources)),
    )
