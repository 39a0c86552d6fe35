"""The review page, rendered from ``templates/``: plain HTML, no script, no external asset, forms that post.

Every value shown is escaped, quotes too (values go into attributes): a chunk is text the retriever found, which
anyone may have written."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from suffice.audit import LABELS, REVIEW_DECISIONS
from suffice.results import MAX_ANSWER_CHARS, MAX_QUERIES, MAX_QUERY_CHARS
from suffice.server.reviews.desk import PAGE
from suffice.server.reviews.schema import MAX_NOTE_CHARS, ReviewDetail
from suffice.server.reviews.sessions import Session

HEADERS = {
    # No script runs, nothing loads from elsewhere, no other site frames it or reads its address.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def escaped(value: object) -> Markup:
    """Any value as HTML text, escaped; a number, mapping or list as JSON.  Every ``{{ }}`` goes through it."""
    if isinstance(value, Markup):  # a macro's own output
        return value
    if value is None:
        return Markup("")
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return Markup(html.escape(value, quote=True))


def flat(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf) of a verdict's scalars: its scores and decisions as rows of a table."""
    if isinstance(value, Mapping):
        for key, child in value.items():
            yield from flat(child, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        if all(not isinstance(v, (Mapping, list)) for v in value):
            yield prefix, ", ".join(str(v) for v in value)
        else:
            for index, child in enumerate(value):
                yield from flat(child, f"{prefix}[{index}]")
    else:
        yield prefix, value


class _OneLine(jinja2.ext.Extension):
    """The templates are indented for people to read; the page goes out without their line breaks."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return re.sub(r"\n\s*", "", source)


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    finalize=escaped,
    undefined=jinja2.StrictUndefined,
    extensions=[_OneLine],
)
_TEMPLATES.globals.update(page=PAGE, flat=flat, decisions=REVIEW_DECISIONS, labels=LABELS, max_note=MAX_NOTE_CHARS)
_TEMPLATES.globals.update(max_answer=MAX_ANSWER_CHARS, max_queries=MAX_QUERIES, max_query=MAX_QUERY_CHARS)


def render(template: str, title: str, status: int = 200, session: Session | None = None, **values: Any) -> HTMLResponse:
    """``template`` (``page.html.j2``: a ``text`` in a section) under a header naming the ``session``'s reviewer,
    as an HTML response."""
    page = _TEMPLATES.get_template(template).render(
        {"message": "", "text": "", **values},
        title=title,
        reviewer=None if session is None else session.reviewer,
        csrf="" if session is None else session.csrf,
    )
    return HTMLResponse(page, status, headers=HEADERS)


def _entries(value: Any, keys: set[str]) -> list[Any] | None:
    """``value`` if it is a non-empty list of mappings that hold ``keys`` each, else ``None``."""
    if isinstance(value, list) and value and all(isinstance(v, Mapping) and keys <= set(v) for v in value):
        return value
    return None


def review_page(review: ReviewDetail, session: Session, message: str = "") -> HTMLResponse:
    """One review: what it holds, the decisions shown, and the form (unless it is resolved or this reviewer
    decided it).  A verdict's segments and rubric criteria are shown once, as tables of their own."""
    payload = review.payload if isinstance(review.payload, Mapping) else {"payload": review.payload}
    verdict, segments, criteria = payload.get("verdict"), None, None
    if isinstance(verdict, Mapping):
        segments = _entries(verdict.get("segments"), {"index", "text", "label"})
        criteria = _entries(verdict.get("criteria"), {"criterion", "text", "score", "assessment"})
        verdict = {
            k: v for k, v in verdict.items() if not ((k == "segments" and segments) or (k == "criteria" and criteria))
        }
    chunks = payload.get("chunks")
    return render(
        "review.html.j2",
        f"Review #{review.id}",
        session=session,
        message=message,
        review=review,
        payload=payload,
        chunks=chunks if isinstance(chunks, list) else [],
        verdict=verdict if isinstance(verdict, Mapping) else None,
        segments=segments,
        criteria=criteria,
        extra={k: v for k, v in payload.items() if k not in {"question", "response", "chunks", "verdict", "rule"}},
        decided=any(d.by == session.reviewer for d in review.decisions),
    )
