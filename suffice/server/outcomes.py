"""The application's side of the review desk: what a person decided, read with the service's client key.

``GET /v1/reviews/{id}/outcome`` answers one review's outcome (pending, or the decision with who, the approved answer
or the reviewers' queries, and the record as queued); ``GET /v1/reviews/events?since=N&wait=S`` the reviews decided
after cursor ``N``, waiting up to ``S`` seconds (at most :data:`~suffice.results.MAX_EVENTS_WAIT_S`) for one
when there is none yet: a long poll, so an application follows decisions without a reviewer's key and without
asking every second.  Reviewer keys decide and read the queue; the client key only learns outcomes:
:class:`~suffice.server.reviews.ReviewPaths` hands these two paths to the client key's guard.

A wait costs no database work per waiter: the last review event's number is looked up at most once every
:data:`POLL_S` for all of them (decisions from ``suffice review decide`` in another process show within it), and a
decision recorded through this service wakes them at once.  At most :data:`MAX_WAITERS` wait at a time; past that a
waiting call is answered 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response

from suffice.audit import AuditLog
from suffice.audit.reviewing import decided_events, review_head, review_outcome
from suffice.exceptions import ReviewNotFoundError, SufficeError
from suffice.results import MAX_EVENTS, MAX_EVENTS_WAIT_S, ReviewEvents, ReviewOutcome
from suffice.server.responses import JSONResponse, error_responses, refused

REVIEWS = "/v1/reviews"
EVENTS = f"{REVIEWS}/events"
#: ``/v1/reviews/{review_id}/outcome``, and its template in the OpenAPI document.
_OUTCOME = re.compile(r"^/v1/reviews/[^/]+/outcome$")
#: Seconds between two looks at the log while calls wait (one look for all of them).
POLL_S = 1.0
#: Calls waiting at once; a waiting call past them is answered 429.  Well under ``--max-connections`` (512 by
#: default): each holds a connection, and waiting calls must not crowd out judging.
MAX_WAITERS = 64
#: What a 429 asks to wait, in seconds.
RETRY_AFTER_S = 1

Read = Callable[..., Awaitable[Any]]

_REFUSALS = error_responses(
    {
        401: "missing or wrong bearer token (the service's client key, not a reviewer's)",
        404: "no such review",
        422: "a review id, cursor, wait or limit the route refuses",
        429: "too many calls are waiting already: retry after Retry-After s",
        503: "the audit log cannot be read",
    }
)


def is_client_path(path: str) -> bool:
    """Whether ``path`` (or its OpenAPI template) is one of the application's review routes (the client key's)."""
    return path == EVENTS or _OUTCOME.match(path) is not None


class _Feed:
    """The last review event's number, shared by every waiting call: looked up at most once per :data:`POLL_S`,
    or at once after :meth:`wake`."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.head = 0
        self.checked = -math.inf
        self.waiters = 0
        self._lock = asyncio.Lock()
        self._woken = asyncio.Event()

    async def latest(self) -> int:
        async with self._lock:  # one look for all the calls that ask within POLL_S
            loop = asyncio.get_running_loop()
            if loop.time() - self.checked >= POLL_S:
                self.head = await self.read(review_head)
                self.checked = loop.time()
            return self.head

    async def wait(self, seconds: float) -> None:
        """Until :meth:`wake` or ``seconds``, whichever is first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), seconds)

    def wake(self) -> None:
        """A decision was recorded here: every waiting call looks now."""
        self.checked = -math.inf
        self._woken.set()  # wakes every call waiting now; those that wait later wait anew
        self._woken.clear()


def install(app: FastAPI, read: Read, log_id: str) -> Callable[[], None]:
    """Add the two routes to ``app`` (before ``/v1/reviews/{review_id}``, which would take ``events`` for an id);
    ``read(fn, *args)`` calls ``fn(log, *args)`` on the review desk's audit log.  Returns what to call when a
    decision is recorded through this service."""
    feed = _Feed(read)

    def unreadable() -> JSONResponse:
        return JSONResponse({"detail": "the audit log cannot be read"}, 503)

    @app.get(
        EVENTS,
        response_model=ReviewEvents,
        summary="Reviews decided after a cursor, waiting for one up to `wait` seconds (a long poll)",
        responses=_REFUSALS,
        operation_id="review_events",
    )
    async def events(
        request: Request,
        since: int = Query(0, ge=0, description="the `next` of the last answer (0: from the first decision)"),
        wait: float = Query(
            0.0, ge=0, le=MAX_EVENTS_WAIT_S, description="seconds to wait for a decision when there is none yet"
        ),
        limit: int = Query(MAX_EVENTS, ge=1, le=MAX_EVENTS, description="the most events in the answer"),
    ) -> Response:
        if wait > 0 and feed.waiters >= MAX_WAITERS:
            return JSONResponse(
                {"detail": f"{MAX_WAITERS} calls are waiting already"},
                429,
                headers={"retry-after": str(RETRY_AFTER_S)},
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        seen: int | None = None
        found: list[Any] = []
        feed.waiters += 1
        try:
            while True:
                head = await feed.latest()
                if head != seen:  # something was written to the review chain since the last look (or none yet)
                    found, since = await read(decided_events, since, limit)
                    if found:
                        break
                    seen = head
                left = deadline - loop.time()
                if left <= 0:
                    break
                await feed.wait(min(POLL_S, left))
                if await request.is_disconnected():
                    return Response(status_code=499)
        except SufficeError:
            return unreadable()
        finally:
            feed.waiters -= 1
        return JSONResponse(ReviewEvents(log_id=log_id, events=found, next=since).model_dump(mode="json"))

    @app.get(
        f"{REVIEWS}/{{review_id}}/outcome",
        response_model=ReviewOutcome,
        summary="A review's outcome: pending, or the decision, who made it, and what it hands the application",
        responses=_REFUSALS,
        operation_id="get_review_outcome",
    )
    async def outcome(review_id: int) -> Response:
        try:
            row = await read(AuditLog.review, review_id)
        except ReviewNotFoundError as exc:
            return refused(404, str(exc), error=exc)  # named: a client raises it, and tells it from a missing route
        except SufficeError:
            return unreadable()
        # The record as the log holds it: text UTF-8 cannot hold goes out escaped (this JSONResponse), not as a 500.
        return JSONResponse(review_outcome(row, log_id).model_dump(mode="json"))

    return feed.wake
