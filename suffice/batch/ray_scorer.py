"""Judging on Ray (``suffice judge --ray``, and :class:`RayJudge`): batches out to a pool of actors, results back in
order.

A dead actor is replaced and its batches sent again, each alone, up to ``RayOptions.max_batch_retries`` times; a batch
that still kills actors is halved (:mod:`suffice.serving.isolation`) down to the record that kills them, which gets an
``EngineCrashError`` row.  Deaths before an engine opened, and a server gone, are never blamed on records; an error no
retry can fix stops the run, unwrapped, as do actors that die on every record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from suffice.batch.options import RayOptions, whole_number
from suffice.batch.ray_pool import ActorPool, cause, ray_module
from suffice.batch.resources import check_capacity
from suffice.batch.scoring import Crashed, Notify, Results, Scorer, _quiet
from suffice.config import JudgeConfig
from suffice.exceptions import EngineDeadError, EngineUnreachableError, SufficeError
from suffice.gates.base import Gate
from suffice.gates.registry import check_call
from suffice.judge import Judge
from suffice.records.item import record_id
from suffice.results import JudgeResult
from suffice.rows.shaping import crash_result
from suffice.serving.base import Progress
from suffice.serving.factory import engine_settings
from suffice.serving.isolation import Bisection, halves

#: Seconds without a finished batch after which the run checks that the cluster can still hold its actors.
CAPACITY_CHECK_S = 30.0


class RayScorer(Scorer):
    """A pool of actors, each a :class:`JudgeWorker`; batches in, results out in order."""

    def __init__(
        self,
        config: JudgeConfig,
        gate: Gate,
        options: RayOptions,
        notify: Notify = _quiet,
        describe: str = "",
        open_judge: Callable[[JudgeConfig], Judge] | None = None,
    ) -> None:
        self.gate = gate
        self.pool = ActorPool(config, options, notify, describe, open_judge)
        self._schedule: _Schedule | None = None

    def map(self, batches: Iterator[list[object]], progress: Progress | None, crashed: Crashed = None) -> Results:
        try:  # nothing to judge: no actor, no engine
            first = next(batches)
        except StopIteration:
            return
        self.pool.start()
        self._schedule = _Schedule(self.pool, progress, crashed)
        yield from self._schedule.run(itertools.chain([first], batches))

    def implicated(self) -> int | None:
        return None  # the record that kills the actors gets its row on this run: none left to blame

    def served(self) -> dict[str, str]:
        return self.pool.served()

    def weights_hash(self) -> str | None:
        return self.pool.weights_hash()  # the actors read their weights; the driver writes the audit rows

    def close(self) -> None:
        self.pool.close(dropping=len(self._schedule.flight) if self._schedule is not None else 0)


class RayJudge(AbstractContextManager["RayJudge"]):
    """A pool of Ray actors, one engine each, as a :class:`~suffice.JudgeProtocol`: ``judge_batch(records)`` splits
    the records into batches of ``batch_size``, spreads them over the actors and returns one result per record, in
    order, as ``suffice judge --ray`` does (a dead actor replaced and its batch sent again; a record that kills the
    engine alone gets an ``EngineCrashError`` row).  The actors start at the first call and stop at :meth:`close`.

    ``config``: the gate, its options and the engine every actor opens (``open_judge``: how, default
    :meth:`Judge.open`); ``options``: the cluster and the actors (default: a running cluster, one actor per GPU).
    ``gate=`` / ``options=`` of a call are the in-process :class:`~suffice.Judge`'s: each actor builds a judge for
    them once on its engine.  Calls run one at a time (the pool is one schedule); ``ajudge_batch`` awaits one on a
    worker thread, and cancelling the awaiting task does not stop the actors' work."""

    def __init__(
        self,
        config: JudgeConfig,
        options: RayOptions | None = None,
        *,
        batch_size: int = 64,
        notify: Notify = _quiet,
        open_judge: Callable[[JudgeConfig], Judge] | None = None,
    ) -> None:
        whole_number("batch_size", batch_size, least=1)
        self.config = config
        self.batch_size = batch_size
        self.gate = config.make_gate()
        engine = config.engine
        describe = f"{engine.kind}, backend {engine.backend}, model {engine.model or 'embedded'}"
        self.pool = ActorPool(config, options or RayOptions(), notify, describe, open_judge)
        self._lock = threading.Lock()
        self._gates: dict[tuple[str, tuple[tuple[str, str], ...]], Gate] = {}

    def gate_for(self, gate: str | None = None, options: Mapping[str, Any] | None = None) -> Gate:
        """The gate the actors judge a call with this ``gate`` and ``options`` by (built here, once, as an in-process
        :class:`Judge` builds it: a refused one is a ConfigError)."""
        if gate in (None, self.config.gate) and not options:
            return self.gate
        check_call(gate, options)
        name = gate or self.config.gate
        merged = {**self.config.options, **(options or {})} if name == self.config.gate else dict(options or {})
        config = dataclasses.replace(self.config, gate=name, options=merged)
        key = (config.gate, tuple(sorted((str(k), repr(v)) for k, v in config.options.items())))
        if key not in self._gates:
            self._gates[key] = config.make_gate()
        return self._gates[key]

    def settings_for(self, gate: str | None = None, options: Mapping[str, Any] | None = None) -> dict[str, str]:
        """What decides the rows of such a call: the gate's settings and the actors' engine's."""
        return {**self.gate_for(gate, options).settings(), **engine_settings(self.config.engine)}

    def judge_batch(
        self, records: Sequence[object], *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        """One result per record, in order (see the class docstring)."""
        judged_by = self.gate_for(gate, options)  # a refused gate or option fails here, before any actor starts
        records = list(records)
        if not records:
            return []
        values = engine_settings(self.config.engine)
        model, backend = values.get("model", ""), values.get("backend", "")

        def crashed(record: object) -> JudgeResult:
            return crash_result(record_id(record), judged_by, model, backend)

        batches = [records[start : start + self.batch_size] for start in range(0, len(records), self.batch_size)]
        call = {"gate": gate, "options": dict(options) if options else None}
        with self._lock:
            self.pool.start()
            schedule = _Schedule(self.pool, None, crashed, call)
            return [result for batch in schedule.run(iter(batches)) for result in batch]

    def judge(
        self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        """One record's result (see :meth:`judge_batch`)."""
        return self.judge_batch([record], gate=gate, options=options)[0]

    async def ajudge_batch(
        self, records: Sequence[object], *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        """:meth:`judge_batch`, awaited on a worker thread."""
        self.gate_for(gate, options)  # a refused gate or option is raised here, not on the thread
        return await asyncio.to_thread(self.judge_batch, list(records), gate=gate, options=options)

    async def ajudge(
        self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        """One record's result, awaited (see :meth:`ajudge_batch`)."""
        return (await self.ajudge_batch([record], gate=gate, options=options))[0]

    def close(self) -> None:
        """Close every actor's engine, then the actors (and a local Ray instance this judge started)."""
        self.pool.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class _Sent:
    """A batch, or a piece of one, on its way to an actor."""

    seq: int
    records: Sequence[object]
    #: Where its records start in batch ``seq``.
    start: int = 0
    slot: int = 0
    actor: Any = None
    tries: int = 0
    #: A half of a batch that kept killing its actors: sent once more, then halved.
    halved: bool = False
    #: Replacement actors whose engine could not start while it waited.
    failed_starts: int = 0


class _Schedule:
    """One run's batches out to the pool's actors and their results back, in order."""

    def __init__(
        self,
        pool: ActorPool,
        progress: Progress | None,
        crashed: Callable[[object], JudgeResult] | None,
        call: Mapping[str, Any] | None = None,
    ) -> None:
        self.pool = pool
        #: The keywords of each actor's ``judge_batch`` (a :class:`RayJudge` call's gate and options).
        self.call = dict(call or {})
        self.progress = progress
        self.crashed = crashed
        self.capacity = 1 + pool.options.queue_per_actor
        # Results come out in order: read no further ahead of the oldest unfinished batch.
        self.window = 2 * self.capacity * len(pool.actors)
        self.load = [0] * len(pool.actors)
        #: Calls in flight (the pool drops them if the run stops before they are back).
        self.flight: dict[Any, _Sent] = {}
        #: Batches sent and not yet handed back, by number, with their results so far.
        self.batches: dict[int, Bisection[JudgeResult]] = {}
        self.waiting: list[_Sent] = []  # to send again, alone
        #: Records that stopped the engine alone: blamed once any batch is judged, else the engine fails.
        self.undecided: list[_Sent] = []
        #: Batches (or pieces) judged: proof that the engine can judge.
        self.judged = 0
        self.next_out = self.seq = 0
        self.exhausted = False

    def run(self, batches: Iterator[list[object]]) -> Iterator[list[JudgeResult]]:
        ray = ray_module()
        while True:
            while self.next_out in self.batches and self.batches[self.next_out].complete:
                yield self.batches.pop(self.next_out).outcomes()
                self.next_out += 1
            self._send_waiting()
            self._send_new(batches)
            starting = self.pool.unsettled_probes()
            if not self.flight and not (starting and (self.waiting or not self.exhausted)):
                if not self.undecided:
                    return
                if not self.judged:
                    raise EngineDeadError(
                        f"every batch sent killed its actor and none was judged on this run "
                        f"({self.pool.replaced} actors replaced): the engine itself is failing; "
                        "see the actors' logs, then rerun the same command to resume"
                    )
                self._blame_undecided()
                continue
            # An actor that opens its engine wakes the loop too: it may take the work waiting.
            ready, _ = ray.wait(list(self.flight) + starting, num_returns=1, timeout=CAPACITY_CHECK_S)
            if not ready:
                check_capacity(ray, self.pool.plan)
            for ref in ready:
                if ref in self.flight:  # else a probe: its actor is settled now
                    self._receive(ref)

    def _send(self, sent: _Sent, slot: int) -> None:
        sent.slot, sent.actor = slot, self.pool.actors[slot]
        # Sent again after its actor died: alone on an actor, so no other batch shares a death.
        self.load[slot] += self.capacity if sent.tries else 1
        self.flight[sent.actor.judge_batch.remote(sent.records, **self.call)] = sent

    def _send_waiting(self) -> None:
        for sent in list(self.waiting):
            idle = [slot for slot, load in enumerate(self.load) if load == 0 and self.pool.settled(slot)]
            # Not where it died, when there is another actor (a bad node must not be blamed on records).
            elsewhere = [slot for slot in idle if slot != sent.slot] if len(self.load) > 1 else idle
            if elsewhere:
                self.waiting.remove(sent)
                self._send(sent, elsewhere[0])

    def _send_new(self, batches: Iterator[list[object]]) -> None:
        # While a batch waits to go again alone, nothing new goes out: an actor drains.
        while not self.waiting and not self.exhausted and self.seq - self.next_out < self.window:
            open_slots = [s for s, load in enumerate(self.load) if self.pool.settled(s) and load < self.capacity]
            if not open_slots:
                return
            try:
                records = next(batches)
            except StopIteration:
                self.exhausted = True
                return
            self.batches[self.seq] = Bisection(len(records))
            self._send(_Sent(self.seq, records), min(open_slots, key=self.load.__getitem__))
            self.seq += 1

    def _receive(self, ref: Any) -> None:
        sent = self.flight.pop(ref)
        self.load[sent.slot] -= self.capacity if sent.tries else 1
        try:
            results: list[JudgeResult] = ray_module().get(ref)
        except Exception as exc:
            again = self._failed(sent, exc)
            self.waiting.extend(again)
            if not again:  # one record that stopped the engine alone: its error row
                self.undecided.append(sent)
                if self.judged:
                    self._blame_undecided()
            return
        self.judged += 1
        self._finish(sent, results)
        self._blame_undecided()

    def _finish(self, sent: _Sent, results: list[JudgeResult]) -> None:
        if len(results) != len(sent.records):
            raise EngineDeadError(f"a Ray actor returned {len(results)} results for {len(sent.records)} records")
        self.batches[sent.seq].settle(sent.start, results)
        if self.progress is not None:
            self.progress(len(results))

    def _blame_undecided(self) -> None:
        for sent in self.undecided:
            if self.crashed is None:
                raise EngineDeadError("a record stopped the engine alone")
            self._finish(sent, [self.crashed(sent.records[0])])
        self.undecided.clear()

    def _failed(self, sent: _Sent, exc: Exception) -> list[_Sent]:
        """A batch failed: replace its actor and return what to send again (the batch, its halves, or nothing for one
        record that stopped the engine alone), or stop the run."""
        reason = cause(exc)
        if isinstance(reason, EngineUnreachableError):
            raise reason  # a server gone: no record caused it, and no new actor brings it back
        died = isinstance(exc, ray_module().exceptions.RayActorError) or isinstance(reason, EngineDeadError)
        if not self.pool.opened(sent.slot, sent.actor):
            # The engine never opened: not a record's doing.  A first actor's error is the setting's: stop with it;
            # a replacement's may pass (a dead engine's GPU memory takes a moment to free): try again.
            if self.pool.generation[sent.slot] == 0 and isinstance(reason, SufficeError) and not died:
                raise reason
            sent.failed_starts += 1
            self._replace(sent, reason)
            if sent.failed_starts > self.pool.options.max_batch_retries:
                raise EngineDeadError(
                    f"{sent.failed_starts} Ray actors could not open their engine for one batch "
                    f"(last: {reason}); rerun the same command to resume"
                ) from exc
            return [sent]
        if not died:
            if isinstance(reason, SufficeError):
                raise reason
            raise EngineDeadError(f"a Ray actor failed: {exc}") from exc
        sent.tries += 1
        self._replace(sent, reason)
        if sent.tries <= (1 if sent.halved else self.pool.options.max_batch_retries):
            return [sent]
        # Out of tries, alone on an actor that had opened its engine: what kills it is in these records.
        if len(sent.records) == 1:
            return []
        first, second = halves(sent.records)
        return [
            _Sent(sent.seq, part, sent.start + offset, sent.slot, tries=1, halved=True)
            for offset, part in ((0, first), (len(first), second))
        ]

    def _replace(self, sent: _Sent, reason: BaseException) -> None:
        self.pool.replace(sent.slot, sent.actor, reason, sent.tries + sent.failed_starts)
