"""The pre-generation adequacy gate: rubric-driven, decision computed in code."""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from suffice.exceptions import ConfigError, InputError, VerdictError
from suffice.files import replace_atomically
from suffice.gates.adequacy import cli
from suffice.gates.adequacy.decision import check_threshold, decide, effective_threshold, judge_criteria
from suffice.gates.adequacy.grammar import (
    AdequacyBounds,
    AdequacyOutput,
    AdequacyVerdict,
    CriterionScore,
    Dimension,
    adequacy_constraint,
)
from suffice.gates.adequacy.store import (
    DEFAULT_CRITERION_MINIMUM,
    Rubric,
    RubricStore,
    builtin_dir,
    next_rubric_path,
    save_rubric_version,
)
from suffice.gates.base import CalibrationChoice, Gate, GateOptions, ReasoningOptions
from suffice.grammars.constraint import Constraint
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt
from suffice.prompts.templates import load_prompt
from suffice.records.item import Chunk, Item, parse_record
from suffice.settings import setting

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class AdequacyOptions(ReasoningOptions):
    rubric: str | None = setting(
        None, "the default rubric NAME[@VERSION] (newest if none); a record's own overrides it", per_request=True
    )
    rubric_dir: Path | None = setting(None, "your own rubric folder (default: the built-in rubrics)")
    retrieval_exhausted: bool = setting(
        False,
        "no retrieval is left for any record (no retriever): a FAIL that wants more goes to a person",
        per_request=True,
    )


class AdequacyGate(Gate):
    """``rubric`` is the default reference; a record's own ``rubric`` field overrides it."""

    name = "adequacy"
    options_model = AdequacyOptions
    decision_key = "adequacy_decision"
    decision_json_values = ('"PASS"', '"FAIL"')
    positive_value = '"PASS"'
    saveable_scores = ("composite",)
    verdict_model = AdequacyVerdict

    def __init__(
        self,
        store: RubricStore | None = None,
        rubric: str | None = None,
        *,
        threshold: float | None = None,
        prompt_version: str = "v5",
        reasoning_chars: int = AdequacyBounds.RATIONALE_CHARS,
        retrieval_exhausted: bool = False,
    ) -> None:
        self.template = load_prompt(TEMPLATES, self.name, prompt_version)
        lo, hi = AdequacyBounds.RATIONALE_RANGE
        if not lo <= reasoning_chars <= hi:
            raise ConfigError("reasoning_chars", reasoning_chars, f"must be between {lo} and {hi}")
        #: The rationale's bound in characters (the seed's own field for the model's reasoning).
        self.reasoning_chars = reasoning_chars
        self.store = store or RubricStore()
        self.default_rubric = rubric
        #: Every record is judged as if its ``retrieval_exhausted`` were set.
        self.retrieval_exhausted = retrieval_exhausted
        check_threshold(threshold)
        self.threshold = threshold
        if rubric is not None:
            self.store.get(rubric)  # fail at construction for a bad default

    @classmethod
    def build(cls, options: GateOptions) -> AdequacyGate:
        assert isinstance(options, AdequacyOptions)
        return cls(
            RubricStore(options.rubric_dir),
            options.rubric,
            reasoning_chars=options.reasoning_chars,
            retrieval_exhausted=options.retrieval_exhausted,
        )

    @classmethod
    def add_commands(cls, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_parser(sub)

    def _save_folder(self, destination: Path | None, report_dir: Path) -> Path:
        """Where a calibrated version goes: the folder named, else the store's own folder,
        else (the rubrics shipped with suffice are not written to) the report's."""
        if destination is not None:
            return destination
        return report_dir / "rubrics" if self.store.folder == builtin_dir() else self.store.folder

    def save_problem(self, destination: Path | None, report_dir: Path) -> str | None:
        if self.default_rubric is None:
            return "the adequacy gate saves a new version of the rubric it calibrated: name it (--rubric)"
        path = next_rubric_path(self.store.get(self.default_rubric), self._save_folder(destination, report_dir))
        if path.exists():
            return f"{path.stem} exists already in {path.parent}: calibrate from it, or move it away"
        return None

    def default_choice(self) -> tuple[str, str | None]:
        """A HIGH-risk rubric biases toward false negatives (the seed: "re-retrieval is
        cheaper than an incorrect answer"): F-beta with beta < 1 by default."""
        if self.default_rubric is not None and self.store.get(self.default_rubric).risk_level == "HIGH":
            return "f-beta", f"{self.default_rubric} is a HIGH-risk rubric: biased toward false negatives"
        return "best-f1", None

    def calibrated_under(self) -> Mapping[str, str] | None:
        """The default rubric's calibration's engine settings (a record naming another rubric is not checked:
        its threshold is looked up per record)."""
        if self.default_rubric is None:
            return None
        rubric = self.store.get(self.default_rubric)
        fitted = (rubric.calibration or {}).get("fitted_under") if rubric.calibrated_threshold is not None else None
        return {str(k): str(v) for k, v in fitted.items()} if isinstance(fitted, dict) else None

    def save_calibration(self, choice: CalibrationChoice, destination: Path | None, report_dir: Path) -> str:
        if self.default_rubric is None:
            raise ConfigError("save", str(destination), "the adequacy gate needs --rubric to save a new version")
        base = self.store.get(self.default_rubric)
        folder = self._save_folder(destination, report_dir)
        if folder != self.store.folder:  # a store of its own: the base version beside the new one
            folder.mkdir(parents=True, exist_ok=True)
            replace_atomically(folder / f"{base.ref}.json", [(base.model_dump_json(indent=2) + "\n").encode("utf-8")])
        metrics = {**choice.metrics, "threshold": choice.threshold}
        if choice.fitted_under:
            metrics["fitted_under"] = dict(choice.fitted_under)
        path = save_rubric_version(base, metrics, folder)
        applied = effective_threshold(base.model_copy(update={"calibrated_threshold": choice.threshold}))
        floor = "" if applied == round(choice.threshold, 6) else f"; applied as {applied:.3f}, the HIGH-risk floor"
        return f"saved rubric version {path.stem} (calibrated threshold {choice.threshold:.3f}{floor})"

    def settings(self) -> dict[str, str]:
        """The default rubric as resolved now (``name@version``) and a hash of every
        rubric in the store: records may name their own rubric, often without a version
        (the newest), so a new version saved by ``calibrate`` changes the settings."""
        rubric = "none" if self.default_rubric is None else self.store.get(self.default_rubric).ref
        digest = hashlib.sha256()
        for path in sorted(self.store.folder.glob("*.json")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return {**super().settings(), "rubric": rubric, "rubrics": digest.hexdigest()}

    def high_stakes(self, item: Item) -> bool:
        """A HIGH-risk rubric (the record's own, else the default)."""
        return self.rubric_for(item).risk_level == "HIGH"

    def route(self, verdict: BaseModel) -> Routing:
        """The rubric's weighted composite against its threshold, computed in code."""
        if not isinstance(verdict, AdequacyVerdict):
            raise TypeError(f"the adequacy gate cannot route a {type(verdict).__name__}")
        d = verdict.decision
        scores = {"composite": d.composite_score, "threshold": d.threshold, **verdict.scores()}
        if d.route == "deliver":
            return Routing.deliver(self, verdict, d.reason, scores=scores, rubric=verdict.rubric)
        return Routing(
            d.route,
            d.reason,
            queries=list(verdict.missing_information),
            gap=list(verdict.missing_information),
            scores=scores,
            rubric=verdict.rubric,
            rule=d.rule,
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

    def seed_extras(self, verdict: BaseModel) -> dict[str, Any]:
        """Beside the seed's shape: each rubric criterion judged (the seed's schema has no field for them)."""
        return {"criteria": verdict.criteria_rows()} if isinstance(verdict, AdequacyVerdict) else {}

    def rubric_for(self, item: Item) -> Rubric:
        ref = item.rubric or self.default_rubric
        if ref is None:
            raise InputError("rubric", "no rubric given: pass --rubric NAME[@VERSION] or a per-record 'rubric'")
        return self.store.get(ref)

    def parse_item(self, record: object) -> Item:
        item = parse_record(record, need_response=self.needs_response)
        self.rubric_for(item)  # an unknown or broken rubric is this item's error
        return item

    def is_positive(self, verdict: BaseModel) -> bool:
        """Whether the route computed in code from the rubric delivers: a computed PASS that the model escalated
        or flagged goes to a person, so it is not positive."""
        return isinstance(verdict, AdequacyVerdict) and self.route(verdict).route == "deliver"

    def shortcut(self, item: Item) -> AdequacyVerdict | None:
        if item.has_evidence:
            return None
        rubric = self.rubric_for(item)
        none = "No context was retrieved."
        empty = Dimension(score=0.0, assessment=none)
        output = AdequacyOutput(
            adequacy_decision="FAIL",
            adequacy_score=0.0,
            criteria=[
                CriterionScore(criterion=n, score=0.0, assessment=none) for n in range(1, len(rubric.criteria) + 1)
            ],
            dimensions={d: empty for d in rubric.dimension_names},
            missing_information=["Any retrieved context for the question."],
            recommendation="RETRIEVE_MORE",
            rationale="No chunk holds any text; the model was not called.",
        )
        return self._verdict(output, rubric, None, item)

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        if probabilities is None:
            return verdict
        return verdict.model_copy(update={"p_model_pass": probabilities['"PASS"']})

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        """The default rubric's constraint (a record naming its own rubric gets its own: :meth:`item_constraint`);
        without a default rubric there is none to give: an :class:`InputError` naming ``rubric``."""
        if self.default_rubric is None:
            raise InputError("rubric", "no rubric given: pass --rubric NAME[@VERSION] or a per-record 'rubric'")
        return self._constraint_of(self.store.get(self.default_rubric))

    def item_constraint(self, item: Item, shown: Sequence[Chunk]) -> Constraint:
        """The constraint generating exactly the item's rubric's criteria and dimensions (one compiled form per
        distinct tuple of dimension names and number of criteria)."""
        return self._constraint_of(self.rubric_for(item))

    def _constraint_of(self, rubric: Rubric) -> Constraint:
        return adequacy_constraint(rubric.dimension_names, self.reasoning_chars, criteria=len(rubric.criteria))

    def system_context(self, item: Item) -> dict[str, Any]:
        rubric = self.rubric_for(item)
        return {
            "bounds": AdequacyBounds.for_prompt(self.reasoning_chars),
            "rubric": rubric,
            "dimensions": rubric.dimension_names,
            "pass_threshold": effective_threshold(rubric, self.threshold),
            # A criterion's own minimum is stated beside it; this one once for the rest.
            "criterion_minimum": DEFAULT_CRITERION_MINIMUM,
        }

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> AdequacyVerdict:
        try:
            output = AdequacyOutput.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise VerdictError(f"output is not a valid adequacy verdict: {exc}", text) from exc
        if len(output.rationale) > self.reasoning_chars:
            raise VerdictError(f"rationale longer than reasoning_chars={self.reasoning_chars}", text)
        rubric = self.rubric_for(item)
        if set(output.dimensions) != set(rubric.dimension_names):
            wanted = list(rubric.dimension_names)
            raise VerdictError(f"dimensions must be exactly the rubric's {wanted}, got {list(output.dimensions)}", text)
        if len(output.criteria) != len(rubric.criteria):
            n = len(rubric.criteria)
            raise VerdictError(
                f"criteria must be the rubric's {n}, numbered 1 to {n}, got {len(output.criteria)}", text
            )
        return self._verdict(output, rubric, fitted, item)

    def _verdict(
        self, output: AdequacyOutput, rubric: Rubric, fitted: FittedPrompt | None, item: Item
    ) -> AdequacyVerdict:
        return AdequacyVerdict(
            **output.model_dump(exclude={"criteria"}),
            criteria=judge_criteria(output, rubric),
            rubric=rubric.ref,
            risk_level=rubric.risk_level,
            prompt_version=self.template.name,
            truncated_chunk_ids=fitted.truncated_chunk_ids if fitted else [],
            omitted_chunk_ids=fitted.omitted_chunk_ids if fitted else [],
            question_truncated=fitted.question_truncated if fitted else False,
            decision=decide(
                output,
                rubric,
                threshold=self.threshold,
                can_retrieve=not (self.retrieval_exhausted or item.retrieval_exhausted),
                question_truncated=fitted.question_truncated if fitted else False,
            ),
        )

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's own ``adequacy_decision`` PASS, beside the PASS computed from the rubric."""
        if not isinstance(verdict, AdequacyVerdict):
            return None
        return verdict.adequacy_decision == "PASS"
