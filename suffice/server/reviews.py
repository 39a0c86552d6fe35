"""The review desk of ``suffice serve --audit-db``: a page a person decides reviews on, and the same over JSON.

``/reviews`` is plain HTML: no script, no external asset, forms that post.  ``/v1/reviews`` is JSON, typed in the
OpenAPI document.  Reviewers authenticate with their own key (``--reviewer-keys FOLDER``: one key file per
reviewer, ``NAME.key`` as ``suffice audit keygen`` writes it, mode 0600), never with the service's client token:
the page logs in with the key and holds a session cookie (HttpOnly, SameSite=Strict), each form carrying the
session's CSRF token; the JSON routes take the key as ``Authorization: Bearer`` and read JSON bodies only, so no
other site's page can post a decision.  Every value shown is escaped: a chunk is text the retriever found, which
anyone may have written.  The application that sent a record learns the decision on two routes of its own, with the
client token (:mod:`suffice.server.outcomes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel, Field, ValidationError, model_validator

from suffice.audit import LABELS, REVIEW_DECISIONS, AuditLog, load_key
from suffice.audit.reviewing import decision_fields, decisions_of, review_log_id, state_of
from suffice.exceptions import AuditError, ConfigError, SufficeError, status_of
from suffice.review_outcomes import MAX_ANSWER_CHARS, MAX_QUERIES, MAX_QUERY_CHARS
from suffice.server.config import ServeConfig
from suffice.server.guards import BodyLimit
from suffice.server.metrics import Metrics
from suffice.server.outcomes import install as install_outcomes
from suffice.server.outcomes import is_client_path
from suffice.server.responses import error_responses

#: The page's paths and the JSON routes': answered with reviewer keys, not the service's client token.
PAGE = "/reviews"
API = "/v1/reviews"
COOKIE = "suffice_review"
#: Seconds a page session lasts.
SESSION_S = 8 * 3600
#: Sessions kept at once (the oldest go first).
MAX_SESSIONS = 4096
#: Characters of a note.
MAX_NOTE_CHARS = 10_000
#: Reviews a list shows (the newest first past it).
LIST_LIMIT = 1000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HEADERS = {
    # No script runs, nothing loads from elsewhere, no other site frames it or reads its address.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def load_reviewer_keys(folder: Path) -> dict[str, bytes]:
    """Reviewer name -> key from ``folder``'s ``NAME.key`` files (read by :func:`~suffice.audit.load_key`:
    hex, 32 bytes or more, mode 0600).  A :class:`ConfigError` names ``reviewer_keys``: no such folder, no key
    in it, a key file others may read, a name that is not a plain name, or one key for two reviewers."""
    where = str(folder)
    if not folder.is_dir():
        raise ConfigError("reviewer_keys", where, "is not a folder of NAME.key files (suffice audit keygen -o)")
    keys: dict[str, bytes] = {}
    for path in sorted(folder.glob("*.key")):
        name = path.stem
        if not _NAME.match(name):
            raise ConfigError("reviewer_keys", str(path), "a reviewer's name is letters, digits, '.', '_' or '-'")
        try:
            key = load_key(path)
        except ConfigError as exc:
            raise ConfigError("reviewer_keys", str(path), str(exc).partition(": ")[2] or str(exc)) from None
        for other, known in keys.items():
            if hmac.compare_digest(key, known):
                raise ConfigError("reviewer_keys", str(path), f"holds the same key as {other}: one key each")
        keys[name] = key
    if not keys:
        raise ConfigError("reviewer_keys", where, "holds no NAME.key file (suffice audit keygen -o FOLDER/NAME.key)")
    return keys


def reviewer_of(keys: Mapping[str, bytes], given: str) -> str | None:
    """The reviewer whose key ``given`` (hex) is, compared in constant time with every key."""
    try:
        raw = bytes.fromhex(given.strip())
    except ValueError:
        raw = b""
    found = None
    for name, key in keys.items():
        if hmac.compare_digest(raw, key):
            found = name
    return found


State = Literal["open", "awaiting", "disputed", "resolved"]


# -- the JSON contract ---------------------------------------------------------------------------------------
class ReviewerDecision(BaseModel):
    by: str
    decision: Literal["answer", "refine_retrieval", "unanswerable"]
    label: Literal["sufficient", "insufficient"]
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
    state: Literal["open", "awaiting", "disputed", "resolved"]
    reviewers: int
    decisions_recorded: int
    machine_label: Literal["sufficient", "insufficient"] | None
    decision: str | None = None
    label: str | None = None
    resolved_by: str | None = None
    resolved_at: str | None = None


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


class ReviewList(BaseModel):
    reviews: list[ReviewSummary]


class DecisionRequest(BaseModel):
    decision: Literal["answer", "refine_retrieval", "unanswerable"]
    #: The reviewer's correction of the label; default what the decision implies.
    label: Literal["sufficient", "insufficient"] | None = None
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
    state: Literal["open", "awaiting", "disputed", "resolved"]
    decisions: int
    required: int
    #: The reviewers who agree, once it is resolved.
    agreed_by: list[str]
    message: str


# -- the database, on a thread of its own ------------------------------------------------------------------
class ReviewDesk:
    """The audit log the reviews are read from and decided in: its own connection on one thread (SQLite)."""

    def __init__(self, config: ServeConfig) -> None:
        assert config.audit_db is not None
        #: Whether a request's headers hold a reviewer's key or a live page session (set by :func:`install`):
        #: :class:`ReviewPaths` asks it before any body is read.
        self.admits: Callable[[Mapping[str, str]], bool] = lambda headers: False
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="suffice-reviews")
        self._log: AuditLog = self._pool.submit(AuditLog, config.audit_db, config.audit_key).result()

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._pool.submit(fn, self._log, *args, **kwargs).result(timeout=60)

    def close(self) -> None:
        self._pool.submit(self._log.close).result()
        self._pool.shutdown()


def _evaluation(log: AuditLog, seq: int | None) -> dict[str, Any] | None:
    """The evaluation row a review points at: its decision and scores (``None`` without one)."""
    if seq is None:
        return None
    row = log.evaluation(seq)
    if row is None:
        return None
    out = {key: row.get(key) for key in ("seq", "ts", "gate", "decision", "prompt_version", "model_id")}
    try:
        out["scores"] = json.loads(row["scores"]) if row.get("scores") else None
    except ValueError:
        out["scores"] = row.get("scores")
    return out


def _summary(row: Mapping[str, Any]) -> ReviewSummary:
    return ReviewSummary(
        id=row["id"],
        created_at=row["created_at"],
        gate=row.get("gate"),
        item_id=row.get("item_id"),
        rule=row.get("rule"),
        reason=row.get("reason"),
        state=state_of(row),  # type: ignore[arg-type]
        reviewers=int(row.get("reviewers") or 1),
        decisions_recorded=len(decisions_of(row)),
        machine_label=row.get("machine_label") if row.get("machine_label") in LABELS else None,
        decision=row.get("decision"),
        label=row.get("label"),
        resolved_by=row.get("resolved_by"),
        resolved_at=row.get("resolved_at"),
    )


def _detail(row: Mapping[str, Any], evaluation: dict[str, Any] | None, reviewer: str) -> ReviewDetail:
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
    return ReviewDetail(
        **_summary(row).model_dump(),
        run_id=row.get("run_id"),
        evaluation_seq=row.get("evaluation_seq"),
        note=row.get("note"),
        payload=payload,
        evaluation=evaluation,
        decisions=decisions,
    )


# -- the page --------------------------------------------------------------------------------------------------
def e(value: object) -> str:
    """Any value as HTML text, escaped (quotes too: values go into attributes)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return html.escape(value, quote=True)


_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;justify-content:space-between;align-items:center}
header a{color:#fff}main{max-width:70em;margin:1em auto;padding:0 1em}
section{background:#fff;border:1px solid #d8dbe2;border-radius:6px;padding:.8em 1.1em;margin:.8em 0}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.05em;margin:.2em 0 .5em}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.3em .5em;border-bottom:1px solid #e6e8ee;
vertical-align:top}th{font-weight:600;color:#4a5163}
pre,.chunk{white-space:pre-wrap;word-break:break-word;background:#f7f8fa;padding:.5em;border-radius:4px;margin:.3em 0}
.tag{display:inline-block;padding:0 .5em;border-radius:3px;background:#e8ebf3;font-size:.85em}
.resolved{background:#d8f0dd}.disputed{background:#f8d7d7}.awaiting{background:#fff1c9}
.msg{background:#e3f0ff;border-color:#a9c8ee}label{margin-right:1.2em}textarea{width:100%;min-height:4em}
button{font-size:1em;padding:.35em 1.2em}
.for-answer,.for-refine{display:none}#decision-answer:checked~.for-answer{display:block}
#decision-refine_retrieval:checked~.for-refine{display:block}
.segment td:first-child{border-left:6px solid #c5cad6}.seg-supported td:first-child{border-left-color:#3b9a57}
.seg-partial td:first-child{border-left-color:#d9a21b}.seg-unsupported td:first-child{border-left-color:#c8423b}
.seg-unsupported{background:#fbeaea}.seg-partial{background:#fdf5e0}
"""


def _page(title: str, body: str, reviewer: str | None = None, csrf: str = "", status: int = 200) -> HTMLResponse:
    who = ""
    if reviewer is not None:
        who = (
            f'<form method="post" action="{PAGE}/logout">{e(reviewer)} '
            f'<input type="hidden" name="csrf" value="{e(csrf)}"><button type="submit">Log out</button></form>'
        )
    text = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)} · suffice reviews</title>'
        f'<meta name="viewport" content="width=device-width"><style>{_STYLE}</style></head><body>'
        f'<header><a href="{PAGE}"><b>suffice</b> · reviews</a>{who}</header><main>{body}</main></body></html>'
    )
    return HTMLResponse(text, status, headers=_HEADERS)


def _login_page(message: str = "", status: int = 200) -> HTMLResponse:
    note = f'<section class="msg">{e(message)}</section>' if message else ""
    body = (
        f'{note}<section><h1>Log in to review</h1><form method="post" action="{PAGE}/login">'
        '<p><label for="key">Your reviewer key</label><br>'
        '<input id="key" name="key" type="password" size="70" autocomplete="off" required></p>'
        '<button type="submit">Log in</button></form></section>'
    )
    return _page("Log in", body, status=status)


def _state_tag(state: str) -> str:
    return f'<span class="tag {e(state)}">{e(state)}</span>'


def _list_page(rows: list[ReviewSummary], shown: str, reviewer: str, csrf: str) -> HTMLResponse:
    other = "all" if shown == "open" else "open"
    lines = "".join(
        f'<tr><td><a href="{PAGE}/{r.id}">#{r.id}</a></td><td>{e(r.gate)}</td><td>{e(r.item_id)}</td>'
        f"<td>{e(r.rule or r.reason)}</td><td>{_state_tag(r.state)}</td>"
        f"<td>{r.decisions_recorded} of {r.reviewers}</td><td>{e(r.created_at)}</td></tr>"
        for r in rows
    )
    body = (
        f"<section><h1>{'Open reviews' if shown == 'open' else 'All reviews'} ({len(rows)})</h1>"
        f'<p><a href="{PAGE}?show={other}">show {other}</a></p>'
        "<table><tr><th>review</th><th>gate</th><th>item</th><th>rule</th><th>state</th><th>decided</th>"
        f"<th>queued</th></tr>{lines}</table></section>"
    )
    return _page("Reviews", body, reviewer, csrf)


def _flat(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf) of a verdict's scalars: its scores and decisions as rows of a table."""
    if isinstance(value, Mapping):
        for key, child in value.items():
            yield from _flat(child, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        if all(not isinstance(v, (Mapping, list)) for v in value):
            yield prefix, ", ".join(str(v) for v in value)
        else:
            for index, child in enumerate(value):
                yield from _flat(child, f"{prefix}[{index}]")
    else:
        yield prefix, value


def _table(pairs: Iterator[tuple[str, Any]] | list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in pairs)
    return f"<table>{rows}</table>"


def _criteria(criteria: Any) -> str:
    """An adequacy verdict's rubric criteria, one row each: number, text, critical or not, score, the score it is
    met at, met or not, the model's assessment; ``""`` unless ``criteria`` is a list of such entries."""
    if not isinstance(criteria, list) or not criteria:
        return ""
    if not all(isinstance(c, Mapping) and {"criterion", "text", "score", "assessment"} <= set(c) for c in criteria):
        return ""

    def yes_no(value: Any, yes: str, no: str) -> str:
        return "" if value is None else yes if value else no

    rows = "".join(
        f'<tr class="criterion"><td>{e(c["criterion"])}</td><td>{e(c["text"])}</td>'
        f"<td>{yes_no(c.get('critical'), 'critical', '')}</td><td>{e(c['score'])}</td><td>{e(c.get('minimum'))}</td>"
        f"<td>{yes_no(c.get('met'), 'met', 'not met')}</td><td>{e(c['assessment'])}</td></tr>"
        for c in criteria
    )
    head = "<tr><th>#</th><th>criterion</th><th></th><th>score</th><th>met at</th><th></th><th>assessment</th></tr>"
    return f"<table>{head}{rows}</table>"


#: How a reviewer reads each segment label (the colour is the row's class, ``seg-LABEL``).
_SEGMENT_LABELS = {
    "supported": "supported",
    "partial": "partly supported",
    "unsupported": "NOT supported",
    "no_claim": "no claim",
}


def _segments(segments: Any) -> str:
    """A recovery verdict's segments, one row each in the response's order, coloured by label: number, the
    segment's text, the label, the sources it cites; ``""`` unless ``segments`` is a list of such entries."""
    if not isinstance(segments, list) or not segments:
        return ""
    if not all(isinstance(s, Mapping) and {"index", "text", "label"} <= set(s) for s in segments):
        return ""
    rows = "".join(
        f'<tr class="segment seg-{e(s["label"])}"><td>{e(s["index"])}</td><td>{e(s["text"])}</td>'
        f"<td>{e(_SEGMENT_LABELS.get(str(s['label']), s['label']))}</td>"
        f"<td>{', '.join(e(source) for source in s.get('sources') or []) or '—'}</td></tr>"
        for s in segments
    )
    return f"<table><tr><th>#</th><th>segment</th><th>label</th><th>sources</th></tr>{rows}</table>"


def _chunks(chunks: Any) -> str:
    if not isinstance(chunks, list) or not chunks:
        return "<p>(none in the payload)</p>"
    parts = []
    for chunk in chunks:
        if isinstance(chunk, Mapping):
            about = [f"<b>{e(chunk.get('id'))}</b>"]
            if chunk.get("source") is not None:
                about.append(e(chunk.get("source")))
            if chunk.get("score") is not None:
                about.append(f"score {e(chunk.get('score'))}")
            parts.append(f'<div>{" · ".join(about)}<div class="chunk">{e(chunk.get("text"))}</div></div>')
        else:
            parts.append(f'<div class="chunk">{e(chunk)}</div>')
    return "".join(parts)


def _detail_page(review: ReviewDetail, reviewer: str, csrf: str, message: str = "") -> HTMLResponse:
    payload = review.payload if isinstance(review.payload, Mapping) else {"payload": review.payload}
    parts = [f'<section class="msg">{e(message)}</section>' if message else ""]
    parts.append(
        f"<section><h1>Review #{review.id} {_state_tag(review.state)}</h1>"
        + _table(
            [
                ("gate", review.gate),
                ("item", review.item_id),
                ("rule", review.rule),
                ("reason", review.reason),
                ("reviewers required", review.reviewers),
                ("decisions recorded", review.decisions_recorded),
                ("machine's label", review.machine_label or "(no verdict)"),
                ("queued", review.created_at),
            ]
        )
        + "</section>"
    )
    parts.append(f'<section><h2>Query</h2><div class="chunk">{e(payload.get("question"))}</div></section>')
    if payload.get("response") is not None:
        parts.append(f'<section><h2>Response</h2><div class="chunk">{e(payload.get("response"))}</div></section>')
    parts.append(f"<section><h2>Retrieved context</h2>{_chunks(payload.get('chunks'))}</section>")
    verdict = payload.get("verdict")
    if isinstance(verdict, Mapping):
        segments = _segments(verdict.get("segments"))
        if segments:
            parts.append(f"<section><h2>Response, segment by segment</h2>{segments}</section>")
            verdict = {k: v for k, v in verdict.items() if k != "segments"}  # shown once, as the table above
        criteria = _criteria(verdict.get("criteria"))
        if criteria:
            parts.append(f"<section><h2>Rubric criteria</h2>{criteria}</section>")
            verdict = {k: v for k, v in verdict.items() if k != "criteria"}  # shown once, as the table above
        parts.append(f"<section><h2>Verdict and scores</h2>{_table(list(_flat(verdict)))}</section>")
    if review.evaluation is not None:
        parts.append(f"<section><h2>Evaluation row</h2>{_table(list(_flat(review.evaluation)))}</section>")
    shown = {"question", "response", "chunks", "verdict", "rule"}
    for key, value in payload.items():
        if key in shown:
            continue
        body = _table(list(_flat(value))) if isinstance(value, Mapping) else f"<pre>{e(value)}</pre>"
        parts.append(f"<section><h2>{e(key)}</h2>{body}</section>")
    if review.decisions:
        rows = [
            (
                d.by,
                f"{d.decision}, {d.label}"
                + (f" ({d.note})" if d.note else "")
                + (f"; answer: {d.answer}" if d.answer is not None else "")
                + (f"; queries: {' | '.join(d.queries)}" if d.queries else "")
                + f" at {d.at}",
            )
            for d in review.decisions
        ]
        parts.append(f"<section><h2>Decisions</h2>{_table(rows)}</section>")
    if review.state == "resolved":
        parts.append(
            f"<section><h2>Resolved</h2>{_table([('decision', review.decision), ('label', review.label), ('by', review.resolved_by), ('at', review.resolved_at), ('note', review.note)])}</section>"  # noqa: E501
        )
    elif any(d.by == reviewer for d in review.decisions):
        parts.append("<section><p>You decided this review; it waits for another reviewer.</p></section>")
    else:
        parts.append(_decision_form(review.id, csrf))
    return _page(f"Review #{review.id}", "".join(parts), reviewer, csrf)


def _decision_form(review_id: int, csrf: str) -> str:
    """The form: a decision, the field that decision carries (an answer, or queries), the label, a note.  The radio
    buttons are the form's own children, before the fields, so that CSS alone (``:checked ~``) shows each field
    with its decision: the page runs no script."""
    choices = "".join(
        f'<input type="radio" id="decision-{d}" name="decision" value="{d}" required>'
        f'<label for="decision-{d}"> {d.replace("_", " ")}</label>'
        for d in REVIEW_DECISIONS
    )
    labels = "".join(f'<option value="{label}">{label}</option>' for label in LABELS)
    return (
        f'<section><h2>Decide</h2><form method="post" action="{PAGE}/{review_id}/decision">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">{choices}'
        '<p class="for-answer"><label for="answer">Answer to deliver (empty: the response under review)</label>'
        f'<textarea id="answer" name="answer" maxlength="{MAX_ANSWER_CHARS}"></textarea></p>'
        f'<p class="for-refine"><label for="queries">Queries to search, one a line, at most {MAX_QUERIES} '
        "(empty: the note's lines, else what the gate said was missing)</label>"
        f'<textarea id="queries" name="queries" maxlength="{MAX_QUERIES * (MAX_QUERY_CHARS + 1)}"></textarea></p>'
        '<p><label for="label">Label (was the context sufficient?)</label> <select id="label" name="label">'
        f'<option value="">as the decision implies</option>{labels}</select></p>'
        '<p><label for="note">Note</label>'
        f'<textarea id="note" name="note" maxlength="{MAX_NOTE_CHARS}">'
        '</textarea></p><button type="submit">Record decision</button></form></section>'
    )


# -- sessions ----------------------------------------------------------------------------------------------------
@dataclass
class _Session:
    reviewer: str
    csrf: str
    expires: float


class _Sessions:
    def __init__(self) -> None:
        self._by_token: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def open(self, reviewer: str) -> str:
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for old in [t for t, s in self._by_token.items() if s.expires < now]:
                del self._by_token[old]
            while len(self._by_token) >= MAX_SESSIONS:
                del self._by_token[next(iter(self._by_token))]
            self._by_token[token] = _Session(reviewer, secrets.token_urlsafe(32), now + SESSION_S)
        return token

    def get(self, token: str | None) -> _Session | None:
        if not token:
            return None
        with self._lock:
            session = self._by_token.get(token)
            if session is None or session.expires < time.monotonic():
                return None
            return session

    def close(self, token: str | None) -> None:
        with self._lock:
            self._by_token.pop(token or "", None)


def _refusal(error: Mapping[str, Any]) -> str:
    """One of a refused form's errors, for the reviewer: the field, then what is wrong."""
    where = ".".join(str(part) for part in error.get("loc", ()))
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


async def _form(request: Request) -> dict[str, str]:
    """A posted form's fields (``application/x-www-form-urlencoded`` only; the first of a repeated field)."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}
    raw = (await request.body()).decode("utf-8", "replace")
    return {key: values[0] for key, values in parse_qs(raw, keep_blank_values=True).items()}


_API_REFUSALS = error_responses(
    {
        401: "missing or wrong reviewer key (Authorization: Bearer KEY)",
        404: "no such review",
        409: "the review is resolved already, or this reviewer decided it already",
        415: "the body is not application/json",
        422: "a decision, label, note, answer or queries the route refuses (an answer or queries given for "
        "another decision too)",
        503: "the audit log cannot be read or written",
    }
)


def install(app: FastAPI, config: ServeConfig, metrics: Metrics) -> ReviewDesk:
    """Add the page and the JSON routes to ``app`` and the review counts to ``metrics``; returns the desk,
    to close at shutdown.  Raises :class:`ConfigError` (``reviewer_keys``) for a bad key folder."""
    keys = load_reviewer_keys(config.reviewer_keys) if config.reviewer_keys is not None else {}
    desk = ReviewDesk(config)
    sessions = _Sessions()
    metrics.registry.register(_ReviewCounts(desk))

    def session_of(request: Request) -> _Session | None:
        return sessions.get(request.cookies.get(COOKIE))

    def api_reviewer(request: Request) -> str | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return reviewer_of(keys, token) if scheme.lower() == "bearer" and token else None

    def admits(headers: Mapping[str, str]) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token and reviewer_of(keys, token) is not None:
            return True
        cookie = SimpleCookie()
        with contextlib.suppress(CookieError):
            cookie.load(headers.get("cookie", ""))
        morsel = cookie.get(COOKIE)
        return morsel is not None and sessions.get(morsel.value) is not None

    desk.admits = admits

    def unauthorized() -> JSONResponse:
        why = "missing or wrong reviewer key" if keys else "no reviewers: start suffice serve with --reviewer-keys"
        return JSONResponse({"detail": why}, status_code=401, headers={"www-authenticate": "Bearer"})

    async def read(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, lambda: desk.call(fn, *args, **kwargs))

    # The application's outcome routes (the client key's) before /v1/reviews/{review_id}, which would take
    # /v1/reviews/events for a review id.
    decided = install_outcomes(app, read, desk.call(lambda log: review_log_id(log.db_id)))

    async def detail(review_id: int, reviewer: str) -> ReviewDetail:
        def fetch(log: AuditLog) -> ReviewDetail:
            row = log.review(review_id)
            return _detail(row, _evaluation(log, row.get("evaluation_seq")), reviewer)

        result: ReviewDetail = await read(fetch)
        return result

    async def listing(show: str) -> list[ReviewSummary]:
        rows = await read(AuditLog.reviews, None if show == "all" else show)
        return [_summary(row) for row in rows[-LIST_LIMIT:]]

    async def decide(review_id: int, reviewer: str, body: DecisionRequest) -> DecisionAnswer:
        done = await read(
            AuditLog.resolve_review,
            review_id,
            decision=body.decision,
            by=reviewer,
            note=body.note,
            label=body.label,
            answer=body.answer,
            queries=body.queries,
        )
        if done.resolved:
            decided()  # whoever waits on /v1/reviews/events learns it now
        state: State = "resolved" if done.resolved else ("disputed" if done.disputed else "awaiting")
        return DecisionAnswer(
            review_id=review_id,
            resolved=done.resolved,
            state=state,
            decisions=done.decisions,
            required=done.required,
            agreed_by=list(done.agreed_by),
            message=done.summary(),
        )

    def refused(exc: SufficeError) -> JSONResponse:
        status = status_of(exc).http
        if status < 500:  # about the review asked for: said; the log's own trouble is not the client's to read
            return JSONResponse({"detail": str(exc)}, status)
        return JSONResponse({"detail": "the audit log cannot be used"}, 503)

    async def answer(request: Request, call: Callable[[str], Awaitable[BaseModel]]) -> Response:
        """``call``'s answer for the request's reviewer: 401 without a reviewer's key, the refusal of an error."""
        reviewer = api_reviewer(request)
        if reviewer is None:
            return unauthorized()
        try:
            answered = await call(reviewer)
        except SufficeError as exc:
            return refused(exc)
        return JSONResponse(answered.model_dump(mode="json"))

    # -- JSON ----------------------------------------------------------------------------------------------------
    @app.get(
        API,
        response_model=ReviewList,
        summary="The review queue",
        responses=_API_REFUSALS,
        tags=["reviews"],
        operation_id="list_reviews",
    )
    async def api_list(request: Request, status: Literal["open", "resolved", "all"] = "open") -> Response:
        async def reviews(_: str) -> ReviewList:
            return ReviewList(reviews=await listing(status))

        return await answer(request, reviews)

    @app.get(
        f"{API}/{{review_id}}",
        response_model=ReviewDetail,
        summary="One review",
        responses=_API_REFUSALS,
        operation_id="get_review",
    )
    async def api_show(review_id: int, request: Request) -> Response:
        return await answer(request, lambda reviewer: detail(review_id, reviewer))

    @app.post(
        f"{API}/{{review_id}}/decision",
        response_model=DecisionAnswer,
        summary="Record the authenticated reviewer's decision",
        responses=_API_REFUSALS,
        operation_id="decide_review",
    )
    async def api_decide(review_id: int, body: DecisionRequest, request: Request) -> Response:
        return await answer(request, lambda reviewer: decide(review_id, reviewer, body))

    # -- the page ------------------------------------------------------------------------------------------------
    @app.get(PAGE, include_in_schema=False)
    async def page_list(request: Request, show: str = "open") -> Response:
        session = session_of(request)
        if session is None:
            if not keys:
                return _login_page("No reviewers: start suffice serve with --reviewer-keys FOLDER.", 503)
            return _login_page()
        try:
            rows = await listing("all" if show == "all" else "open")
        except SufficeError:
            return _page("Reviews", "<section>The audit log cannot be read.</section>", session.reviewer, session.csrf)
        return _list_page(rows, "all" if show == "all" else "open", session.reviewer, session.csrf)

    @app.post(f"{PAGE}/login", include_in_schema=False)
    async def page_login(request: Request) -> Response:
        reviewer = reviewer_of(keys, (await _form(request)).get("key", ""))
        if reviewer is None:
            return _login_page("That key is not a reviewer's key.", 401)
        response = RedirectResponse(PAGE, status_code=303)
        response.set_cookie(
            COOKIE, sessions.open(reviewer), max_age=SESSION_S, path="/", httponly=True, samesite="strict"
        )
        return response

    @app.post(f"{PAGE}/logout", include_in_schema=False)
    async def page_logout(request: Request) -> Response:
        session = session_of(request)
        if session is not None and hmac.compare_digest((await _form(request)).get("csrf", ""), session.csrf):
            sessions.close(request.cookies.get(COOKIE))
        response = RedirectResponse(PAGE, status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    @app.get(f"{PAGE}/{{review_id}}", include_in_schema=False)
    async def page_show(review_id: int, request: Request, recorded: str = "") -> Response:
        session = session_of(request)
        if session is None:
            return RedirectResponse(PAGE, status_code=303)
        try:
            review = await detail(review_id, session.reviewer)
        except SufficeError as exc:
            return _page("Review", f"<section>{e(exc)}</section>", session.reviewer, session.csrf, 404)
        message = ""
        if recorded and review.state == "resolved":
            message = f"Recorded. Resolved by {review.resolved_by}."
        elif recorded:
            message = f"Recorded. {review.decisions_recorded} of {review.reviewers} reviewers have decided."
        return _detail_page(review, session.reviewer, session.csrf, message)

    @app.post(f"{PAGE}/{{review_id}}/decision", include_in_schema=False)
    async def page_decide(review_id: int, request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return _login_page("Log in first.", 401)
        form = await _form(request)
        if not hmac.compare_digest(form.get("csrf", ""), session.csrf):
            return _page("Refused", "<section>The form is stale or not this site's: reload it.</section>", status=403)
        decision = form.get("decision", "")
        # Each field goes with its decision only: the page hides the other's field, so what is left in it was not
        # what the reviewer chose (the JSON route, where nothing is hidden, refuses it instead).
        answer = (form.get("answer") or "").strip() if decision == "answer" else ""
        queries = [q.strip() for q in (form.get("queries") or "").splitlines() if q.strip()]
        try:
            body = DecisionRequest(
                decision=decision,  # type: ignore[arg-type]
                label=form.get("label") or None,  # type: ignore[arg-type]
                note=form.get("note") or None,
                answer=answer or None,
                queries=(queries or None) if decision == "refine_retrieval" else None,
            )
        except ValidationError as exc:
            why = "; ".join(_refusal(error) for error in exc.errors())
            return _page(
                "Refused",
                f"<section>Choose a decision (and a label it knows). {e(why)}</section>",
                session.reviewer,
                session.csrf,
                status=422,
            )
        try:
            await decide(review_id, session.reviewer, body)
        except SufficeError as exc:
            status = 404 if status_of(exc).http == 404 else 409
            return _page("Refused", f"<section>{e(exc)}</section>", session.reviewer, session.csrf, status)
        return RedirectResponse(f"{PAGE}/{review_id}?recorded=1", status_code=303)

    return desk


#: A review path's body: a decision with its note, or the login form's key, fits in this many bytes, received
#: within this many seconds.  The service's own limits (``--max-body-bytes``, ``--request-timeout``: a judge
#: request's) would let a client without a key hold a connection for ten minutes by sending slowly.
REVIEW_BODY_BYTES = 64 * 1024
REVIEW_BODY_SECONDS = 10.0
#: The one review path whose body may come before any key: the login form carries the key.
LOGIN = f"{PAGE}/login"


class ReviewPaths:
    """Review paths go to ``reviews`` (their routes check reviewer keys), the rest to ``other`` (the client
    token's guard): a reviewer holds no client token, and a client's token decides no review.  The application's
    outcome paths (:func:`~suffice.server.outcomes.is_client_path`) are the client token's: it learns what was
    decided, and reads no queue.

    A request with a body to a review path (but the login form) must show a reviewer's key or a live session
    in its headers first (``desk.admits``): 401 at once, no body read.  Every review body is held to
    :data:`REVIEW_BODY_BYTES` within :data:`REVIEW_BODY_SECONDS`."""

    def __init__(self, other: Any, reviews: Any, desk: ReviewDesk | None = None) -> None:
        self.other = other
        self.reviews = BodyLimit(reviews, REVIEW_BODY_BYTES, REVIEW_BODY_SECONDS)
        self.desk = desk

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path in (PAGE, API) or path.startswith((PAGE + "/", API + "/"))) or is_client_path(path):
            await self.other(scope, receive, send)
            return
        if scope.get("method") not in ("GET", "HEAD") and path != LOGIN and self.desk is not None:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not self.desk.admits(headers):
                answer = JSONResponse(
                    {"detail": "missing or wrong reviewer key, or no session: log in first"},
                    status_code=401,
                    headers={"www-authenticate": "Bearer", "connection": "close"},
                )
                await answer(scope, receive, send)
                return
        await self.reviews(scope, receive, send)


class _ReviewCounts:
    """``suffice_reviews`` (per gate, rule and status) and ``suffice_review_overrides_total`` (per gate and rule:
    resolved reviews whose people's label differs from the machine's), read from the audit log at each scrape,
    so decisions from ``suffice review decide`` count too."""

    def __init__(self, desk: ReviewDesk) -> None:
        self.desk = desk

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        reviews = GaugeMetricFamily("suffice_reviews", "Reviews in the queue", labels=["gate", "rule", "status"])
        overrides = CounterMetricFamily(
            "suffice_review_overrides",
            "Resolved reviews whose people's label differs from the machine's",
            labels=["gate", "rule"],
        )
        try:
            counts = self.desk.call(AuditLog.review_counts)
        except Exception:  # a scrape never fails for the log: the other metrics still go out
            counts = []
        per: dict[tuple[str, str], int] = {}
        for c in counts:
            gate, rule = str(c["gate"] or ""), str(c["rule"] or "")
            reviews.add_metric([gate, rule, str(c["status"])], c["count"])
            per[gate, rule] = per.get((gate, rule), 0) + c["overrides"]
        for (gate, rule), count in per.items():
            overrides.add_metric([gate, rule], count)
        yield reviews
        yield overrides
