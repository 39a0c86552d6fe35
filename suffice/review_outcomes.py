"""What a person decided on a review, as the application that sent the record reads it.

``suffice serve`` answers these on ``GET /v1/reviews/{id}/outcome`` and ``GET /v1/reviews/events`` with the
service's client key (a reviewer's key decides; the application only learns), :class:`~suffice.Client` reads them,
and :meth:`~suffice.harness.pipeline.Pipeline.resume` acts on them.  They live below the client, the audit log and
the server, which all build or read them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: The longest ``wait`` of ``GET /v1/reviews/events``, in seconds: a long poll holds a connection, never for long.
MAX_EVENTS_WAIT_S = 30.0
#: The most events one answer of ``GET /v1/reviews/events`` holds; ``next`` continues past them.
MAX_EVENTS = 100
#: A reviewer's decision fields (:meth:`~suffice.audit.AuditLog.resolve_review`): the longest ``answer``, in
#: characters; the most ``queries`` and the longest query.  A decision with all of them and a note still fits the
#: review routes' body limit (``suffice.server.reviews.REVIEW_BODY_BYTES``).
MAX_ANSWER_CHARS = 10_000
MAX_QUERIES = 10
MAX_QUERY_CHARS = 500

Decision = Literal["answer", "refine_retrieval", "unanswerable"]
ReviewState = Literal["open", "awaiting", "disputed", "resolved"]
#: Where an outcome's ``answer`` came from: the reviewers wrote it, the response under review, its verdict's answer.
AnswerFrom = Literal["reviewers", "response", "verdict"]
#: Where an outcome's ``queries`` came from: the reviewers' queries field, or their notes (one query a line).
QueriesFrom = Literal["reviewers", "notes"]


class ReviewOutcome(BaseModel):
    """A review's outcome: pending (``decided`` false: open, awaiting a further reviewer, or disputed) or the
    decision the reviewers agreed on, with who and when.

    What each decision hands the application: ``answer`` the answer to deliver (the one the reviewers wrote, else the
    response under review, else the answer its verdict wrote: ``answer_from`` says which); ``queries`` for
    ``refine_retrieval``, what to search (the reviewers' queries, else their notes' lines: ``queries_from``);
    ``note`` the reviewers' notes (an ``unanswerable`` abstention shows it).  ``record`` is the record as queued
    (question, response, chunks): what the application sent, which a re-retrieval starts from."""

    model_config = ConfigDict(frozen=True)

    review_id: int
    #: Which review queue: a review id is unique within one audit log only (a digest of its database id).
    log_id: str
    state: ReviewState
    decided: bool
    item_id: str | None = None
    #: The request (``suffice serve``: its ``X-Request-ID``) or harness run that queued it.
    run_id: str | None = None
    gate: str | None = None
    #: The rule that sent it to a person (``suffice.grammars.routes.REVIEW_RULES``).
    rule: str | None = None
    decision: Decision | None = None
    label: Literal["sufficient", "insufficient"] | None = None
    #: The reviewers who agree (two or more where the review needed them).
    decided_by: list[str] = Field(default_factory=list)
    decided_at: str | None = None
    note: str | None = None
    answer: str | None = None
    answer_from: AnswerFrom | None = None
    queries: list[str] = Field(default_factory=list)
    queries_from: QueriesFrom | None = None
    #: What the gate said was missing, as queued.
    gap: list[str] = Field(default_factory=list)
    record: dict[str, Any] | None = None


class ReviewEvent(BaseModel):
    """One review decided: ``cursor`` orders the events (pass the last one seen as ``since``)."""

    model_config = ConfigDict(frozen=True)

    cursor: int
    review_id: int
    item_id: str | None = None
    run_id: str | None = None
    gate: str | None = None
    rule: str | None = None
    decision: Decision
    label: Literal["sufficient", "insufficient"] | None = None
    decided_by: list[str] = Field(default_factory=list)
    decided_at: str | None = None


class ReviewEvents(BaseModel):
    """The reviews decided after ``since``, oldest first, at most :data:`MAX_EVENTS`; ``next`` is the ``since`` of
    the following call (past every event looked at, so a call that found none moves on too)."""

    model_config = ConfigDict(frozen=True)

    log_id: str
    events: list[ReviewEvent]
    next: int
