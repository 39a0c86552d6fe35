"""A suffice gate of its own: does each sentence of ``response`` cite a chunk that supports it?

Written only against suffice's public API and registered under the ``suffice.gates`` entry point
(``pyproject.toml``).  It is a gate's core (options, template, constraint, parse, route) plus what it
declares: a decision token (``--detail decision``) and the option a calibrated threshold sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

import suffice
from suffice.grammars import Constraint, alt, json_list, lit, seq

MAX_SENTENCES = 16  # sentences checked per response; later ones are counted as unchecked


def sentences_of(response: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", response.strip()) if s.strip()]


class CitationOptions(suffice.GateOptions):
    min_cited_share: float = Field(1.0, ge=0.0, le=1.0, description="the share of sentences that must cite a chunk")
    per_request = frozenset({"min_cited_share"})


class SentenceCitation(BaseModel):
    sentence: str
    chunk_id: int | str | None = None  # the caller's id of the chunk cited


class CitationVerdict(BaseModel):
    citations: list[SentenceCitation]
    model_decision: Literal["PASS", "FAIL"]
    cited_share: float = Field(ge=0.0, le=1.0)
    passes: bool  # decided in code: cited_share >= min_cited_share
    unchecked_sentences: int = 0  # past MAX_SENTENCES, or given no entry by the model
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
    template = suffice.load_prompt(Path(__file__).parent / "templates", "citation", "v2")
    verdict_model = CitationVerdict
    needs_response = True
    decision_key, decision_json_values, positive_value = "decision", ('"PASS"', '"FAIL"'), '"PASS"'
    saveable_scores, threshold_option = ("cited_share",), "min_cited_share"
    options: CitationOptions

    def verdict(self, item: suffice.Item, labels: list[int | None], ids: Sequence[Any], said: str) -> CitationVerdict:
        sentences = sentences_of(item.response or "")
        checked = min(len(sentences), MAX_SENTENCES)
        given = labels[:checked]
        pairs = zip(sentences[:checked], given + [None] * (checked - len(given)), strict=True)
        citations = [SentenceCitation(sentence=s, chunk_id=None if n is None else ids[n]) for s, n in pairs]
        share = sum(c.chunk_id is not None for c in citations) / len(sentences) if sentences else 0.0
        return CitationVerdict(
            citations=citations,
            model_decision=said,  # type: ignore[arg-type]
            cited_share=share,
            passes=bool(sentences) and share >= self.options.min_cited_share,
            unchecked_sentences=len(sentences) - len(given),
            prompt_version=self.prompt_version,
        )

    def route(self, verdict: BaseModel) -> suffice.Routing:
        assert isinstance(verdict, CitationVerdict)
        uncited = [c.sentence for c in verdict.citations if c.chunk_id is None]
        why = f"{verdict.cited_share:.2f} of the sentences cite a chunk (need {self.options.min_cited_share:.2f})"
        scores = {"cited_share": verdict.cited_share, "p_pass": verdict.p_pass}
        if verdict.passes:
            return suffice.Routing("deliver", why, scores=scores)
        return suffice.Routing("abstain", why, gap=uncited, queries=uncited, scores=scores)

    def shortcut(self, item: suffice.Item) -> CitationVerdict | None:
        if item.has_evidence:
            return None
        return self.verdict(item, [], [], "FAIL").model_copy(update={"model_called": False})

    def constraint_for(self, shown: Sequence[suffice.Chunk]) -> suffice.Constraint:
        label = alt(lit("null"), *[lit(str(i)) for i in range(len(shown))])
        decision = alt(*[lit(v) for v in self.decision_json_values])
        rx = seq(lit('{"citations":'), json_list(label, 1, MAX_SENTENCES), lit(',"decision":'), decision, lit("}"))
        return Constraint.from_rx(rx, key=f"citation/{len(shown)}")

    def user_context(self, item: suffice.Item) -> dict[str, Any]:
        return {"sentences": sentences_of(item.response or "")[:MAX_SENTENCES]}

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        return verdict if probabilities is None else verdict.model_copy(update={"p_pass": probabilities['"PASS"']})

    def parse(self, text: str, fitted: suffice.FittedPrompt, item: suffice.Item) -> CitationVerdict:
        try:
            output = _Output.model_validate_json(text)
        except ValidationError as exc:
            raise suffice.VerdictError(f"output is not a valid citation verdict: {exc}", text) from exc
        outside = [n for n in output.citations if n is not None and n >= len(fitted.shown)]
        if outside:
            raise suffice.VerdictError(f"citations name {outside}, not among the {len(fitted.shown)} shown", text)
        fitting = {k: getattr(fitted, k) for k in ("truncated_chunk_ids", "omitted_chunk_ids", "question_truncated")}
        return self.verdict(item, output.citations, fitted.chunk_ids, output.decision).model_copy(update=fitting)
