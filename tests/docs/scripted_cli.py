"""The ``suffice`` command with a scripted model, for the docs' shell examples.

``python -m tests.docs.scripted_cli ARGS`` is ``suffice ARGS`` with everything real but the engine: each
engine kind is a scripted one that writes a valid output for any built-in gate (see :func:`answer`), as
``tests.server.scripted_serve`` does for ``suffice serve`` alone.  tests/docs/test_examples.py puts it on
``PATH`` as ``suffice``.
"""

from __future__ import annotations

import json
import re
import sys

from suffice.cli.main import main
from suffice.gates.adequacy.grammar import DIMENSIONS
from suffice.serving import factory
from suffice.serving.base import GenerationRequest
from tests.adequacy import criteria, rubric_of
from tests.fakes import ScriptedEngine, prompt_segments, recovery_reply

#: Words too common to tell a chunk that answers from one that does not.
_COMMON = {"what", "when", "which", "where", "does", "have", "with", "from", "that", "this", "many", "much"}


def _covered(prompt: str) -> bool:
    """Whether a chunk of a sufficiency prompt holds a word of the question (four letters or more): the scripted
    model's idea of sufficient, so a doc's "not sufficient" example is not sufficient here either."""
    question, _, chunks = prompt.partition("<<chunk")
    chunks = chunks.split("<<end", 1)[0].lower()
    lines = [line for line in question.splitlines()[1:] if not line.startswith("<<")]
    words = {w for w in re.findall(r"[a-z0-9]+", " ".join(lines).lower()) if len(w) >= 4} - _COMMON
    return any(word in chunks for word in words)


def _sufficiency(request: GenerationRequest) -> str:
    sufficient = _covered(request.messages[-1]["content"])
    verdict: dict[str, object] = {
        "required_entities": [{"entity": "the answer", "covered": sufficient}],
        "contradictions": [],
        "reasoning": "A chunk answers." if sufficient else "No chunk answers.",
        "is_sufficient": sufficient,
        "missing_information": [] if sufficient else ["the answer"],
        "confidence": 0.8,
        "useful_chunk_ids": [0] if sufficient else [],
    }
    for extra in ({}, {"retrieval_queries": [] if sufficient else ["the answer"]}):
        text = json.dumps({**verdict, **extra}, separators=(",", ":"))
        if request.constraint.matches(text):
            return text
    raise AssertionError(f"no scripted sufficiency output matches the constraint: {text}")


def _adequacy(rubric: str) -> str:
    return json.dumps(
        {
            "adequacy_decision": "PASS",
            "adequacy_score": 0.9,
            "criteria": criteria(rubric),
            "dimensions": {d: {"score": 0.9, "assessment": "a"} for d in DIMENSIONS},
            "missing_information": [],
            "recommendation": "PROCEED_WITH_ANSWER",
            "rationale": "r",
        },
        separators=(",", ":"),
    )


def answer(request: GenerationRequest) -> str:
    """A valid output for the gate the prompt is of: every answer segment supported by every source, every
    adequacy criterion and dimension met, and sufficient context where a chunk names the question's words."""
    if prompt_segments(request):
        shown = re.findall(r"^<<chunk \d+ [^>]*?\bsource=(\d+)", request.messages[-1]["content"], re.M)
        sources = sorted({int(source) for source in shown}) or [0]
        return recovery_reply(request, lambda index, text: ("supported", sources))
    if "**Adequacy Rubric (" in request.messages[0]["content"]:
        return _adequacy(rubric_of(request))
    return _sufficiency(request)


class DocsEngine(ScriptedEngine):
    def __init__(self, config: object) -> None:
        super().__init__(answer)


if __name__ == "__main__":
    factory.engine_class = lambda kind: DocsEngine  # type: ignore[assignment]
    sys.exit(main(sys.argv[1:]))
