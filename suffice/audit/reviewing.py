"""What a review's values mean: labels, the machine's label, how many reviewers must agree, and when they do.

A reviewer decides ``answer``, ``refine_retrieval`` or ``unanswerable`` and may correct the label: whether the
context was *sufficient*.  Without a correction the decision implies it (``answer``: sufficient; the other two:
not).  A review closes when as many distinct reviewers as it requires chose the same decision and label; until
then it stays open, and decisions that differ leave it *disputed*.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol

from suffice.exceptions import AuditError
from suffice.gates import gate_class
from suffice.gates.roles import decision_of
from suffice.results import (
    MAX_ANSWER_CHARS,
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    AnswerFrom,
    QueriesFrom,
    ReviewEvent,
    ReviewOutcome,
)

REVIEW_DECISIONS = ("answer", "refine_retrieval", "unanswerable")
Label = Literal["sufficient", "insufficient"]
LABELS: tuple[Label, ...] = ("sufficient", "insufficient")
#: Reviewers a HIGH-risk review needs unless its enqueuer says otherwise: the seed's high stakes, two people.
HIGH_RISK_REVIEWERS = 2
#: The most reviewers a review may require.
MAX_REVIEWERS = 5


def label_text(sufficient: bool | None) -> Label | None:
    return None if sufficient is None else ("sufficient" if sufficient else "insufficient")


def implied_label(decision: str) -> Label:
    """The label a decision implies when the reviewer gives none: only ``answer`` says the context sufficed."""
    return "sufficient" if decision == "answer" else "insufficient"


def machine_label(gate: str | None, payload: Mapping[str, Any]) -> Label | None:
    """The machine's answer to "was the context sufficient?" from the verdict in ``payload``: the decision that
    routes (adequacy's computed PASS, not the model's opinion), else the gate's decision field.  ``None``
    without a verdict (two failed generations) or for a verdict of a shape not known."""
    verdict = payload.get("verdict")
    if not isinstance(verdict, Mapping):
        return None
    computed = verdict.get("decision")
    if isinstance(computed, Mapping) and computed.get("decision") in ("PASS", "FAIL"):
        return label_text(computed["decision"] == "PASS")
    if isinstance(verdict.get("is_sufficient"), bool):
        return label_text(verdict["is_sufficient"] and verdict.get("forced_by") is None)
    try:
        cls = gate_class(str(gate))
    except Exception:  # a gate not installed here: its verdicts still show, unlabeled
        return None
    token = decision_of(cls)
    if token is not None and token.key in verdict:
        return label_text(json.dumps(verdict[token.key]) == token.positive)
    return None


def _high_risk(payload: Mapping[str, Any]) -> bool:
    return any(
        isinstance(place, Mapping)
        and (str(place.get("risk_level", "")).upper() == "HIGH" or place.get("high_stakes") in (True, "true", "True"))
        for place in (payload, payload.get("verdict"), payload.get("settings"))
    )


def reviewers_for(payload: Mapping[str, Any]) -> int:
    """How many independent reviewers a review of ``payload`` needs: a ``reviewers`` number the payload or its
    ``settings`` give (a rubric's or a run's setting), else :data:`HIGH_RISK_REVIEWERS` for HIGH risk (an
    adequacy rubric at HIGH, a high-stakes recovery threshold), else one."""
    for place in (payload, payload.get("settings")):
        if isinstance(place, Mapping) and place.get("reviewers") is not None:
            try:
                return min(MAX_REVIEWERS, max(1, int(place["reviewers"])))
            except (TypeError, ValueError):
                break
    return HIGH_RISK_REVIEWERS if _high_risk(payload) else 1


def decision_fields(decision: str, answer: object = None, queries: object = None) -> dict[str, Any]:
    """A reviewer's ``answer`` (for ``answer``) and ``queries`` (for ``refine_retrieval``) as a decision entry keeps
    them: only those given, stripped, each query once.  An :class:`AuditError` names a field given for another
    decision, not text, blank, too long, a query of more than one line, or too many queries."""
    fields: dict[str, Any] = {}
    if answer is not None:
        if decision != "answer":
            raise AuditError(f"answer: only an 'answer' decision carries one, not {decision!r}")
        if not isinstance(answer, str):
            raise AuditError(f"answer: must be text, not {type(answer).__name__}")
        text = answer.strip()
        if not text:
            raise AuditError("answer: is blank (leave it out to approve the response under review)")
        if len(text) > MAX_ANSWER_CHARS:
            raise AuditError(f"answer: {len(text)} characters; at most {MAX_ANSWER_CHARS}")
        fields["answer"] = text
    if queries is not None:
        if decision != "refine_retrieval":
            raise AuditError(f"queries: only a 'refine_retrieval' decision carries them, not {decision!r}")
        # A string is a sequence of one-letter queries: refused, not searched letter by letter.
        if isinstance(queries, str) or not isinstance(queries, (list, tuple)):
            raise AuditError(f"queries: must be a list of queries, not {type(queries).__name__}")
        if not 1 <= len(queries) <= MAX_QUERIES:
            raise AuditError(
                f"queries: {len(queries)} given; from 1 to {MAX_QUERIES} (leave it out to search the note's lines)"
            )
        kept: dict[str, None] = {}
        for index, query in enumerate(queries):
            if not isinstance(query, str):
                raise AuditError(f"queries[{index}]: must be text, not {type(query).__name__}")
            text = query.strip()
            if not text:
                raise AuditError(f"queries[{index}]: is blank")
            if "\n" in text or "\r" in text:
                raise AuditError(f"queries[{index}]: one line each (give each query on its own)")
            if len(text) > MAX_QUERY_CHARS:
                raise AuditError(f"queries[{index}]: {len(text)} characters; at most {MAX_QUERY_CHARS}")
            kept[text] = None
        fields["queries"] = list(kept)
    return fields


def _agreement(entry: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """What reviewers must share to agree: the decision, the label and, for ``answer``, the answer delivered (a
    written one, or ``None``: the response under review).  Two people who approve different texts have not
    agreed on what the user gets.  Queries need not match: each is searched."""
    written = entry.get("answer")
    return str(entry.get("decision")), str(entry.get("label")), written if isinstance(written, str) else None


def agreed(decisions: Sequence[Mapping[str, Any]], required: int) -> list[Mapping[str, Any]] | None:
    """The decisions of the first ``required`` reviewers who chose the same decision and label (and, for
    ``answer``, the same answer), or ``None``."""
    groups: dict[tuple[str, str, str | None], list[Mapping[str, Any]]] = {}
    for entry in decisions:
        group = groups.setdefault(_agreement(entry), [])
        group.append(entry)
        if len(group) >= required:
            return group
    return None


def state_of(review: Mapping[str, Any]) -> str:
    """``resolved``; ``open`` (no decision yet); ``awaiting`` (fewer decisions than reviewers required);
    ``disputed`` (enough decisions, no agreement)."""
    if review.get("status") == "resolved":
        return "resolved"
    decisions = decisions_of(review)
    if not decisions:
        return "open"
    return "awaiting" if len(decisions) < int(review.get("reviewers") or 1) else "disputed"


def decisions_of(review: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The review's decisions so far (its ``decisions`` column parsed; ``[]`` if it does not parse)."""
    value = review.get("decisions")
    if isinstance(value, list):
        return value
    try:
        parsed = json.loads(value or "[]")
    except (TypeError, ValueError):
        return []
    return parsed if isinstance(parsed, list) else []


# -- what the application learns of a decision (suffice.results) ------------------------------------------
#: The ``rule`` of the evaluation row that records a person's decision applied (``Pipeline.resume``): one per review.
APPLIED_RULE = "review_applied"


class _Reads(Protocol):
    """The audit log, read (an :class:`~suffice.audit.AuditLog`; named so, since it imports this module)."""

    def _select(self, query: str, params: Sequence[Any]) -> Iterator[dict[str, Any]]: ...


def review_log_id(db_id: str) -> str:
    """The ``log_id`` of the review queue of the audit log whose database id is ``db_id``."""
    return hashlib.sha256(f"suffice-reviews:{db_id}".encode()).hexdigest()[:16]


def reviewers_answer(agreeing: Sequence[Mapping[str, Any]]) -> str | None:
    """The answer the agreeing reviewers gave in the field (they agree on it: :func:`agreed`), or ``None``."""
    return next((d["answer"] for d in agreeing if isinstance(d.get("answer"), str)), None)


def reviewers_queries(agreeing: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The queries the agreeing reviewers gave in the field, each once, in order; ``None`` when none gave it."""
    given = [d["queries"] for d in agreeing if isinstance(d.get("queries"), list)]
    if not given:
        return None
    return list(dict.fromkeys(str(q) for queries in given for q in queries))


def review_outcome(review: Mapping[str, Any], log_id: str) -> ReviewOutcome:
    """What the application learns of ``review`` (a ``reviews`` row): pending, or the agreed decision with who, the
    answer to deliver (the reviewers' own, else the response under review, else its verdict's) or the queries to
    search (the reviewers' own, else their notes' lines), and where each came from."""
    try:
        payload = json.loads(review.get("payload") or "{}")
    except (TypeError, ValueError):
        payload = {}
    payload = payload if isinstance(payload, dict) else {}
    decided = review.get("status") == "resolved"
    decision = review.get("decision") if decided else None
    decisions = decisions_of(review)
    agreeing: Sequence[Mapping[str, Any]] = []
    if decided:
        # The group that closed it, as resolve_review found it; failing that (decisions that never agreed: a log
        # altered by hand, which verify names), those that match the resolution.
        agreeing = agreed(decisions, int(review.get("reviewers") or 1)) or [
            d for d in decisions if (d.get("decision"), d.get("label")) == (decision, review.get("label"))
        ]
    queries: list[str] = []
    queries_from: QueriesFrom | None = None
    if decision == "refine_retrieval":
        given = reviewers_queries(agreeing)
        if given is not None:
            queries, queries_from = given, "reviewers"
        else:  # decided without the field: the notes, a query a line
            notes = (line.strip() for entry in agreeing for line in str(entry.get("note") or "").splitlines())
            queries = list(dict.fromkeys(line for line in notes if line))
            queries_from = "notes" if queries else None
    answer: str | None = None
    answer_from: AnswerFrom | None = None
    if decision == "answer":
        verdict = payload.get("verdict")
        candidates: tuple[tuple[AnswerFrom, object], ...] = (
            ("reviewers", reviewers_answer(agreeing)),
            ("response", payload.get("response")),
            ("verdict", verdict.get("answer") if isinstance(verdict, Mapping) else None),
        )
        for source, text in candidates:
            if isinstance(text, str) and text.strip():
                answer, answer_from = text, source
                break
    gap = payload.get("gap")
    return ReviewOutcome(
        review_id=int(review["id"]),
        log_id=log_id,
        state=state_of(review),  # type: ignore[arg-type]
        decided=decided,
        item_id=review.get("item_id"),
        run_id=review.get("run_id"),
        gate=review.get("gate"),
        rule=review.get("rule"),
        decision=decision,
        label=review.get("label") if decided else None,
        decided_by=[str(d.get("by")) for d in agreeing],
        decided_at=review.get("resolved_at") if decided else None,
        note=review.get("note") if decided else None,
        answer=answer,
        answer_from=answer_from,
        queries=queries,
        queries_from=queries_from,
        gap=[str(g) for g in gap] if isinstance(gap, list) else [],
        # Only once decided, for the application to act on: a client key must not read the open queue's records.
        record={key: payload.get(key) for key in ("question", "response", "chunks")} if payload and decided else None,
    )


def decided_events(log: _Reads, since: int, limit: int) -> tuple[list[ReviewEvent], int]:
    """The reviews resolved after event ``since`` (``review_events.seq``), oldest first, at most ``limit``, and the
    ``since`` to ask with next: the last event returned, or, when fewer than ``limit``, the last event there was
    before looking (read first, so no event committed meanwhile is passed over)."""
    head = review_head(log)
    rows = list(
        log._select(
            "SELECT e.seq AS cursor, r.* FROM review_events e JOIN reviews r ON r.id = e.review_id "
            "WHERE e.seq > ? AND e.seq <= ? AND e.event = 'resolved' ORDER BY e.seq LIMIT ?",
            (since, head, limit),
        )
    )
    events = [
        ReviewEvent(cursor=row["cursor"], **review_outcome(row, "").model_dump(include=set(ReviewEvent.model_fields)))
        for row in rows
    ]
    return events, (events[-1].cursor if len(events) == limit else max(head, since))


def review_head(log: _Reads) -> int:
    """The last review event's sequence number (0: none): whether anything changed, at the cost of one lookup."""
    # Lists, not a generator left half read: an unfinished statement would hold its read snapshot open.
    found = list(log._select("SELECT MAX(seq) AS head FROM review_events", ()))
    return int(found[0]["head"] or 0)


def applied_outcome(log: _Reads, log_id: str, review_id: int) -> str | None:
    """What applying review ``review_id`` of queue ``log_id`` gave (its row's ``raw_output``), or ``None``: not yet
    applied here."""
    found = list(
        log._select(
            "SELECT raw_output FROM evaluations WHERE rule = ? AND json_extract(verdict, '$.review_id') = ? "
            "AND json_extract(verdict, '$.log_id') = ? ORDER BY seq LIMIT 1",
            (APPLIED_RULE, review_id, log_id),
        )
    )
    return str(found[0]["raw_output"]) if found else None
