"""The review desk: the audit log the reviews are read from and decided in, who may decide them, and the ASGI
dispatch that hands review paths to the reviewers' keys and every other path to the client token's guard."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from suffice.audit import AuditLog
from suffice.server.config import ServeConfig
from suffice.server.guards import BodyLimit
from suffice.server.outcomes import is_client_path
from suffice.server.responses import JSONResponse
from suffice.server.reviews.schema import DecisionAnswer, DecisionRequest, ReviewDetail, ReviewSummary, State
from suffice.server.reviews.sessions import Reviewers, load_reviewer_keys

#: The page's paths and the JSON routes': answered with reviewer keys, not the service's client token.
PAGE = "/reviews"
API = "/v1/reviews"
#: The one review path whose body may come before any key: the login form carries the key.
LOGIN = f"{PAGE}/login"
#: Reviews a list shows (the newest first past it).
LIST_LIMIT = 1000
#: A review path's body: a decision with its note, or the login form's key, fits in this many bytes, received
#: within this many seconds.  The service's own limits (``--max-body-bytes``, ``--request-timeout``: a judge
#: request's) would let a client without a key hold a connection for ten minutes by sending slowly.
REVIEW_BODY_BYTES = 64 * 1024
REVIEW_BODY_SECONDS = 10.0


class ReviewDesk:
    """The audit log the reviews are read from and decided in (its own connection on one thread: SQLite), and the
    reviewers who may decide them.  Raises :class:`ConfigError` (``reviewer_keys``) for a bad key folder."""

    def __init__(self, config: ServeConfig) -> None:
        assert config.audit_db is not None
        keys = load_reviewer_keys(config.reviewer_keys) if config.reviewer_keys is not None else {}
        self.reviewers = Reviewers(keys)
        #: Called when a decision recorded here resolves a review (set by :func:`install`: the outcome routes).
        self.decided: Callable[[], None] = lambda: None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="suffice-reviews")
        self._log: AuditLog = self._pool.submit(AuditLog, config.audit_db, config.audit_key).result()

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(log, *args, **kwargs)`` on the log's thread."""
        return self._pool.submit(fn, self._log, *args, **kwargs).result(timeout=60)

    async def read(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """:meth:`call`, without holding the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, lambda: self.call(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.submit(self._log.close).result()
        self._pool.shutdown()

    async def listing(self, show: str) -> list[ReviewSummary]:
        rows = await self.read(AuditLog.reviews, None if show == "all" else show)
        return [ReviewSummary.of(row) for row in rows[-LIST_LIMIT:]]

    async def detail(self, review_id: int, reviewer: str) -> ReviewDetail:
        found: ReviewDetail = await self.read(ReviewDetail.read, review_id, reviewer)
        return found

    async def decide(self, review_id: int, reviewer: str, body: DecisionRequest) -> DecisionAnswer:
        done = await self.read(
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
            self.decided()  # whoever waits on /v1/reviews/events learns it now
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


class ReviewPaths:
    """Review paths go to ``reviews`` (their routes check reviewer keys), the rest to ``other`` (the client
    token's guard): a reviewer holds no client token, and a client's token decides no review.  The application's
    outcome paths (:func:`~suffice.server.outcomes.is_client_path`) are the client token's: it learns what was
    decided, and reads no queue.

    A request with a body to a review path (but the login form) must show a reviewer's key or a live session
    in its headers first (:meth:`~suffice.server.reviews.sessions.Reviewers.admits`): 401 at once, no body read.
    Every review body is held to :data:`REVIEW_BODY_BYTES` within :data:`REVIEW_BODY_SECONDS`."""

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
            if not self.desk.reviewers.admits(headers):
                answer = JSONResponse(
                    {"detail": "missing or wrong reviewer key, or no session: log in first"},
                    status_code=401,
                    headers={"www-authenticate": "Bearer", "connection": "close"},
                )
                await answer(scope, receive, send)
                return
        await self.reviews(scope, receive, send)
