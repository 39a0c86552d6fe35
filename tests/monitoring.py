"""Scripted model outputs that take every route, shared by the monitoring tests of the
batch summary and of ``/metrics``: the adequacy gate routes by a decision computed from
the rubric, so its model can be overridden, and a FAIL routes by the model's recommendation.
"""

from __future__ import annotations

import json

from suffice.gates.adequacy.grammar import DIMENSIONS
from suffice.serving.base import GenerationRequest
from tests.adequacy import criteria

#: By the word in the question: the model's decision, every dimension's score, its recommendation.
OUTPUTS: dict[str, tuple[str, float, str]] = {
    "deliver": ("PASS", 0.9, "PROCEED_WITH_ANSWER"),  # agrees: PASS, deliver
    "overridden": ("PASS", 0.1, "FLAG_AS_UNANSWERABLE"),  # the rubric's FAIL overrides the model's PASS: abstain
    "review": ("FAIL", 0.1, "ESCALATE_TO_HUMAN"),  # agrees: FAIL, human review
    "more": ("FAIL", 0.1, "RETRIEVE_MORE"),  # agrees: FAIL, retrieve more
}


#: The rubric every record names.
RUBRIC = "customer-support"


def adequacy_output(decision: str, score: float, recommendation: str) -> str:
    return json.dumps(
        {
            "adequacy_decision": decision,
            "adequacy_score": score,
            "criteria": criteria(RUBRIC, score),
            "dimensions": {d: {"score": score, "assessment": "a"} for d in DIMENSIONS},
            "missing_information": [] if decision == "PASS" else ["more evidence"],
            "recommendation": recommendation,
            "rationale": "r",
        }
    )


def scripted(request: GenerationRequest) -> str:
    """The output for the case the question names (``Case <word>?``)."""
    text = request.messages[-1]["content"]
    case = next(word for word in OUTPUTS if f"Case {word}?" in text)
    return adequacy_output(*OUTPUTS[case])


def record(case: str, i: int = 0) -> dict[str, object]:
    return {
        "id": f"{case}{i}",
        "question": f"Case {case}?",
        "chunks": [{"id": "c0", "text": "Some evidence."}],
        "rubric": RUBRIC,
    }
