"""The JSON contract of ``/v1/reviews``, typed in the OpenAPI document, and the audit log's rows read into it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, model_validator

from suffice.audit import LABELS, AuditLog
from suffice.audit.reviewing import decision_fields, decisions_of, state_of
from suffice.exceptions import AuditError
from suffice.results import MAX_ANSWER_CHARS, MAX_QUERIES, MAX_QUERY_CHARS

#: Characters of a note.
MAX_NOTE_CHARS = 10_000
State = Literal["open", "awaiting", "disputed", "resolved"]
Decision = Literal["answer", "refine_retrieval", "unanswerable"]
Label = Literal["sufficient", "insufficient"]


class ReviewerDecision(BaseModel):
    by: str
    decision: Decision
    label: Label
    note: str | None = None
    #: For ``answer``: the answer this reviewer wrote (none: the response under review).
    answer: str | None = None
    #: For ``refine_retrieval``: the queries this reviewer gave (none: the note's lines).
    queries: list[str] | None = None
    at: str


class ReviewSummary(BaseModel):
    """A review in the queue."""

    id: int
    created_at: str
    gate: str | None
    item_id: str | None
    rule: str | None
    reason: str | None
    #: ``open``, ``awaiting`` (fewer decisions than reviewers required), ``disputed`` or ``resolved``.
    state: State
    reviewers: int
    decisions_recorded: int
    machine_label: Label | None
    decision: str | None = None
    label: str | None = None
    resolved_by: str | None = None
    resolved_at: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any], **more: Any) -> Self:
        """The summary of an audit log's review row (``more``: a :class:`ReviewDetail`'s other fields)."""
        label = row.get("machine_label")
        return cls.model_validate(
            {key: row.get(key) for key in _COLUMNS}
            | {"state": state_of(row), "reviewers": int(row.get("reviewers") or 1)}
            | {"decisions_recorded": len(decisions_of(row)), "machine_label": label if label in LABELS else None}
            | more
        )


#: The fields of a :class:`ReviewSummary` that are the review row's columns as they are.
_COLUMNS = ("id", "created_at", "gate", "item_id", "rule", "reason", "decision", "label", "resolved_by", "resolved_at")


class ReviewDetail(ReviewSummary):
    """One review: what the payload holds (question, response, chunks, verdict, rule, settings, as queued),
    the evaluation row it points at, and the decisions a reviewer may see (others' stay hidden until the
    review is disputed or resolved: reviewers decide independently)."""

    run_id: str | None = None
    evaluation_seq: int | None = None
    note: str | None = None
    payload: Any
    evaluation: dict[str, Any] | None = None
    decisions: list[ReviewerDecision]

    @classmethod
    def read(cls, log: AuditLog, review_id: int, reviewer: str) -> Self:
        """Review ``review_id`` as ``reviewer`` may see it, with the evaluation row it points at."""
        row = log.review(review_id)
        try:
            payload = json.loads(row["payload"])
        except (TypeError, ValueError):
            payload = {"unreadable payload (run `suffice audit verify`)": str(row["payload"])}
        state = state_of(row)
        decisions = []
        for entry in decisions_of(row):
            if state in ("disputed", "resolved") or entry.get("by") == reviewer:
                try:
                    decisions.append(ReviewerDecision.model_validate(entry))
                except ValueError:
                    continue
        return cls.of(
            row,
            **{key: row.get(key) for key in ("run_id", "evaluation_seq", "note")},
            payload=payload,
            evaluation=_evaluation(log, row.get("evaluation_seq")),
            decisions=decisions,
        )


def _evaluation(log: AuditLog, seq: int | None) -> dict[str, Any] | None:
    """The evaluation row a review points at: its decision and scores (``None`` without one)."""
    row = None if seq is None else log.evaluation(seq)
    if row is None:
        return None
    out = {key: row.get(key) for key in ("seq", "ts", "gate", "decision", "prompt_version", "model_id")}
    try:
        out["scores"] = json.loads(row["scores"]) if row.get("scores") else None
    except ValueError:
        out["scores"] = row.get("scores")
    return out


class ReviewList(BaseModel):
    reviews: list[ReviewSummary]


class DecisionRequest(BaseModel):
    decision: Decision
    #: The reviewer's correction of the label; default what the decision implies.
    label: Label | None = None
    note: str | None = Field(default=None, max_length=MAX_NOTE_CHARS)
    #: For ``answer`` only: the answer to deliver, approved or written (default: the response under review).
    answer: str | None = Field(default=None, max_length=MAX_ANSWER_CHARS)
    #: For ``refine_retrieval`` only: the queries to search, one line each (default: the note's lines).
    queries: list[Annotated[str, Field(max_length=MAX_QUERY_CHARS)]] | None = Field(
        default=None, max_length=MAX_QUERIES
    )

    @model_validator(mode="after")
    def _fields_fit_the_decision(self) -> DecisionRequest:
        # The audit log's own check, here too, so a bad field is a 422 naming it and not the log's 503.
        try:
            decision_fields(self.decision, self.answer, self.queries)
        except AuditError as exc:
            raise ValueError(str(exc)) from None
        return self


class DecisionAnswer(BaseModel):
    review_id: int
    resolved: bool
    state: State
    decisions: int
    required: int
    #: The reviewers who agree, once it is resolved.
    agreed_by: list[str]
    message: str
