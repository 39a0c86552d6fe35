"""Finding the request that fails a batch: halves, down to the one that fails alone.

For batched calls suffice does not control (engine, Ray actor, retriever, rewriter), so only a request that fails
on its own loses its outcome.  A wrong outcome count fails the call; :class:`PartialBatchError` gives outcomes kept
as they are.  A step past its time limit (:func:`step_outcomes`) fails every request unsplit (halves would hang too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from suffice.exceptions import EngineFatalError, PartialBatchError, StepError

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")
Failure = TypeVar("Failure")


def halves(requests: Sequence[Request]) -> tuple[Sequence[Request], Sequence[Request]]:
    middle = len(requests) // 2
    return requests[:middle], requests[middle:]


class Bisection(Generic[Outcome]):
    """A batch's outcomes by position while its pieces come back, in any order."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._outcomes: dict[int, Outcome] = {}

    def settle(self, start: int, outcomes: Sequence[Outcome]) -> None:
        self._outcomes.update(enumerate(outcomes, start))

    @property
    def complete(self) -> bool:
        return len(self._outcomes) == self.size

    def outcomes(self) -> list[Outcome]:
        return [self._outcomes[i] for i in range(self.size)]


class WrongCountError(Exception):
    """A call returned a different number of outcomes than it was given requests."""

    def __init__(self, got: int, sent: int) -> None:
        super().__init__(f"returned {got} results for {sent} {'request' if sent == 1 else 'requests'}")


def isolate(
    call: Callable[[Sequence[Request]], Sequence[Outcome]],
    requests: Sequence[Request],
    failed: Callable[[Exception, Sequence[Request]], Failure],
) -> list[Outcome | Failure]:
    """One outcome per request, in order: ``call``'s, or ``failed(exc, requests)``'s for a request that failed alone;
    ``failed`` hears of every failed call and raises what no request is to blame for."""
    if not requests:
        return []
    try:
        outcomes: list[Outcome | Failure] = list(call(requests))
        if len(outcomes) != len(requests):
            raise WrongCountError(len(outcomes), len(requests))
    except PartialBatchError as exc:
        return list(exc.outcomes)
    except Exception as exc:
        failure = failed(exc, requests)
        if len(requests) == 1:
            return [failure]
        return [o for half in halves(requests) for o in isolate(call, half, failed)]
    return outcomes


def step_outcomes(
    call: Callable[[Sequence[Request]], Sequence[Outcome]],
    requests: Sequence[Request],
    error: type[StepError],
    seconds_each: float | None = None,
) -> list[Outcome | StepError]:
    """A harness step's outcome per request, in order; an ``error`` where one failed alone.  ``seconds_each``: the
    call's time limit per request (``None``: none).  A fatal engine failure propagates."""

    def failed(exc: Exception, _: Sequence[Request]) -> StepError:
        if isinstance(exc, EngineFatalError):
            raise exc
        failure = error(str(exc) if isinstance(exc, WrongCountError) else f"{type(exc).__name__}: {exc}")
        failure.__cause__ = exc
        return failure

    def timed(part: Sequence[Request]) -> Sequence[Outcome | StepError]:
        return call(part) if seconds_each is None else _within(call, part, error, seconds_each * len(part))

    return isolate(timed, requests, failed)


def _within(
    call: Callable[[Sequence[Request]], Sequence[Outcome]],
    requests: Sequence[Request],
    error: type[StepError],
    seconds: float,
) -> Sequence[Outcome | StepError]:
    """``call(requests)`` in a daemon thread; what it raised is raised here, and an
    ``error`` per request if it has not returned within ``seconds``."""
    outcome: list[Sequence[Outcome]] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(list(call(requests)))
        except BaseException as exc:  # handed to the caller's thread as it is
            raised.append(exc)

    worker = threading.Thread(target=run, name="suffice-step", daemon=True)
    worker.start()
    worker.join(min(seconds, threading.TIMEOUT_MAX))  # past TIMEOUT_MAX join raises OverflowError
    if worker.is_alive():
        noun = "request" if len(requests) == 1 else "requests"
        late = f"no answer within {seconds:g} s for {len(requests)} {noun} (the step's time limit)"
        return [error(late) for _ in requests]
    if raised:
        raise raised[0]
    return outcome[0]
