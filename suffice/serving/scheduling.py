"""Which request starts next, and with what priority: the two rules both engines keep (vLLM in process, a vLLM
server over HTTP), with no engine in them.

1. **Order**: requests start in the order they were queued.  Each gets a rank, the order it started in, that every
   segment of it carries as vLLM's ``priority``: a finished segment's continuation is a new request, and served by
   its request's rank, not behind every prompt queued since, it starts at the next step while its prompt is still in
   the prefix cache.
2. **Admission**: with more requests started than the KV cache holds, vLLM gives the blocks a finished segment leaves
   to queued prompts before the continuation arrives, and the continuation computes its whole prompt again
   (``benchmarks/README.md``, "Where the time goes").  So a request starts only while every started request's tokens
   fit in the KV cache (the first always starts): its prompt, less what it shares with the prompt started before it,
   and its output, counted at the most its constraint allows until a request of the same constraint has finished,
   then at 1.25x the longest such output yet (a full verdict's bound is 2,428 tokens, its outputs 200-400: counted at
   the bound, 46 of 240 requests run at a time).  Should outputs outgrow that, vLLM preempts the request started last.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Generic, TypeVar

from suffice.grammars.constraint import Constraint

_T = TypeVar("_T", bound=Hashable)


class KVBudget:
    """The tokens started requests may hold in a KV cache of ``capacity`` tokens (``None``: no bound known)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.held = 0
        self.started = 0
        #: The most tokens a finished request generated, by its constraint's key (equal keys: equal shapes).
        self._longest: dict[str, int] = {}
        #: The prompt last started: a prompt's prefix shared with it is in the cache once.
        self._last_prompt: Sequence[int] = ()

    def cost(self, prompt_ids: Sequence[int], constraint: Constraint) -> int:
        """The tokens a request would hold if it started now."""
        bound = constraint.max_completion_tokens
        output = constraint.max_tokens if bound is None else bound
        longest = self._longest.get(constraint.key)
        if longest is not None:
            output = min(output, longest + longest // 4)
        return len(prompt_ids) - shared_prefix(prompt_ids, self._last_prompt) + output

    def fits(self, cost: int) -> bool:
        return not self.started or self.capacity is None or self.held + cost <= self.capacity

    def take(self, cost: int, prompt_ids: Sequence[int]) -> None:
        self.started += 1
        self.held += cost
        self._last_prompt = prompt_ids

    def finish(self, cost: int, key: str, output_tokens: int) -> None:
        """A request ended with ``output_tokens``: its tokens leave, its length teaches the estimate."""
        self.drop(cost)
        self._longest[key] = max(self._longest.get(key, 0), output_tokens)

    def drop(self, cost: int) -> None:
        """A request left without finishing (its caller gave up, or it failed)."""
        self.started -= 1
        self.held -= cost


def shared_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading token ids two prompts share."""
    shared = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        shared += 1
    return shared


class Scheduler(Generic[_T]):
    """The requests of one engine waiting to start and those started, each a hashable item of the caller's.

    Not thread-safe: the in-process engine calls it from its one driver thread, the openai engine under its lock.
    """

    def __init__(self, capacity: int | None) -> None:
        self.budget = KVBudget(capacity)
        self._waiting: deque[tuple[_T, Sequence[int], Constraint]] = deque()
        #: Started items not finished: what they may hold, and their constraint's key.
        self._started: dict[_T, tuple[int, str]] = {}
        self._ranks = itertools.count()

    @property
    def waiting(self) -> int:
        """How many items wait to start (given-up ones included until their turn comes)."""
        return len(self._waiting)

    def queue(self, item: _T, prompt_ids: Sequence[int], constraint: Constraint) -> None:
        """Queue ``item`` behind every item queued before it."""
        self._waiting.append((item, prompt_ids, constraint))

    def admit(self, given_up: Callable[[_T], bool] = lambda _: False) -> Iterator[tuple[_T, int]]:
        """Start waiting items, first queued first, while they fit: each with its rank, one at a time (``given_up``
        is asked of the next only once the caller has handled the one before).  An item ``given_up`` says is given up
        leaves the queue when its turn comes, unstarted."""
        while self._waiting:
            item, prompt_ids, constraint = self._waiting[0]
            if given_up(item):
                self._waiting.popleft()
                continue
            cost = self.budget.cost(prompt_ids, constraint)
            if not self.budget.fits(cost):
                return
            self._waiting.popleft()
            self.budget.take(cost, prompt_ids)
            self._started[item] = (cost, constraint.key)
            yield item, next(self._ranks)

    def finish(self, item: _T, output_tokens: int) -> None:
        """A started item ended with ``output_tokens`` (prefilled ones included)."""
        entry = self._started.pop(item, None)
        if entry is not None:
            self.budget.finish(entry[0], entry[1], output_tokens)

    def drop(self, item: _T) -> None:
        """A started item left without finishing; nothing if it was not started."""
        entry = self._started.pop(item, None)
        if entry is not None:
            self.budget.drop(entry[0])

    def drop_started(self) -> None:
        """Every started item left without finishing (the engine failed them all)."""
        for cost, _ in self._started.values():
            self.budget.drop(cost)
        self._started.clear()
