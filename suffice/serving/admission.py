"""Which sequences may start now: the admission rule both engines share.

A segment's continuation is a new request that reads its prompt back from the prefix cache.  With more sequences
started than the KV cache holds, vLLM gives the blocks a finished segment leaves to queued prompts before the
continuation arrives, and the continuation computes its whole prompt again (``benchmarks/README.md``, "Where the time
goes").  So a sequence starts only while every started sequence's tokens fit in the KV cache (the first always
starts): its prompt, less what it shares with the prompt started before it, and its output, counted at the most its
constraint allows until a sequence of the same constraint has finished, then at 1.25x the longest such output yet (a
full verdict's bound is 2,428 tokens, its outputs 200-400: counted at the bound, 46 of 240 sequences run at a time).
Should outputs outgrow that, vLLM preempts the sequence started last.
"""

from __future__ import annotations

from collections.abc import Sequence

from suffice.grammars.constraint import Constraint


class KVBudget:
    """The tokens started sequences may hold in a KV cache of ``capacity`` tokens (``None``: no bound known).

    Not thread-safe: the in-process engine calls it from its one driver thread, the openai engine under its lock.
    """

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.held = 0
        self.started = 0
        #: The most tokens a finished sequence generated, by its constraint's key (equal keys: equal shapes).
        self._longest: dict[str, int] = {}
        #: The prompt last started: a prompt's prefix shared with it is in the cache once.
        self._last_prompt: Sequence[int] = ()

    def cost(self, prompt_ids: Sequence[int], constraint: Constraint) -> int:
        """The tokens a sequence would hold if it started now."""
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
        """A sequence ended with ``output_tokens``: its tokens leave, its length teaches the estimate."""
        self.drop(cost)
        self._longest[key] = max(self._longest.get(key, 0), output_tokens)

    def drop(self, cost: int) -> None:
        """A sequence left without finishing (its caller gave up, or it failed)."""
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
