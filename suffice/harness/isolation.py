"""Batched calls to steps the pipeline does not control, one question's failure confined.

The retriever is the caller's code and query rewriting calls the engine; either may
raise, or (a batched implementation) return more or fewer results than requests, in
which case no result can be matched to its question.  Either way the batch is split
in halves and each half tried again, down to single requests (as the judge does
with engine batches), so only the questions that fail on their own are lost, each
with a typed error naming the step, and every other question keeps its result.

A step may also hang (a search server that never answers, a socket without a
timeout).  Given a time limit, the call runs in a thread of its own and, past the
limit, every question in it fails with the limit in its reason, without splitting
(halves of a hung call would hang too, each for the whole limit).  Python cannot
stop the thread: it is left to finish on its own, and whatever it returns is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from suffice.exceptions import EngineFatalError, StepError

Request = TypeVar("Request")
Result = TypeVar("Result")


def isolated(
    call: Callable[[Sequence[Request]], Sequence[Result]],
    requests: Sequence[Request],
    error: type[StepError],
    seconds_each: float | None = None,
) -> list[Result | StepError]:
    """One result per request, in order; an ``error`` instance where a request failed alone.

    ``seconds_each``: the call's time limit is this many seconds per request in it
    (``None``: no limit).

    Any exception is caught on purpose: the step is foreign code, and one question's
    failure must not cost the other questions their outcomes.  The failure is never
    silent: it becomes that question's review reason.  A fatal engine failure (a dead engine) is the exception:
    it is nobody's question, so it propagates.
    """
    if not requests:
        return []
    try:
        if seconds_each is None:
            results: list[Result | StepError] = list(call(requests))
        else:
            results = list(_within(call, requests, seconds_each * len(requests)))
    except _TimedOut as late:
        return [error(str(late)) for _ in requests]
    except EngineFatalError:
        raise  # no question is to blame: the run stops, as the batch runner does
    except Exception as exc:
        failure = error(f"{type(exc).__name__}: {exc}")
        failure.__cause__ = exc
    else:
        if len(results) == len(requests):
            return results
        noun = "request" if len(requests) == 1 else "requests"
        failure = error(f"returned {len(results)} results for {len(requests)} {noun}")
    if len(requests) == 1:
        return [failure]
    middle = len(requests) // 2
    return isolated(call, requests[:middle], error, seconds_each) + isolated(
        call, requests[middle:], error, seconds_each
    )


class _TimedOut(Exception):
    pass


def _within(
    call: Callable[[Sequence[Request]], Sequence[Result]], requests: Sequence[Request], seconds: float
) -> Sequence[Result]:
    """``call(requests)`` in a daemon thread; what it raised is raised here, and
    :class:`_TimedOut` if it has not returned within ``seconds``."""
    outcome: list[Sequence[Result]] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(list(call(requests)))
        except BaseException as exc:  # handed to the caller's thread as it is
            failure.append(exc)

    worker = threading.Thread(target=run, name="suffice-step", daemon=True)
    worker.start()
    worker.join(min(seconds, threading.TIMEOUT_MAX))  # past TIMEOUT_MAX join raises OverflowError
    if worker.is_alive():
        noun = "request" if len(requests) == 1 else "requests"
        raise _TimedOut(f"no answer within {seconds:g} s for {len(requests)} {noun} (the step's time limit)")
    if failure:
        raise failure[0]
    return outcome[0]
