"""A suffice gate of its own: does each sentence of ``response`` cite a chunk that supports it?

Written only against suffice's public API (``import suffice``, ``suffice.grammars``) and
registered under the ``suffice.gates`` entry point (see ``pyproject.toml``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import suffice
from suffice.grammars import Constraint, alt, json_list, lit, seq

TEMPLATES = Path(__file__).parent / "templates"
#: Sentences checked per response; later ones are counted as unchecked.
MAX_SENTENCES = 16
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences_of(response: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(response.strip()) if s.strip()]


class CitationOptions(suffice.GateOptions):
    min_cited_share: float = Field(
        default=1.0, ge=0.0, le=1.0, description="the share of sentences that must cite a chunk to pass"
    )

    per_request = frozenset({"min_cited_share"})


class SentenceCitation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sentence: str
    #: The caller's id of the chunk the model cited, or ``None``.
    chunk_id: int | str | None = None


class CitationVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    citations: list[SentenceCitation]
    model_decision: Literal["PASS", "FAIL"]
    cited_share: float = Field(ge=0.0, le=1.0)
    #: The decision computed in code: ``cited_share >= min_cited_share``.
    passes: bool
    #: Sentences past MAX_SENTENCES, or that the model gave no entry for.
    unchecked_sentences: int = 0
    p_pass: float | None = None
    prompt_version: str
    truncated_chunk_ids: list[int | str] = Field(default_factory=list)
    omitted_chunk_ids: list[int | str] = Field(default_factory=list)
    question_truncated: bool = False
    model_called: bool = True


class _Output(BaseModel):
    citations: list[int | None]
    decision: Literal["PASS", "FAIL"]


class CitationGate(suffice.Gate):
    name = "citation"
    options_model = CitationOptions
    needs_response = True
    decision_key = "decision"
    decision_json_values = ('"PASS"', '"FAIL"')
    positive_value = '"PASS"'
    saveable_scores = ("cited_share",)
    verdict_model = CitationVerdict

    def __init__(self, min_cited_share: float = 1.0) -> None:
        self.template = suffice.load_prompt(TEMPLATES, self.name, "v2")
        self.min_cited_share = min_cited_share

    @classmethod
    def from_options(cls, options: suffice.GateOptions) -> CitationGate:
        assert isinstance(options, CitationOptions)
        return cls(options.min_cited_share)

    def settings(self) -> dict[str, str]:
        return {**super().settings(), "min_cited_share": repr(self.min_cited_share)}

    def _verdict(
        self, sentences: list[str], labels: list[int | None], ids: Sequence[int | str], model_decision: str
    ) -> CitationVerdict:
        checked = sentences[:MAX_SENTENCES]
        given = labels[: len(checked)]
        citations = [
            SentenceCitation(sentence=s, chunk_id=ids[label] if label is not None else None)
            for s, label in zip(checked, given + [None] * (len(checked) - len(given)), strict=True)
        ]
        cited = sum(c.chunk_id is not None for c in citations)
        share = cited / len(sentences) if sentences else 0.0
        return CitationVerdict(
            citations=citations,
            model_decision=model_decision,  # type: ignore[arg-type]
            cited_share=share,
            passes=bool(sentences) and share >= self.min_cited_share,
            unchecked_sentences=len(sentences) - len(given),
            prompt_version=self.prompt_version,
        )

    def is_positive(self, verdict: BaseModel) -> bool:
        return isinstance(verdict, CitationVerdict) and verdict.passes

    def route(self, verdict: BaseModel) -> suffice.Routing:
        if not isinstance(verdict, CitationVerdict):
            raise TypeError(f"the citation gate cannot route a {type(verdict).__name__}")
        uncited = [c.sentence for c in verdict.citations if c.chunk_id is None]
        share = f"{verdict.cited_share:.2f} of the sentences cite a chunk"
        scores = {"cited_share": verdict.cited_share, "p_pass": verdict.p_pass}
        if verdict.passes:
            return suffice.Routing("deliver", f"{share} (at least {self.min_cited_share:.2f})", scores=scores)
        return suffice.Routing(
            "abstain", f"{share} (under {self.min_cited_share:.2f})", gap=uncited, queries=uncited, scores=scores
        )

    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        return {
            "cited_share": float(verdict["cited_share"]),
            "p_pass": verdict.get("p_pass"),
            "decision": float(bool(verdict["passes"])),
        }

    def useful_chunk_ids(self, verdict: Mapping[str, Any]) -> list[Any] | None:
        return [c["chunk_id"] for c in verdict.get("citations", []) if c.get("chunk_id") is not None]

    def seed_verdict(self, verdict: BaseModel) -> dict[str, Any]:
        if not isinstance(verdict, CitationVerdict):
            raise TypeError(f"the citation gate cannot export a {type(verdict).__name__}")
        return {"citations": [c.model_dump(mode="json") for c in verdict.citations], "passes": verdict.passes}

    def shortcut(self, item: suffice.Item) -> CitationVerdict | None:
        if item.has_evidence:
            return None
        verdict = self._verdict(sentences_of(item.response or ""), [], [], "FAIL")
        return verdict.model_copy(update={"model_called": False})

    def constraint_for(self, shown: Sequence[suffice.Chunk]) -> suffice.Constraint:
        label = alt(lit("null"), *[lit(str(i)) for i in range(len(shown))])
        decision = alt(*[lit(v) for v in self.decision_json_values])
        rx = seq(lit('{"citations":'), json_list(label, 1, MAX_SENTENCES), lit(',"decision":'), decision, lit("}"))
        return Constraint.from_rx(rx, key=f"citation/{len(shown)}")

    def user_context(self, item: suffice.Item) -> dict[str, Any]:
        return {"sentences": sentences_of(item.response or "")[:MAX_SENTENCES]}

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        if probabilities is None:
            return verdict
        return verdict.model_copy(update={"p_pass": probabilities['"PASS"']})

    def save_problem(self, destination: Path | None, report_dir: Path) -> str | None:
        if destination is None or destination.is_dir():
            return "the citation gate saves min_cited_share to a JSON file: name it (--save PATH)"
        return None

    def save_calibration(self, choice: suffice.CalibrationChoice, destination: Path | None, report_dir: Path) -> str:
        problem = self.save_problem(destination, report_dir)
        if problem is not None or destination is None:
            raise suffice.ConfigError("save", str(destination), problem or "no path")
        saved = {"min_cited_share": choice.threshold, "metrics": dict(choice.metrics)}
        destination.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
        return f"saved min_cited_share {choice.threshold:.3f} to {destination}; judge with --min-cited-share"

    def parse(self, text: str, fitted: suffice.FittedPrompt, item: suffice.Item) -> CitationVerdict:
        try:
            output = _Output.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise suffice.VerdictError(f"output is not a valid citation verdict: {exc}", text) from exc
        outside = [label for label in output.citations if label is not None and label >= len(fitted.shown)]
        if outside:
            raise suffice.VerdictError(
                f"citations name {outside}, not among the {len(fitted.shown)} chunks shown", text
            )
        verdict = self._verdict(sentences_of(item.response or ""), output.citations, fitted.chunk_ids, output.decision)
        return verdict.model_copy(
            update={
                "truncated_chunk_ids": fitted.truncated_chunk_ids,
                "omitted_chunk_ids": fitted.omitted_chunk_ids,
                "question_truncated": fitted.question_truncated,
            }
        )

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's own ``model_decision`` PASS, beside ``passes`` computed from the cited share."""
        if not isinstance(verdict, CitationVerdict) or not verdict.model_called:
            return None
        return verdict.model_decision == "PASS"
