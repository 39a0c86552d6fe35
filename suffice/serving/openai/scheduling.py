"""The in-process engine's two scheduling rules (:mod:`suffice.serving.scheduling`), applied to a server where it
lets them be.

1. **Order**: every segment of a request carries its rank as vLLM's ``priority``.  A server started without
   ``--scheduling-policy priority`` ignores the field (vLLM 0.32) or refuses it (earlier releases: then it is no longer
   sent).
2. **Admission**: the server's KV cache is read from the ``vllm:cache_config_info`` metric.  Other clients of the same
   server are not counted: the rule bounds what this engine adds.

Which of the two hold is said once, at start, where it cannot be known or does not hold (:attr:`Scheduling.notes`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence

from suffice.exceptions import EngineError
from suffice.grammars.constraint import Constraint
from suffice.serving.openai.client import Client
from suffice.serving.scheduling import Scheduler

_log = logging.getLogger(__name__)

#: How often a request waiting for its turn checks whether it was given up (seconds).
_WAIT_POLL = 0.5
_INFO_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
PRIORITY_FLAG = "--scheduling-policy priority"


class Given(Exception):
    """A request given up while it waited for its turn."""


def kv_capacity(client: Client) -> int | None:
    """The tokens the server's KV cache holds (summed over its engines), or ``None`` where its metrics do not say."""
    try:
        text = client.call("GET", "/metrics", retries=0).text
    except EngineError:
        return None
    total = 0
    for line in _INFO_LINE.finditer(text):
        labels = dict(_LABEL.findall(line["labels"]))
        try:
            blocks, size = int(labels.get("num_gpu_blocks", "")), int(labels.get("block_size", ""))
        except ValueError:
            continue
        if blocks > 0 and size > 0:
            total += blocks * size
    return total or None


def scheduling_policy(client: Client) -> str | None:
    """The server's scheduling policy, where it says (``/server_info``: vLLM's development mode only)."""
    try:
        info = client.call("GET", "/server_info?config_format=json", retries=0).json()
    except (EngineError, ValueError):
        return None
    config = info.get("vllm_config") if isinstance(info, dict) else None
    scheduler = config.get("scheduler_config") if isinstance(config, dict) else None
    policy = scheduler.get("policy") if isinstance(scheduler, dict) else None
    return str(policy) if isinstance(policy, str) else None


class Scheduling:
    """Turns and KV budget for the requests of one engine, shared by every thread that calls it."""

    def __init__(self, client: Client) -> None:
        self.capacity = kv_capacity(client)
        self.policy = scheduling_policy(client)
        #: Whether segments carry ``priority`` (off once the server refuses it).
        self.send_priority = self.policy in (None, "priority")
        self._scheduler: Scheduler[_Turn] = Scheduler(self.capacity)
        self._turns = threading.Condition()
        server = f"the server at {client.base_url}"
        #: What does not hold, or cannot be known, said once at start.
        self.notes: list[str] = []
        if self.policy is None:
            self.notes.append(
                f"{server} does not say how it schedules: unless it was started with {PRIORITY_FLAG}, a "
                "verdict's continuations may wait behind new prompts and compute theirs again under load"
            )
        elif self.policy != "priority":
            self.notes.append(
                f"{server} schedules {self.policy}, not by priority: a verdict's continuations may wait behind new "
                f"prompts and compute theirs again under load (start it with {PRIORITY_FLAG})"
            )
        if self.capacity is None:
            self.notes.append(
                f"{server} does not report its KV cache (vllm:cache_config_info in /metrics): requests start as "
                "the concurrency allows, not as the cache holds them"
            )
        for note in self.notes:
            _log.warning("suffice: %s", note)

    def refused_priority(self, message: str) -> None:
        """The server refused the ``priority`` field: segments go without it from now on."""
        if self.send_priority:
            self.send_priority = False
            note = f"the server refused request priorities ({message}): start it with {PRIORITY_FLAG}"
            self.notes.append(note)
            _log.warning("suffice: %s", note)

    @contextlib.contextmanager
    def turn(
        self, prompt_ids: Sequence[int], constraint: Constraint, given_up: Callable[[], bool]
    ) -> Iterator[tuple[int, Callable[[int], None]]]:
        """Wait for this request's turn and room in the KV cache; yield its rank and a callable to report its output
        tokens once it has finished.  Raises :class:`Given` if ``given_up()`` while it waited."""
        mine = _Turn(given_up)
        with self._turns:
            self._scheduler.queue(mine, prompt_ids, constraint)
            while True:
                self._admit()
                if mine.rank is not None:
                    break
                if mine.passed:
                    raise Given
                self._turns.wait(_WAIT_POLL)
        output: list[int] = []
        try:
            yield mine.rank, output.append
        finally:
            with self._turns:
                if output:
                    self._scheduler.finish(mine, output[-1])
                else:
                    self._scheduler.drop(mine)
                self._admit()

    def _admit(self) -> None:
        """Start the requests whose turn it is, passing over those given up (under ``_turns``); wake their threads."""
        waiting = self._scheduler.waiting
        for turn, rank in self._scheduler.admit(_Turn.give_up):
            turn.rank = rank
        if self._scheduler.waiting != waiting:
            self._turns.notify_all()


class _Turn:
    """One request's place in the queue, and what became of it."""

    def __init__(self, given_up: Callable[[], bool]) -> None:
        self._given_up = given_up
        #: Its rank once it has started.
        self.rank: int | None = None
        #: Given up when its turn came: it passed it on.
        self.passed = False

    def give_up(self) -> bool:
        self.passed = self._given_up()
        return self.passed
