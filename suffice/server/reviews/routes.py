"""The review routes.  ``/v1/reviews`` is JSON, typed in the OpenAPI document: the reviewer's key as
``Authorization: Bearer``, JSON bodies only, so no other site's page can post a decision.  ``/reviews`` is the
page: it logs in with the key and holds a session cookie (HttpOnly, SameSite=Strict), each form carrying the
session's CSRF token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from markupsafe import Markup
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from suffice.audit.reviewing import review_log_id
from suffice.exceptions import SufficeError, status_of
from suffice.server.config import ServeConfig
from suffice.server.metrics import Metrics
from suffice.server.outcomes import install as install_outcomes
from suffice.server.responses import JSONResponse, error_responses
from suffice.server.reviews.counts import ReviewCounts
from suffice.server.reviews.desk import API, LOGIN, PAGE, ReviewDesk
from suffice.server.reviews.pages import render, review_page
from suffice.server.reviews.schema import DecisionAnswer, DecisionRequest, ReviewDetail, ReviewList
from suffice.server.reviews.sessions import COOKIE, SESSION_S, Session

# The JSON routes' refusals (the page's routes are in no OpenAPI document).
router = APIRouter(
    responses=error_responses(
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
)


def install(app: FastAPI, config: ServeConfig, metrics: Metrics) -> ReviewDesk:
    """Add the page and the JSON routes to ``app`` and the review counts to ``metrics``; returns the desk,
    to close at shutdown.  Raises :class:`ConfigError` (``reviewer_keys``) for a bad key folder."""
    desk = ReviewDesk(config)
    metrics.registry.register(ReviewCounts(desk))
    # The application's outcome routes (the client key's) before /v1/reviews/{review_id}, which would take
    # /v1/reviews/events for a review id.
    desk.decided = install_outcomes(app, desk.read, desk.call(lambda log: review_log_id(log.db_id)))
    app.state.review_desk = desk
    app.include_router(router)
    return desk


def _desk(request: Request) -> ReviewDesk:
    desk: ReviewDesk = request.app.state.review_desk
    return desk


# -- JSON: no docstrings, which FastAPI would publish as the OpenAPI descriptions -----------------------------
async def _answer(request: Request, call: Callable[[ReviewDesk, str], Awaitable[BaseModel]]) -> Response:
    """``call``'s answer for the request's reviewer: 401 without a reviewer's key, the refusal of an error."""
    desk = _desk(request)
    reviewer = desk.reviewers.of_bearer(request.headers.get("authorization", ""))
    if reviewer is None:
        why = (
            "missing or wrong reviewer key"
            if desk.reviewers.keys
            else "no reviewers: start suffice serve with --reviewer-keys"
        )
        return JSONResponse({"detail": why}, status_code=401, headers={"www-authenticate": "Bearer"})
    try:
        answered = await call(desk, reviewer)
    except SufficeError as exc:
        status = status_of(exc).http
        if status < 500:  # about the review asked for: said; the log's own trouble is not the client's to read
            return JSONResponse({"detail": str(exc)}, status)
        return JSONResponse({"detail": "the audit log cannot be used"}, 503)
    return JSONResponse(answered.model_dump(mode="json"))


@router.get(API, response_model=ReviewList, summary="The review queue", tags=["reviews"], operation_id="list_reviews")
async def list_reviews(request: Request, status: Literal["open", "resolved", "all"] = "open") -> Response:
    async def reviews(desk: ReviewDesk, _: str) -> ReviewList:
        return ReviewList(reviews=await desk.listing(status))

    return await _answer(request, reviews)


@router.get(f"{API}/{{review_id}}", response_model=ReviewDetail, summary="One review", operation_id="get_review")
async def get_review(review_id: int, request: Request) -> Response:
    return await _answer(request, lambda desk, reviewer: desk.detail(review_id, reviewer))


@router.post(
    f"{API}/{{review_id}}/decision",
    response_model=DecisionAnswer,
    summary="Record the authenticated reviewer's decision",
    operation_id="decide_review",
)
async def decide_review(review_id: int, body: DecisionRequest, request: Request) -> Response:
    return await _answer(request, lambda desk, reviewer: desk.decide(review_id, reviewer, body))


# -- the page ------------------------------------------------------------------------------------------------
def _session(request: Request) -> tuple[ReviewDesk, Session | None]:
    desk = _desk(request)
    return desk, desk.reviewers.session(request.cookies.get(COOKIE))


async def _form(request: Request) -> dict[str, str]:
    """A posted form's fields (``application/x-www-form-urlencoded`` only; the first of a repeated field); none when
    the client hung up before sending it all (its answer goes nowhere, and a traceback each time would let anyone
    fill the log)."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}
    try:
        raw = (await request.body()).decode("utf-8", "replace")
    except ClientDisconnect:
        return {}
    return {key: values[0] for key, values in parse_qs(raw, keep_blank_values=True).items()}


def _refusal(error: Mapping[str, Any]) -> str:
    """One of a refused form's errors, for the reviewer: the field, then what is wrong."""
    where = ".".join(str(part) for part in error.get("loc", ()))
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


@router.get(PAGE, include_in_schema=False)
async def list_page(request: Request, show: str = "open") -> Response:
    """The reviews, open or all; the login form without a session."""
    desk, session = _session(request)
    if session is None:
        if not desk.reviewers.keys:
            why = "No reviewers: start suffice serve with --reviewer-keys FOLDER."
            return render("login.html.j2", "Log in", 503, message=why)
        return render("login.html.j2", "Log in")
    shown = "all" if show == "all" else "open"
    try:
        rows = await desk.listing(shown)
    except SufficeError:
        return render("page.html.j2", "Reviews", session=session, text="The audit log cannot be read.")
    return render("list.html.j2", "Reviews", session=session, rows=rows, shown=shown)


def _same_origin(request: Request) -> bool:
    """Whether a login was posted from this server's own page: a browser's ``Sec-Fetch-Site`` says so, and an
    ``Origin`` (other than ``null``, which the page's no-referrer policy makes it send) names this server as the
    ``Host`` does.  A client that sends neither (curl, a script) holds the key anyway."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin", "null")
    return origin == "null" or urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


@router.post(LOGIN, include_in_schema=False)
async def log_in(request: Request) -> Response:
    desk = _desk(request)
    if not _same_origin(request):
        return render("login.html.j2", "Log in", 403, message="A login from another site's page is refused.")
    reviewer = desk.reviewers.of_key((await _form(request)).get("key", ""))
    address = f"addr:{request.client.host if request.client else ''}"
    if not desk.reviewers.allow_login(address, *([f"key:{reviewer}"] if reviewer else [])):
        return render("login.html.j2", "Log in", 429, message="Too many logins: wait a minute.")
    if reviewer is None:
        return render("login.html.j2", "Log in", 401, message="That key is not a reviewer's key.")
    response = RedirectResponse(PAGE, status_code=303)
    token = desk.reviewers.open(reviewer)
    response.set_cookie(COOKIE, token, max_age=SESSION_S, path="/", httponly=True, samesite="strict")
    return response


@router.post(f"{PAGE}/logout", include_in_schema=False)
async def log_out(request: Request) -> Response:
    # Closed whatever the form holds: a logout that left the session alive would leave a copied cookie working for
    # hours (the cookie is SameSite=Strict, so another site cannot post here with it).
    desk, _ = _session(request)
    desk.reviewers.close(request.cookies.get(COOKIE))
    response = RedirectResponse(PAGE, status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get(f"{PAGE}/{{review_id}}", include_in_schema=False)
async def show_page(review_id: int, request: Request, recorded: str = "") -> Response:
    desk, session = _session(request)
    if session is None:
        return RedirectResponse(PAGE, status_code=303)
    try:
        review = await desk.detail(review_id, session.reviewer)
    except SufficeError as exc:
        return render("page.html.j2", "Review", 404, session=session, text=exc)
    message = ""
    if recorded and review.state == "resolved":
        message = f"Recorded. Resolved by {review.resolved_by}."
    elif recorded:
        message = f"Recorded. {review.decisions_recorded} of {review.reviewers} reviewers have decided."
    return review_page(review, session, message)


@router.post(f"{PAGE}/{{review_id}}/decision", include_in_schema=False)
async def decide_page(review_id: int, request: Request) -> Response:
    desk, session = _session(request)
    if session is None:
        return render("login.html.j2", "Log in", 401, message="Log in first.")
    form = await _form(request)
    if not session.csrf_matches(form.get("csrf", "")):
        return render("page.html.j2", "Refused", 403, text=Markup("The form is stale or not this site's: reload it."))
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
        text = f"Choose a decision (and a label it knows). {why}"
        return render("page.html.j2", "Refused", 422, session=session, text=text)
    try:
        await desk.decide(review_id, session.reviewer, body)
    except SufficeError as exc:
        status = 404 if status_of(exc).http == 404 else 409
        return render("page.html.j2", "Refused", status, session=session, text=exc)
    return RedirectResponse(f"{PAGE}/{review_id}?recorded=1", status_code=303)
