"""Batched calls to steps the pipeline does not control, one question's failure confined.

The retriever is the caller's code and query rewriting calls the engine; either may
raise, or (a batched implementation) return more or fewer results than requests, in
which case no result can be matched to its question.  Either way the batch is split
in halves and each half tried again, down to single requests (as the judge does
with engine batches), so only the questions that fail on their own are lost, each
with a typed error naming the step, and every other question keeps its result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from suffice.exceptions import EngineFatalError, StepError

Request = TypeVar("Request")
Result = TypeVar("Result")


def isolated(
    call: Callable[[Sequence[Request]], Sequence[Result]],
    requests: Sequence[Request],
    error: type[StepError],
) -> list[Result | StepError]:
    """One result per request, in order; an ``error`` instance where a request failed alone.

    Any exception is caught on purpose: the step is foreign code, and one question's
    failure must not cost the other questions their outcomes.  The failure is never
    silent: it becomes that question's review reason.  A fatal engine failure (a dead engine) is the exception:
    it is nobody's question, so it propagates.
    """
    if not requests:
        return []
    try:
        results: list[Result | StepError] = list(call(requests))
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
    return isolated(call, requests[:middle], error) + isolated(call, requests[middle:], error)
