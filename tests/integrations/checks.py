"""What the tests of the integrations' answer checks (Haystack's ``AnswerCheck``, LlamaIndex's ``ResponseCheck``)
share: the questions and answers, and a scripted recovery engine that labels the answer's segments by the question.

- :data:`QUESTION`: every segment supported by sources 0 and 1 (the default, strict threshold wants two distinct
  supporting passages to deliver);
- :data:`UNKNOWN`: every segment unsupported, with :data:`NOTICE` and :data:`QUERIES`;
- :data:`PARTLY_QUESTION`: the first segment supported by source 1, the rest unsupported (a partial answer: a person
  reviews it under the strict threshold, the loose one delivers it marked).

Sources are numbered in the order the documents are given (one source a document: the integrations set no
``source``, so a document's source id is its id), so source 0 is the first document and source 1 the second.
"""

from __future__ import annotations

from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.grammar import parse_citations
from suffice.serving.base import GenerationRequest
from tests.fakes import recovery_reply

QUESTION = "When did Apollo 11 launch?"
ANSWER = "Apollo 11 launched on 16 July 1969."
UNKNOWN = "When did the unknown probe launch?"
UNKNOWN_ANSWER = "The unknown probe launched in 1999."
PARTLY_QUESTION = "When did Apollo 11 partly launch?"
PARTLY = "Apollo 11 launched. It launched in July."
NOTICE = "No passage gives the date."
QUERIES = ["unknown probe launch date"]
MARKER = "[UNSUPPORTED]"


def recovery_script(request: GenerationRequest) -> str:
    """The recovery window's output by the question (see the module docstring)."""
    prompt = request.messages[-1]["content"]
    if "unknown" in prompt:
        return recovery_reply(request, "unsupported", notice=NOTICE, queries=QUERIES)
    if "partly" in prompt:
        return recovery_reply(
            request,
            lambda index, text: ("supported", [1]) if index == 0 else "unsupported",
            notice="No passage gives the month.",
            queries=["Apollo 11 launch month"],
        )
    return recovery_reply(request, lambda index, text: ("supported", [0, 1]))


def cited(first: str, second: str) -> str:
    """:data:`ANSWER` as a delivery cites it: supported by the first two documents, by their source ids."""
    return f"{ANSWER}[CITATION:{first}][CITATION:{second}]"


def partly_cited(second: str) -> str:
    """:data:`PARTLY` as the loose threshold delivers it: its first sentence cited (the second document), its
    second marked unsupported."""
    return f"Apollo 11 launched.[CITATION:{second}] It launched in July.{MARKER}"


def citations(text: str) -> list[str]:
    """The source ids a delivered text cites, in order; the text without them must be the answer as given."""
    return parse_citations(text)


def uncited(text: str) -> str:
    return strip_markers(text, MARKER)
