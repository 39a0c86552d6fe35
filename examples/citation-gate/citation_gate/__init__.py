"""A suffice gate of its own: does each sentence of ``response`` cite a chunk that supports it?

Written only against suffice's public API and registered under the ``suffice.gates`` entry point
(``pyproject.toml``).  A gate's core is its options, its template, the JSON the model writes (``Output``: suffice
derives the constraint and the parse from it), the verdict computed from that output in code and its route.
Beside the core it declares a decision token (``--detail decision``, its values read from ``Output.decision``)
and the option a calibrated threshold sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

import suffice
from suffice.grammars import ChunkLabel

MAX_SENTENCES = 16  # sentences checked per response; later ones are counted as unchecked


def sentences_of(response: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", response.strip()) if s.strip()]


@dataclass(frozen=True)
class CitationOptions(suffice.GateOptions):
    min_cited_share: float = suffice.setting(
        1.0, "the share of sentences that must cite a chunk", minimum=0.0, maximum=1.0, per_request=True
    )


class Output(BaseModel):
    """What the model writes: for each sentence the label of a chunk that supports it, or null."""

    citations: list[ChunkLabel | None] = Field(max_length=MAX_SENTENCES)
    decision: Literal["PASS", "FAIL"]


class SentenceCitation(BaseModel):
    sentence: str
    chunk_id: int | str | None = None  # the caller's id of the chunk cited


class CitationVerdict(suffice.Verdict):  # suffice.Verdict: passes, probability, prompt version, what fitting cut
    citations: list[SentenceCitation]
    model_decision: Literal["PASS", "FAIL"]
    cited_share: float = Field(ge=0.0, le=1.0)  # passes: cited_share >= min_cited_share
    unchecked_sentences: int = 0  # past MAX_SENTENCES, or given no entry by the model


class CitationGate(suffice.Gate):
    name = "citation"
    options_model = CitationOptions
    template = suffice.load_prompt(Path(__file__).parent / "templates", "citation", "v2")
    output_model, verdict_model = Output, CitationVerdict
    needs_response = True
    decision_key, positive_value = "decision", '"PASS"'
    saveable_scores, threshold_option = ("cited_share",), "min_cited_share"
    options: CitationOptions

    def user_context(self, item: suffice.Item) -> dict[str, Any]:
        return {"sentences": sentences_of(item.response or "")[:MAX_SENTENCES]}

    def from_output(self, output: Output, item: suffice.Item, chunk_ids: Sequence[Any]) -> CitationVerdict:
        sentences = sentences_of(item.response or "")
        checked = min(len(sentences), MAX_SENTENCES)
        given = output.citations[:checked]
        cited = [None if n is None else chunk_ids[n] for n in given] + [None] * (checked - len(given))
        share = sum(c is not None for c in cited) / len(sentences) if sentences else 0.0
        return CitationVerdict(
            citations=[SentenceCitation(sentence=s, chunk_id=c) for s, c in zip(sentences, cited, strict=False)],
            model_decision=output.decision,
            cited_share=share,
            passes=bool(sentences) and share >= self.options.min_cited_share,
            unchecked_sentences=len(sentences) - len(given),
        )

    def route(self, verdict: BaseModel) -> suffice.Routing:  # by default: deliver when it passes, else abstain
        assert isinstance(verdict, CitationVerdict)
        uncited = [c.sentence for c in verdict.citations if c.chunk_id is None]
        why = f"{verdict.cited_share:.2f} of the sentences cite a chunk (need {self.options.min_cited_share:.2f})"
        scores = {"cited_share": verdict.cited_share, "probability": verdict.probability}
        if verdict.passes:
            return suffice.Routing.deliver(self, verdict, why, scores=scores)
        return suffice.Routing("abstain", why, gap=uncited, queries=uncited, scores=scores)

    def shortcut(self, item: suffice.Item) -> CitationVerdict | None:  # no chunk to cite: FAIL, without the model
        return None if item.has_evidence else self.from_output(Output(citations=[], decision="FAIL"), item, [])
