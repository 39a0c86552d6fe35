"""Finding the request that fails a batch: halves, down to the one that fails alone.

One rule for every batched call suffice does not fully control (an engine, a Ray
actor, a retriever or a query rewriter): a call that fails is split in halves and
each half tried again, down to single requests, so only a request that fails on its
own loses its outcome and every other request keeps its own.  Who calls decides,
per failure, what is nobody's fault (a dead engine: raised, nothing is split) and
what a request failing alone gets (its error, or a crash row).  A call that returns
a different number of outcomes than it was given requests fails too (no outcome can
be matched to its request); one that raises :class:`PartialBatchError` already says
each request's outcome, which is kept as it is: nothing is split or sent again.

:func:`isolate` tries the pieces one after another; the Ray pool sends them to its
actors at once, with :class:`Bisection` and :func:`halves` keeping the outcomes.

A harness step may also hang (a search server that never answers).  Given a time
limit, :func:`step_outcomes` runs the call in a thread of its own and, past the
limit, every request in it fails with the limit in its reason, without splitting
(halves of a hung call would hang too, each for the whole limit).  Python cannot stop
the thread: it is left to finish on its own, and whatever it returns is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from suffice.exceptions import EngineFatalError, PartialBatchError, StepError

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")
Failure = TypeVar("Failure")


@dataclass(frozen=True)
class Piece(Generic[Request]):
    """Consecutive requests of a batch, from position ``start``."""

    start: int
    requests: Sequence[Request]


def halves(piece: Piece[Request]) -> list[Piece[Request]]:
    """The two halves of a piece of at least two requests."""
    middle = len(piece.requests) // 2
    return [Piece(piece.start, piece.requests[:middle]), Piece(piece.start + middle, piece.requests[middle:])]


class Bisection(Generic[Request, Outcome]):
    """One batch's outcomes by position while its pieces come back, in any order."""

    def __init__(self, requests: Sequence[Request]) -> None:
        self.whole = Piece(0, requests)
        self._outcomes: dict[int, Outcome] = {}

    def settle(self, piece: Piece[Request], outcomes: Sequence[Outcome]) -> None:
        self._outcomes.update(zip(range(piece.start, piece.start + len(piece.requests)), outcomes, strict=True))

    @property
    def complete(self) -> bool:
        return len(self._outcomes) == len(self.whole.requests)

    def outcomes(self) -> list[Outcome]:
        return [self._outcomes[i] for i in range(len(self.whole.requests))]


class WrongCountError(Exception):
    """A call returned a different number of outcomes than it was given requests."""

    def __init__(self, got: int, sent: int) -> None:
        super().__init__(f"returned {got} results for {sent} {'request' if sent == 1 else 'requests'}")


def isolate(
    call: Callable[[Sequence[Request]], Sequence[Outcome]],
    requests: Sequence[Request],
    failed: Callable[[Exception, Sequence[Request]], Failure],
) -> list[Outcome | Failure]:
    """One outcome per request, in order: ``call``'s, or where a request failed alone
    what ``failed`` returned for it.

    ``failed(exc, requests)`` is told of every failed call (of several requests too:
    the halves follow); it raises what no request is to blame for, which stops
    everything.  Any exception is caught on purpose: who calls says which are fatal.
    """
    batch: Bisection[Request, Outcome | Failure] = Bisection(requests)
    todo = [batch.whole] if requests else []
    while todo:
        piece = todo.pop()
        try:
            outcomes: Sequence[Outcome | Failure] = list(call(piece.requests))
            if len(outcomes) != len(piece.requests):
                raise WrongCountError(len(outcomes), len(piece.requests))
        except PartialBatchError as exc:
            outcomes = exc.outcomes
        except Exception as exc:
            failure = failed(exc, piece.requests)
            if len(piece.requests) == 1:
                outcomes = [failure]
            else:
                todo.extend(reversed(halves(piece)))  # the first half first, as it was sent
                continue
        batch.settle(piece, outcomes)
    return batch.outcomes()


def step_outcomes(
    call: Callable[[Sequence[Request]], Sequence[Outcome]],
    requests: Sequence[Request],
    error: type[StepError],
    seconds_each: float | None = None,
) -> list[Outcome | StepError]:
    """A harness step's outcome per request, in order; an ``error`` instance where a
    request failed alone (its message is the question's review reason: never silent).

    ``seconds_each``: the call's time limit is this many seconds per request in it
    (``None``: no limit).  A fatal engine failure (a dead engine) is nobody's
    question: it propagates, and the run stops, as the batch runner's does.
    """

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
