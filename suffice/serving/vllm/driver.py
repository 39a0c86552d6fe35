"""The in-process engine's loop: every caller's requests batched into one vLLM engine core, each segment's
continuation queued as its segment ends, in the order and under the KV budget of :mod:`suffice.serving.scheduling`.

It drives anything with vLLM's ``step``/``abort_request``; how a request is built and what a finished one adds to its
sequence is the engine's (``submit`` and ``absorb``), as is how a dead engine is told (``alive``).  Tests drive it with
a stand-in engine core.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from suffice.exceptions import CancelledError
from suffice.grammars.constraint import Constraint, Segment
from suffice.serving import startup
from suffice.serving.base import Progress, report_read
from suffice.serving.decoding import TokenTrail
from suffice.serving.scheduling import Scheduler

#: How often a waiting caller checks that the engine's processes are alive (seconds).
WATCH_INTERVAL = 0.5


@dataclass(eq=False)  # by identity: a scheduler's item
class TokenSequence:
    """One request's token sequence as its segments are generated."""

    index: int
    prompt_ids: list[int]
    constraint: Constraint
    segment: Segment
    generated_ids: list[int] = field(default_factory=list)
    text: str = ""
    trail: TokenTrail = field(default_factory=lambda: TokenTrail(wanted=True))
    #: Prefix tokens appended to the sequence (prefilled: counted with the prompt).
    prefilled: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    #: The engine has read the prompt (reported to progress).
    read: bool = False
    #: vLLM's priority for every segment of this sequence: its rank, set as it starts
    #: (:mod:`suffice.serving.scheduling`).
    rank: int = 0


@dataclass(eq=False)
class Job:
    """One caller's requests: done when every sequence has its last segment."""

    sequences: list[TokenSequence]
    progress: Progress | None
    cancel: threading.Event | None = None
    remaining: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.done.set()


#: Queues each sequence's current segment, yielding each request id once it is in the engine.
Submit = Callable[[list[TokenSequence]], Iterator[tuple[str, TokenSequence]]]
#: Appends a finished segment's completion to its sequence.
Absorb = Callable[[TokenSequence, Any], None]
_Entry = tuple[TokenSequence, Job]


class Driver:
    """The engine loop, on one daemon thread shared by every caller, so a request from any thread joins the running
    batch at the next step.  Only this thread touches the engine; since ``step()`` never returns once the engine core
    is killed, callers wait with a timeout and call ``alive`` every :data:`WATCH_INTERVAL`.
    """

    def __init__(
        self, engine: Any, submit: Submit, absorb: Absorb, alive: Callable[[], None], capacity: int | None = None
    ) -> None:
        self._engine = engine
        self._submit = submit
        self._absorb = absorb
        self._alive = alive
        #: Jobs to start, and ``(job, error)`` for jobs to stop (their caller gave up).
        self._inbox: queue.Queue[Job | tuple[Job, BaseException]] = queue.Queue()
        self._running: dict[str, _Entry] = {}
        self._scheduler: Scheduler[_Entry] = Scheduler(capacity)
        #: Requests whose first token was seen, while start-up marks are recorded (:mod:`suffice.serving.startup`).
        self._first_token: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="suffice-engine", daemon=True)
        self._thread.start()

    def run(self, job: Job) -> None:
        """Submit ``job`` and wait until done; raise what failed it (CancelledError once ``job.cancel`` is set)."""
        job.remaining = len(job.sequences)
        self._inbox.put(job)
        withdrawn = False
        while not job.done.wait(WATCH_INTERVAL):
            self._alive()
            if not withdrawn and job.cancel is not None and job.cancel.is_set():
                self._inbox.put((job, CancelledError("the caller withdrew the request")))
                withdrawn = True  # the loop drops the job after its current step
        if job.error is not None:
            raise job.error

    def _loop(self) -> None:
        while True:
            if not self._running and not self._scheduler.waiting:
                self._take(self._inbox.get())
            while not self._inbox.empty():  # this thread alone takes from the inbox
                self._take(self._inbox.get_nowait())
            for (seq, job), rank in self._scheduler.admit(lambda entry: entry[1].done.is_set()):
                seq.rank = rank
                self._add(job, [seq])
            if not self._running:
                continue
            try:
                outputs = self._engine.step()
            except BaseException as exc:  # every running job fails; the caller decides what it means
                jobs = {id(job): job for _, job in self._running.values()}
                with contextlib.suppress(Exception):
                    self._engine.abort_request(list(self._running))
                self._running.clear()
                self._scheduler.drop_started()
                for job in jobs.values():
                    job.fail(exc)
                continue
            follow_ups: list[_Entry] = []
            self._credit_read()
            for out in outputs:
                if not out.finished:
                    continue
                entry = self._running.pop(out.request_id, None)
                if entry is None:
                    continue
                if startup.enabled():
                    self._first_token.discard(out.request_id)
                    startup.mark(f"segment done {out.request_id}")
                seq, job = entry
                if job.done.is_set():
                    continue
                try:
                    if not seq.read:  # read and done within one step
                        seq.read = True
                        report_read(job.progress, 1)
                    self._absorb(seq, out.outputs[0])
                    # Only a segment ended by end-of-sequence goes on: "length", "abort", "error" end the request.
                    segment = seq.constraint.next_segment(seq.text) if seq.finish_reason == "stop" else None
                    if segment is not None:
                        seq.segment = segment
                        follow_ups.append(entry)
                        continue
                    self._scheduler.finish(entry, seq.completion_tokens + seq.prefilled)
                    job.remaining -= 1
                    if job.progress is not None:
                        job.progress(1)
                    if job.remaining == 0:
                        job.done.set()
                except BaseException as exc:  # a failing callback or output fails its job, not the loop
                    self._drop(job, exc)
            for seq, job in follow_ups:
                if not job.done.is_set():
                    self._add(job, [seq])

    def _credit_read(self) -> None:
        """Report every sequence whose prompt the engine has now read (:meth:`~suffice.serving.base.Progress.read`).

        Reads vLLM's per-request ``RequestState.is_prefilling`` (streaming the first segment instead cost 4-7 % of
        generation time); without that flag a request is credited when it completes.
        """
        processor = getattr(self._engine, "output_processor", None)
        states = getattr(processor, "request_states", None)
        if not isinstance(states, dict):
            return
        # Keyed by vLLM's internal ids (ours with a suffix), mapped from ours here.
        internal = getattr(processor, "external_req_ids", None)
        failed: list[tuple[Job, BaseException]] = []
        # Every segment's first token is looked for only while start-up marks are recorded.
        marking = startup.enabled()
        for request_id, (seq, job) in self._running.items():
            if job.done.is_set() or (seq.read and not (marking and request_id not in self._first_token)):
                continue
            ids = (internal.get(request_id) or [request_id]) if isinstance(internal, dict) else [request_id]
            state = next((states[i] for i in ids if i in states), None)
            if state is not None and getattr(state, "is_prefilling", True) is False:
                if marking and request_id not in self._first_token:
                    self._first_token.add(request_id)
                    startup.mark(f"segment first token {request_id}")
                if seq.read:
                    continue
                seq.read = True
                try:
                    report_read(job.progress, 1)
                except BaseException as exc:  # the caller's callback: fails its job only
                    failed.append((job, exc))
        for job, error in failed:
            if not job.done.is_set():
                self._drop(job, error)

    def _take(self, message: Job | tuple[Job, BaseException]) -> None:
        if isinstance(message, tuple):
            job, error = message
            if not job.done.is_set():
                self._drop(job, error)
            return
        if not message.sequences:
            message.done.set()
            return
        for seq in message.sequences:
            self._scheduler.queue((seq, message), seq.prompt_ids, seq.constraint)

    def _add(self, job: Job, sequences: list[TokenSequence]) -> None:
        try:
            # One at a time: if the k-th add_request raises, the k-1 before it are aborted with the job.
            for request_id, seq in self._submit(sequences):
                self._running[request_id] = (seq, job)
                startup.mark(f"segment queued {request_id}")
        except BaseException as exc:
            self._drop(job, exc)

    def _drop(self, job: Job, error: BaseException) -> None:
        """Fail one job and abort its requests; the others run on (its waiting ones leave when their turn comes)."""
        mine = [request_id for request_id, (_, owner) in self._running.items() if owner is job]
        for request_id in mine:
            del self._running[request_id]
        self._first_token.difference_update(mine)
        if mine:
            with contextlib.suppress(Exception):
                self._engine.abort_request(mine)
        for seq in job.sequences:
            self._scheduler.drop((seq, job))
        job.fail(error)
