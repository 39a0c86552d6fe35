"""Judging on Ray: one engine per actor, kept up for the whole run, across machines.

Two entries, one worker:

* :class:`RayScorer` is what ``suffice judge --ray`` (and :func:`suffice.batch.judge_file`
  with :class:`RayOptions`) uses: the runner streams the input, skips finished ids and
  hands batches to a pool of actors through Ray's object store, so resume, duplicate
  ids, output order and the settings check are exactly those of an in-process run.
  Results come back in the order the batches went out.
* :func:`judge_dataset` is for users already on Ray Data: a ``Dataset`` of records in,
  a ``Dataset`` of result rows out, through ``map_batches`` on the same worker.

Faults: an actor that dies (a lost node, ``ray.kill``, an engine that died inside it)
is replaced by a new one and its batches are sent again, each alone on an actor (so
a death blames one batch), up to ``RayOptions.max_batch_retries`` times per batch; a
batch whose actor died is never half-written, so nothing is lost or duplicated.  A
batch that is still killing its actors holds the cause (a record that crashes the
engine): it is halved, each half alone on an actor, down to that one record, which
gets an ``EngineCrashError`` row while every other record gets its verdict, on the
same run.  Deaths before an actor has opened its engine are never blamed on records
(a replacement that cannot open it is tried again, up to the same bound), nor is a
server that went away.  An error that a retry cannot fix (a model folder that is not
there, a GPU setting on the CPU build) stops the run with that error, unwrapped, and so
do actors that die on every record (nothing judged on the run: the engine is failing).

Ray is imported only here, and only when used (``pip install "suffice[ray]"``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from suffice.batch.options import VERDICT_FORMATS, RayOptions, finite_number, whole_number
from suffice.batch.scoring import Notify, Scorer, _quiet
from suffice.batch.suspects import ENGINE_CRASH
from suffice.config import JudgeConfig
from suffice.exceptions import (
    CancelledError,
    ConfigError,
    EngineDeadError,
    EngineError,
    EngineUnreachableError,
    SufficeError,
)
from suffice.gates.base import Gate
from suffice.judge import Judge
from suffice.results import ErrorInfo, JudgeResult
from suffice.serving.base import Progress
from suffice.serving.machine import quota_cores


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("ray", "ray", 'needs Ray: pip install "suffice[ray]"') from exc
    return ray


class JudgeWorker:
    """The body of one actor: a judge on its own engine, opened once.

    An error while opening is kept and raised by the first call, so the driver gets
    the error itself (a ``ConfigError`` naming the setting), not Ray's "actor died".
    Any error: one from torch or vLLM (a ``RuntimeError``) killed the actor in its
    constructor, and the driver took it for a death a replacement might survive (8
    model loads, then "rerun to resume", which could not help).
    """

    def __init__(self, config: JudgeConfig, open_judge: Callable[[JudgeConfig], Judge] | None = None) -> None:
        self.failed: SufficeError | None = None
        self.judge: Judge | None = None
        #: Set by :meth:`stop`: batches still queued return at once, unjudged.
        self.stopped = False
        try:
            self.judge = (open_judge or Judge.open)(config)
        except SufficeError as exc:
            self.failed = exc
        except Exception as exc:
            self.failed = EngineError(f"the engine could not start: {type(exc).__name__}: {exc}")

    def judge_batch(self, records: Sequence[object]) -> list[JudgeResult]:
        if self.stopped:
            raise CancelledError("the run stopped before this batch began")
        if self.failed is not None:
            raise self.failed
        assert self.judge is not None
        return self.judge.judge_batch(records)

    def pid(self) -> int:
        """This actor's process id, once its engine is open (else the error that stopped it)."""
        if self.failed is not None:
            raise self.failed
        return os.getpid()

    def served(self) -> dict[str, str]:
        """What this actor's engine says it serves (a server's model; see :meth:`Engine.served`)."""
        if self.failed is not None:
            raise self.failed
        assert self.judge is not None
        return self.judge.engine.served()

    def stop(self) -> None:
        """Drop the batches queued behind the running one (called in the actor's
        ``control`` concurrency group, so it is not queued behind them itself)."""
        self.stopped = True

    def close(self) -> None:
        if self.judge is not None:
            self.judge.close()
            self.judge = None


def _cause(exc: BaseException) -> BaseException:
    """The exception a Ray task raised inside the actor (Ray wraps it)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _units(amount: float) -> int:
    """``amount`` of a resource in Ray's own units (it counts in 0.0001s): in floats,
    ``1.0 // 0.2`` is 4, and five actors of 0.2 GPU were refused a GPU Ray gives them."""
    return round(amount * 10_000)


def placeable(nodes: Sequence[dict[str, Any]], *, cpus: float, gpus: float) -> int:
    """How many actors needing ``cpus`` and ``gpus`` the live ``nodes`` (as ``ray.nodes()``
    lists them) can hold, each actor on one node."""
    total = 0
    for node in nodes:
        if not node.get("Alive", False):
            continue
        have = node.get("Resources", {})
        wanted = [(kind, _units(each)) for kind, each in (("CPU", cpus), ("GPU", gpus))]
        counts = [_units(float(have.get(kind, 0))) // each for kind, each in wanted if each > 0]
        total += min(counts) if counts else 1_000_000
    return total


def _fits(ray: Any, *, cpus: float, gpus: float) -> int | None:
    """:func:`placeable` on the cluster's nodes, or ``None`` when they cannot be listed
    (a client connection without the state API)."""
    try:
        nodes = ray.nodes()
    except Exception:
        return None
    return placeable(nodes, cpus=cpus, gpus=gpus)


def _split_cores(count: int) -> list[str | None]:
    """Cores of this machine's affinity mask (within a container's CPU quota) shared
    out, one slice per local actor (two engines bound to the same cores run slower
    than one)."""
    mask = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    mask = list(quota_cores(tuple(mask))[0])
    if count <= 1 or len(mask) < count:
        return [None] * count
    size = len(mask) // count
    return [",".join(str(c) for c in mask[i * size : (i + 1) * size]) for i in range(count)]


@dataclasses.dataclass
class _Sent:
    seq: int
    slot: int
    actor: Any
    records: list[object]
    tries: int = 0
    #: Where its records start in batch ``seq`` (a piece of a batch split in halves).
    start: int = 0
    #: A piece of a batch that kept killing its actors (see :meth:`RayScorer._failed`).
    piece: bool = False
    #: Replacement actors whose engine could not start while it waited.
    failed_starts: int = 0

    @property
    def solo(self) -> bool:
        """Sent again after its actor died: it runs alone on an actor, so if that actor
        dies too, no other batch shares the blame."""
        return self.tries > 0


#: Seconds without a finished batch after which :meth:`RayScorer.map` checks that the
#: cluster can still hold its actors.
CAPACITY_CHECK_S = 30.0

#: The actors' concurrency group for :meth:`JudgeWorker.stop`, beside the default one
#: that judges one batch at a time.
CONTROL = "control"

#: Seconds :meth:`RayScorer.close` lets the actors close their engines: after a run
#: that ended, and after one stopped with batches in flight (a batch already running
#: cannot be interrupted; the actor is killed after this).
CLOSE_WAIT_S = {False: 60.0, True: 10.0}


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
        self.config = config
        self.gate = gate
        self.options = options
        self._open_judge = open_judge
        self._notify = notify
        self._describe = describe
        self._run = uuid.uuid4().hex[:8]
        self._owns_ray = False
        self._actors: list[Any] = []
        self._configs: list[JudgeConfig] = []
        self._remote: Any = None
        self._started = False
        #: Per slot: which replacement its live actor is (0: the first), for its name.
        self._generation: list[int] = []
        #: Actors started to replace dead ones (for the summary and tests).
        self.replaced = 0
        #: Batches (or pieces) judged on this run: proof that the engine can judge.
        self._judged = 0
        #: Per live actor (by ``id``): a call that resolves once its engine is open.
        self._probes: dict[int, Any] = {}
        #: Actors (by ``id``) whose probe has come back, opened or not: the only ones
        #: batches go to (see :meth:`_settled`).
        self._settled_ids: set[int] = set()
        #: Batches sent and not yet back (:meth:`map`'s, for :meth:`close`).
        self._flight: dict[Any, _Sent] = {}
        #: Each actor's resources (set when the pool starts).
        self._remote_options: dict[str, float] = {}

    # -- the pool ------------------------------------------------------------------
    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        ray = _ray()
        local = self.options.address == "local"
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.options.address,
                    include_dashboard=False,
                    log_to_driver=self.config.engine.verbose,
                    logging_level="warning" if not self.config.engine.verbose else "info",
                    namespace="suffice",
                    **({"object_store_memory": 512 * 1024**2} if local else {}),
                )
            except Exception as exc:  # ConnectionError, ValueError for a malformed address, ...
                raise ConfigError("ray", self.options.address, f"cannot join a Ray cluster there: {exc}") from exc
            self._owns_ray = True
        resources = ray.cluster_resources()
        gpus = float(resources.get("GPU", 0))
        tensor = self.config.engine.tensor_parallel_size or 1
        per_gpu = self.options.gpus_per_actor if self.options.gpus_per_actor is not None else (tensor if gpus else 0.0)
        count = self.options.actors or (max(1, _units(gpus) // _units(per_gpu)) if per_gpu else 1)
        cpus = self.options.cpus_per_actor if self.options.cpus_per_actor is not None else 1.0
        # An actor the cluster cannot place would wait for ever, and the output with it.
        for kind, each, have in (("GPU", per_gpu, gpus), ("CPU", cpus, float(resources.get("CPU", 0)))):
            if count * each > have:
                raise ConfigError(
                    "actors",
                    count,
                    f"needs {count * each:g} {kind}s ({each:g} per actor), the Ray cluster has {have:g}",
                )
        # Each actor on one node: two machines with one GPU each add up to the 2 GPUs of
        # --tensor-parallel-size 2, but neither can hold the actor, which waited for ever.
        fits = _fits(ray, cpus=cpus, gpus=per_gpu)  # None: the sums above are all we know
        if fits is not None and count > fits:
            raise ConfigError(
                "actors",
                count,
                f"needs {per_gpu:g} GPU and {cpus:g} CPU per actor on one node; the Ray cluster's "
                f"nodes can hold {fits} such actor{'s' if fits != 1 else ''}",
            )
        self._remote_options = {"num_cpus": cpus, "num_gpus": per_gpu}
        self._remote = ray.remote(num_cpus=cpus, num_gpus=per_gpu, max_restarts=0, concurrency_groups={CONTROL: 1})(
            JudgeWorker
        )
        cores = _split_cores(count) if local and not per_gpu and self.config.engine.cores is None else [None] * count
        self._configs = [
            self.config
            if core is None
            else dataclasses.replace(self.config, engine=dataclasses.replace(self.config.engine, cores=core))
            for core in cores
        ]
        where = "a local Ray instance" if local else f"the Ray cluster at {self.options.address}"
        self._notify(
            f"starting {count} Ray actor{'s' if count > 1 else ''} on {where}, one engine each "
            f"({self._describe}; {per_gpu:g} GPU, {cpus:g} CPU per actor)"
        )
        self._generation = [0] * count
        self._actors = [self._new_actor(slot) for slot in range(count)]

    def _new_actor(self, slot: int) -> Any:
        name = f"suffice-{self._run}-{slot}-{self._generation[slot]}"
        actor = self._remote.options(name=name).remote(self._configs[slot], self._open_judge)
        # Runs after the actor's __init__, before any batch: resolves once its engine is open.
        self._probes[id(actor)] = actor.pid.remote()
        return actor

    def _settled(self, slot: int) -> bool:
        """Whether the driver has seen the slot's actor open its engine (or fail to).

        Batches go only to such an actor.  Why: the probe's answer travels after the
        call returns, and an actor sent a batch at once could die of it (a record that
        kills its process outright) before that answer left: its death then read as an
        engine that never opened, never a record's doing, and a poison record stopped
        the run ("2 Ray actors could not open their engine") instead of getting its row.
        Seen under load on this 2-core machine, in 2 of 2 full test runs."""
        actor = self._actors[slot]
        key = id(actor)
        if key in self._settled_ids:
            return True
        probe = self._probes.get(key)
        if probe is None:
            return True
        done, _ = _ray().wait([probe], num_returns=1, timeout=0)
        if done:
            self._settled_ids.add(key)
        return bool(done)

    def _unsettled_probes(self) -> list[Any]:
        """The probes of the actors still opening their engine."""
        return [
            self._probes[id(actor)]
            for slot, actor in enumerate(self._actors)
            if id(actor) in self._probes and not self._settled(slot)
        ]

    def _opened(self, actor: Any) -> bool:
        """Whether ``actor`` opened its engine (a death before that is the engine's, or the
        node's, never a record's)."""
        ray = _ray()
        probe = self._probes.get(id(actor))
        if probe is None:
            return False
        try:
            ray.get(probe, timeout=30)
        except Exception:
            return False
        return True

    @property
    def actor_names(self) -> list[str]:
        """Names of the live actors (namespace ``suffice``): what a test or an operator kills."""
        return [f"suffice-{self._run}-{slot}-{self._generation[slot]}" for slot in range(len(self._actors))]

    def map(
        self,
        batches: Iterator[list[object]],
        progress: Progress | None,
        crashed: Callable[[object], JudgeResult] | None = None,
    ) -> Iterator[list[JudgeResult]]:
        ray = _ray()
        try:  # nothing to judge: no actor, no engine
            first = next(batches)
        except StopIteration:
            return
        self._start()
        batches = itertools.chain([first], batches)
        capacity = 1 + self.options.queue_per_actor
        # Results come out in order, so finished batches wait behind a slow one: read no
        # further than this many batches ahead of the oldest unfinished one.
        window = 2 * capacity * len(self._actors)
        load = [0] * len(self._actors)
        flight: dict[Any, _Sent] = {}
        self._flight = flight  # what close() cancels if the run stops before it drains
        done: dict[int, list[JudgeResult]] = {}
        #: Batches split in pieces: their results so far, by record position.
        pieces: dict[int, list[JudgeResult | None]] = {}
        waiting: list[_Sent] = []  # batches to send again
        #: Records that stopped the engine alone before any batch was judged: blamed
        #: once one is (the engine works), else the engine is what fails.
        undecided: list[_Sent] = []
        next_out = seq = 0
        exhausted = False

        def send(sent: _Sent, slot: int) -> None:
            sent.slot, sent.actor = slot, self._actors[slot]
            load[slot] += capacity if sent.solo else 1  # a solo batch fills its actor
            flight[sent.actor.judge_batch.remote(sent.records)] = sent

        def finish(sent: _Sent, results: list[JudgeResult]) -> None:
            if len(results) != len(sent.records):
                raise EngineDeadError(f"a Ray actor returned {len(results)} results for {len(sent.records)} records")
            if sent.seq not in pieces:
                done[sent.seq] = results
            else:
                got = pieces[sent.seq]
                got[sent.start : sent.start + len(results)] = results
                if all(r is not None for r in got):
                    done[sent.seq] = [r for r in got if r is not None]
                    del pieces[sent.seq]
            if progress is not None:
                progress(len(results))

        def blame(sent: _Sent) -> None:
            if crashed is None:
                raise EngineDeadError("a record stopped the engine alone")
            finish(sent, [crashed(sent.records[0])])

        while True:
            for sent in list(waiting):
                idle = [slot for slot in range(len(load)) if load[slot] == 0 and self._settled(slot)]
                # Not where it died, when there is another actor (a bad node or GPU must
                # not be blamed on the records it was given).
                elsewhere = [slot for slot in idle if slot != sent.slot] if len(load) > 1 else idle
                if elsewhere:
                    waiting.remove(sent)
                    send(sent, elsewhere[0])
            # While a batch waits to go again alone, nothing new goes out: an actor drains.
            while not waiting and not exhausted and seq - next_out < window:
                open_slots = [slot for slot in range(len(load)) if self._settled(slot) and load[slot] < capacity]
                if not open_slots:
                    break
                try:
                    records = next(batches)
                except StopIteration:
                    exhausted = True
                    break
                send(_Sent(seq, 0, None, records), min(open_slots, key=load.__getitem__))
                seq += 1
            starting = self._unsettled_probes()
            if not flight and starting and (waiting or not exhausted):
                # Work waits for an actor that is still opening its engine.
                opened, _ = ray.wait(starting, num_returns=1, timeout=CAPACITY_CHECK_S)
                if not opened:
                    self._check_capacity()
                continue
            if not flight:
                if not undecided:
                    break
                if not self._judged:
                    raise EngineDeadError(
                        f"every batch sent killed its actor and none was judged on this run "
                        f"({self.replaced} actors replaced): the engine itself is failing; "
                        "see the actors' logs, then rerun the same command to resume"
                    )
                for sent in undecided:
                    blame(sent)
                undecided.clear()
                continue
            # An actor that opens its engine wakes the loop too: it may take a batch.
            ready, _ = ray.wait(list(flight) + starting, num_returns=1, timeout=CAPACITY_CHECK_S)
            if not ready:
                self._check_capacity()
                continue
            for ref in ready:
                if ref not in flight:
                    continue  # a probe: its actor is settled now
                sent = flight.pop(ref)
                load[sent.slot] -= capacity if sent.solo else 1
                try:
                    results: list[JudgeResult] = ray.get(ref)
                except Exception as exc:
                    again = self._failed(sent, exc)
                    if not sent.piece and (not again or again[0].piece):
                        pieces[sent.seq] = [None] * len(sent.records)
                    waiting.extend(again)
                    if not again:  # one record that stopped the engine alone: its error row
                        if self._judged:
                            blame(sent)
                        else:
                            undecided.append(sent)
                    continue
                self._judged += 1
                finish(sent, results)
                for culprit in undecided:
                    blame(culprit)
                undecided.clear()
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1

    def _check_capacity(self) -> None:
        """Stop the run if the cluster's live nodes can no longer hold the pool (a node
        lost for good): its replacement actor would wait for ever to be placed, and the
        run with it, saying nothing.  What was written stays; a rerun resumes."""
        ray = _ray()
        options = self._remote_options
        fits = _fits(ray, cpus=options["num_cpus"], gpus=options["num_gpus"])  # None: keep waiting
        if fits is not None and fits < len(self._actors):
            raise EngineDeadError(
                f"the Ray cluster lost capacity: {len(self._actors)} actors need {options['num_gpus']:g} GPU and "
                f"{options['num_cpus']:g} CPU each on one node, its live nodes hold {fits}; "
                "rerun the same command to resume once the nodes are back (or with fewer --actors)"
            )

    def implicated(self) -> int | None:
        """None: a batch that kills its actors is split in halves on this run, down to
        the one record that kills them alone (its row is an ``EngineCrashError``), so
        no batch is left to blame on a rerun.  A run stops for a cause a retry cannot
        fix, for replacement actors that cannot open their engine, and for actors that
        die on everything (nothing judged)."""
        return None

    def _failed(self, sent: _Sent, exc: Exception) -> list[_Sent]:
        """A batch failed: replace its actor and say what to send again (the batch, or
        its halves; nothing when it is one record that stopped the engine alone), or
        stop the run."""
        ray = _ray()
        cause = _cause(exc)
        if isinstance(cause, EngineUnreachableError):
            raise cause  # a server gone: no record caused it, and no new actor brings it back
        died = isinstance(exc, ray.exceptions.RayActorError) or isinstance(cause, EngineDeadError)
        if not self._opened(sent.actor):
            # The engine never opened: not a record's doing.  A first actor's error is
            # the setting's (a missing model, a GPU option on the CPU build): stop with
            # it.  A replacement's may pass (on a GPU the dead engine's memory can take
            # a moment to be freed): try again.
            if self._generation[sent.slot] == 0 and isinstance(cause, SufficeError) and not died:
                raise cause
            sent.failed_starts += 1
            self._replace(sent, cause)
            if sent.failed_starts > self.options.max_batch_retries:
                raise EngineDeadError(
                    f"{sent.failed_starts} Ray actors could not open their engine for one batch "
                    f"(last: {cause}); rerun the same command to resume"
                ) from exc
            return [sent]
        if not died:
            if isinstance(cause, SufficeError):
                raise cause
            raise EngineDeadError(f"a Ray actor failed: {exc}") from exc
        sent.tries += 1
        self._replace(sent, cause)
        if sent.tries <= (1 if sent.piece else self.options.max_batch_retries):
            return [sent]
        # Out of tries, the last ones alone on an actor that had opened its engine:
        # what kills the engine is in these records.  Halve them, each half alone on an
        # actor, down to the record that kills it alone.
        if len(sent.records) > 1:
            half = len(sent.records) // 2
            return [
                _Sent(sent.seq, sent.slot, None, part, 1, sent.start + offset, piece=True)
                for offset, part in ((0, sent.records[:half]), (half, sent.records[half:]))
            ]
        return []

    def _replace(self, sent: _Sent, cause: BaseException) -> None:
        """Start a new actor in the dead one's slot (once, whichever of its batches notices)."""
        self._replace_slot(sent.slot, sent.actor, cause, sent.tries + sent.failed_starts)

    def _replace_slot(self, slot: int, actor: Any, cause: BaseException, tries: int) -> None:
        """Start a new actor in ``slot`` if ``actor`` is still its live one."""
        ray = _ray()
        if self._actors[slot] is not actor:
            return
        if self._generation[slot] > 0:
            delay = self.options.replace_delay_s
            time.sleep(min(6 * delay, delay * tries))
        self._notify(f"a Ray actor died ({type(cause).__name__}); starting another and sending its batches again")
        with contextlib.suppress(Exception):
            ray.kill(actor)
        self._probes.pop(id(actor), None)
        self._settled_ids.discard(id(actor))
        self.replaced += 1
        self._generation[slot] = self.replaced
        self._actors[slot] = self._new_actor(slot)

    def served(self) -> dict[str, str]:
        """What the actors' engine says it serves, asked of the first actor that answers
        (every actor runs the same engine settings, so one server).  An actor that could
        not open its engine raises that error, as its first batch would.  An actor that
        died before answering is replaced and the new one asked, up to
        ``max_batch_retries`` times a slot: when every first actor died, nothing was
        recorded and a resume against a server now serving another model was accepted,
        two models' verdicts in one output."""
        self._start()
        ray = _ray()
        last: BaseException | None = None
        for _ in range(self.options.max_batch_retries + 1):
            for slot in range(len(self._actors)):
                actor = self._actors[slot]
                try:
                    return dict(ray.get(actor.served.remote()))
                except Exception as exc:
                    cause = _cause(exc)
                    if isinstance(cause, SufficeError):
                        raise cause from None
                    last = cause
                    self._replace_slot(slot, actor, cause, tries=1)
        raise EngineDeadError(
            f"no Ray actor stayed up to say what its engine serves ({self.replaced} replaced; last: {last}); "
            "see the actors' logs, then rerun the same command to resume"
        )

    def weights_hash(self) -> str | None:
        return None  # runs on Ray are not audited (BatchOptions refuses --audit-db with --ray)

    def close(self) -> None:
        if not self._started:
            return
        ray = _ray()
        stopped = bool(self._flight)  # Ctrl-C, a fatal error: batches still on the actors
        if stopped:
            # Their results would be thrown away: the actors drop what has not begun, so
            # each one's close is not queued behind them (Ctrl-C waited 30 s for
            # nothing).  ray.cancel does not reach a queued call of a running actor.
            self._notify(f"stopping: {len(self._flight)} batches on the actors are dropped; closing the engines")
            stopping = []
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    stopping.append(actor.stop.options(concurrency_group=CONTROL).remote())
            with contextlib.suppress(Exception):
                ray.wait(stopping, num_returns=len(stopping), timeout=CLOSE_WAIT_S[True])
            self._flight.clear()
        closing = []
        for actor in self._actors:
            with contextlib.suppress(Exception):
                closing.append(actor.close.remote())
        # Stop each engine cleanly (its processes go with it), then the actors.
        with contextlib.suppress(Exception):
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_WAIT_S[stopped])
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._actors = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False


#: Times Ray Data may restart a :func:`judge_dataset` actor, and retry its batch, after
#: the actor process itself died (an engine that dies inside it is handled by the
#: worker).  Ray Data's default is for ever: a record that kills its actor looped 21
#: times in two minutes and never ended.
DATASET_RESTARTS = 3


class _DatasetWorker:
    """``map_batches`` body for :func:`judge_dataset` (a callable class: one engine per actor).

    A record that kills the engine (its process, inside the actor) costs only its own
    row: the engine is opened again and the batch judged in halves, down to the record
    that kills it alone, which gets an ``EngineCrashError`` row as ``suffice judge
    --ray`` gives it.  An engine that dies on everything is failing, not a record: more
    deaths in a row than a poison record's halving needs (``2 + log2(batch)``), or a
    record that dies alone before this actor has judged anything, fail the batch (and
    the dataset) with that error.
    """

    def __init__(
        self,
        config: JudgeConfig,
        fmt: str,
        fields: dict[str, str],
        open_judge: Callable[[JudgeConfig], Judge] | None = None,
    ) -> None:
        from suffice.fields import FieldMap

        self.config = config
        self.open_judge = open_judge
        self.worker = JudgeWorker(config, open_judge)
        self.fields = FieldMap(fields)
        self.fmt = fmt
        #: Engine deaths since a batch was last judged, and whether any ever was.
        self.deaths = 0
        self.judged_any = False

    def __call__(self, batch: Any) -> dict[str, list[Any]]:
        from suffice.batch.runner import result_row

        records = [self.fields.apply(record, None) for record in batch.to_pylist()]
        judged = self._judged(records, 2 + math.ceil(math.log2(max(len(records), 1))))
        if any(r is None for r in judged) and not self.judged_any:
            raise EngineDeadError(
                "the engine died on every record this actor was given, each alone too, and judged none: "
                "the engine itself is failing"
            )
        results = [self._crashed(records[i]) if r is None else r for i, r in enumerate(judged)]
        gate = self.worker.judge.gate if self.worker.judge is not None else None
        assert gate is not None
        rows = [result_row(r, gate, self.fmt, 0) for r in results]
        for row in rows:
            row.pop("line")
        return {
            "id": [r.id for r in results],
            "positive": [None if r.verdict is None else gate.is_positive(r.verdict) for r in results],
            "error": [None if r.error is None else r.error.type for r in results],
            "result": [json.dumps(row, ensure_ascii=False) for row in rows],
        }

    def _judged(self, records: list[object], most_deaths: int) -> list[JudgeResult | None]:
        """``records`` judged (``None`` for one that killed the engine alone); on an
        engine death, again in halves on a new engine."""
        try:
            results: list[JudgeResult | None] = list(self.worker.judge_batch(records))
        except EngineUnreachableError:
            raise  # a server gone: no record is to blame
        except EngineDeadError as exc:
            self.deaths += 1
            if self.deaths > most_deaths:
                raise EngineDeadError(
                    f"the engine died {self.deaths} times in a row with nothing judged in between: "
                    f"the engine itself is failing (last: {exc})"
                ) from exc
            self.worker.close()
            self.worker = JudgeWorker(self.config, self.open_judge)
            if self.worker.failed is not None:  # the engine cannot come back: that error, typed
                raise self.worker.failed from exc
            if len(records) == 1:
                return [None]
            half = len(records) // 2
            return self._judged(records[:half], most_deaths) + self._judged(records[half:], most_deaths)
        self.deaths = 0
        self.judged_any = True
        return results

    def _crashed(self, record: object) -> JudgeResult:
        from suffice.records import record_id

        judge = self.worker.judge
        assert judge is not None
        return JudgeResult(
            id=record_id(record),
            gate=judge.gate.name,
            error=ErrorInfo(
                type=ENGINE_CRASH,
                message="the engine died while it judged this record alone, after it had died with it in a batch",
            ),
            model=judge.engine.model_id,
            backend=judge.engine.backend,
            prompt_version=judge.gate.prompt_version,
        )


def judge_dataset(
    dataset: Any,
    config: JudgeConfig,
    *,
    actors: int = 1,
    batch_size: int = 64,
    fmt: str = "suffice",
    fields: Sequence[str] = (),
    gpus_per_actor: float | None = None,
    cpus_per_actor: float = 1.0,
    open_judge: Callable[[JudgeConfig], Judge] | None = None,
) -> Any:
    """A Ray ``Dataset`` of records (suffice's fields or RAGAS names) judged by ``actors``
    engines: one row per record with ``id``, ``positive`` (the gate's decision that
    routes; null for an error), ``error`` (its type) and ``result`` (the full row as
    JSON, as ``suffice judge`` writes it).  ``fields``: a mapping as for ``--field``
    (``["question=query"]``).  Records need ids (a Dataset's order is not kept, so a
    position would join nothing back); one without is an error row naming ``id``.
    ``gpus_per_actor``: default one per tensor-parallel rank when the cluster has GPUs.
    Lazy, like every Ray Data transform.  A record that kills the engine gets an
    ``EngineCrashError`` row and the others their verdicts (see :class:`_DatasetWorker`);
    an actor process that dies is restarted, its batch retried, up to
    :data:`DATASET_RESTARTS` times.  ``open_judge``: how each actor opens its judge
    (default :meth:`Judge.open`)."""
    whole_number("actors", actors, least=1)
    whole_number("batch_size", batch_size, least=1)
    if fmt not in VERDICT_FORMATS:  # "ragfow" gave suffice-shaped rows without a word
        raise ConfigError("format", fmt, f"must be one of {', '.join(VERDICT_FORMATS)}")
    finite_number("cpus_per_actor", cpus_per_actor)
    if gpus_per_actor is not None:
        finite_number("gpus_per_actor", gpus_per_actor)
    from suffice.fields import FieldMap

    mapping = dict(FieldMap.parse(list(fields)).names)
    if gpus_per_actor is None:
        has_gpus = float(_ray().cluster_resources().get("GPU", 0)) > 0
        gpus_per_actor = float(config.engine.tensor_parallel_size or 1) if has_gpus else 0.0
    return dataset.map_batches(
        _DatasetWorker,
        fn_constructor_kwargs={"config": config, "fmt": fmt, "fields": mapping, "open_judge": open_judge},
        batch_size=batch_size,
        batch_format="pyarrow",
        concurrency=actors,
        num_gpus=gpus_per_actor,
        num_cpus=cpus_per_actor,
        max_restarts=DATASET_RESTARTS,
        max_task_retries=DATASET_RESTARTS,
    )


__all__ = ["JudgeWorker", "RayScorer", "judge_dataset"]
