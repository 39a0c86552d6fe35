"""The actors of a Ray run, each a :class:`JudgeWorker` in a slot: started, probed, replaced, closed.

Ray is imported only when used (``pip install "suffice[ray]"``), by :func:`ray_module`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from suffice.audit.recording import weights_hash
from suffice.batch.options import RayOptions
from suffice.batch.resources import ActorPlan, plan_actors, split_cores
from suffice.batch.scoring import Notify
from suffice.config import JudgeConfig
from suffice.exceptions import CancelledError, ConfigError, EngineDeadError, EngineError, SufficeError
from suffice.judge import Judge
from suffice.results import JudgeResult
from suffice.serving.offline import offline

#: The actors' concurrency group for :meth:`JudgeWorker.stop`, beside the one judging.
CONTROL = "control"

#: The environment a local Ray instance's processes start with (they inherit the driver's at ``ray.init``; the
#: driver's own is put back after).  Measured with ``strace -e trace=connect`` on Ray 2.60, each stops an address
#: off this machine being tried.
LOCAL_RAY_ENV = {
    # Ray finds a node's address by connecting a UDP socket to 8.8.8.8:53 (even given _node_ip_address=127.0.0.1,
    # which it "resolves"), unless told this is no cluster: then it is loopback.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # include_dashboard=False still starts the dashboard for its usage-stats module, which asks the cloud metadata
    # endpoints (169.254.169.254, metadata.google.internal) before it reads that usage stats are off, and no
    # setting stops it; it asks through http_proxy, so a proxy on a closed loopback port (9, discard) ends it here.
    "http_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    # gRPC (Ray's own channels) would take http_proxy too: an empty grpc_proxy means none; loopback never goes
    # through a proxy.
    "grpc_proxy": "",
    "no_proxy": "127.0.0.1,localhost,::1",
    "NO_PROXY": "127.0.0.1,localhost,::1",
}


@contextlib.contextmanager
def local_ray_env() -> Iterator[None]:
    """:data:`LOCAL_RAY_ENV` while a local Ray instance starts, then the driver's environment back.  This driver
    read RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it imported Ray: its copy is set too."""
    import ray._private.ray_constants as constants

    before = {name: os.environ.get(name) for name in LOCAL_RAY_ENV}
    cluster = constants.ENABLE_RAY_CLUSTER
    os.environ.update(LOCAL_RAY_ENV)
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = cluster
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def ray_module() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("ray", "ray", 'needs Ray: pip install "suffice[ray]"') from exc
    return ray


def cause(exc: BaseException) -> BaseException:
    """The exception a Ray task raised inside the actor (Ray wraps it)."""
    inner = getattr(exc, "cause", None)
    return inner if isinstance(inner, BaseException) else exc


class JudgeWorker:
    """A judge on its own engine, opened once; an error while opening is raised by every call (not "actor died")."""

    def __init__(self, config: JudgeConfig, open_judge: Callable[[JudgeConfig], Judge] | None = None) -> None:
        self.failed: SufficeError | None = None
        self.judge: Judge | None = None
        #: Set by :meth:`stop`: batches still queued return at once, unjudged.
        self.stopped = False
        try:
            self.judge = (open_judge or Judge.open)(config)
            self.judge.review_queue = "the Ray driver"  # it writes the audit rows and says what went to nobody
        except SufficeError as exc:
            self.failed = exc
        except Exception as exc:
            self.failed = EngineError(f"the engine could not start: {type(exc).__name__}: {exc}")

    def opened(self) -> Judge:
        """The judge, or the error that kept it from opening."""
        if self.failed is not None:
            raise self.failed
        assert self.judge is not None
        return self.judge

    def judge_batch(
        self, records: Sequence[object], gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        if self.stopped:
            raise CancelledError("the run stopped before this batch began")
        return self.opened().judge_batch(records, gate=gate, options=options)

    def pid(self) -> int:
        """This actor's process id, once its engine is open (else the error that stopped it)."""
        self.opened()
        return os.getpid()

    def served(self) -> dict[str, str]:
        """What this actor's engine says it serves (a server's model; see :meth:`Engine.served`)."""
        return self.opened().engine.served()

    def weights_hash(self) -> str | None:
        """The audit log's hash of this actor's weights, read where they are (a node's disk, not the driver's)."""
        return weights_hash(getattr(self.opened().engine, "model_path", None))

    def stop(self) -> None:
        """Drop the batches queued behind the running one (called in group :data:`CONTROL`)."""
        self.stopped = True

    def close(self) -> None:
        if self.judge is not None:
            self.judge.close()
            self.judge = None


#: Seconds :meth:`ActorPool.close` lets actors close their engines (by: stopped with batches in flight), then kills.
CLOSE_WAIT_S = {False: 60.0, True: 10.0}


#: Not asked yet (``None`` is an answer).
_UNASKED = object()


class ActorPool:
    """One run's actors (see the module)."""

    def __init__(
        self,
        config: JudgeConfig,
        options: RayOptions,
        notify: Notify,
        describe: str,
        open_judge: Callable[[JudgeConfig], Judge] | None,
    ) -> None:
        self.config = config
        self.options = options
        self._notify = notify
        self._describe = describe
        self._open_judge = open_judge
        self._run = uuid.uuid4().hex[:8]
        self._owns_ray = False
        self._started = False
        self._remote: Any = None
        self._configs: list[JudgeConfig] = []
        self.plan = ActorPlan(0, 0.0, 0.0)
        #: The live actor of each slot, and which replacement it is (0: the first).
        self.actors: list[Any] = []
        self.generation: list[int] = []
        #: Actors started to replace dead ones.
        self.replaced = 0
        #: Per slot: a call that resolves once its live actor's engine is open, and whether it has come back.
        self._probes: list[Any] = []
        self._settled: list[bool] = []
        #: The actors' weights hash once asked (``None`` is an answer: weights that are no folder).
        self._weights: object = _UNASKED

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        ray = ray_module()
        local = self.options.address == "local"
        if not ray.is_initialized():
            verbose = self.config.engine.verbose
            try:
                # The processes ray.init starts keep the environment they start with: no usage report from them,
                # and a local instance's on this machine alone (suffice.serving.offline).
                with offline(), local_ray_env() if local else contextlib.nullcontext():
                    ray.init(
                        address=self.options.address,
                        include_dashboard=False,
                        log_to_driver=verbose,
                        logging_level="info" if verbose else "warning",
                        namespace="suffice",
                        # A local instance is this machine alone: its processes talk over loopback only.
                        **({"object_store_memory": 512 * 1024**2, "_node_ip_address": "127.0.0.1"} if local else {}),
                    )
            except Exception as exc:  # ConnectionError, ValueError for a malformed address, ...
                raise ConfigError("ray", self.options.address, f"cannot join a Ray cluster there: {exc}") from exc
            self._owns_ray = True
        plan = self.plan = plan_actors(ray, self.options, self.config.engine.tensor_parallel_size or 1)
        self._remote = ray.remote(
            num_cpus=plan.cpus, num_gpus=plan.gpus, max_restarts=0, concurrency_groups={CONTROL: 1}
        )(JudgeWorker)
        bind = local and not plan.gpus and self.config.engine.cores is None
        engine = self.config.engine
        self._configs = [
            self.config
            if core is None
            else dataclasses.replace(self.config, engine=dataclasses.replace(engine, cores=core))
            for core in (split_cores(plan.count) if bind else [None] * plan.count)
        ]
        where = "a local Ray instance" if local else f"the Ray cluster at {self.options.address}"
        self._notify(
            f"starting {plan.count} Ray actor{'s' if plan.count > 1 else ''} on {where}, one engine each "
            f"({self._describe}; {plan.gpus:g} GPU, {plan.cpus:g} CPU per actor)"
        )
        self.generation, self._probes, self._settled = [0] * plan.count, [None] * plan.count, [False] * plan.count
        self.actors = [self._new_actor(slot) for slot in range(plan.count)]

    def _new_actor(self, slot: int) -> Any:
        actor = self._remote.options(name=self.actor_names[slot]).remote(self._configs[slot], self._open_judge)
        # Runs after the actor's __init__, before any batch: resolves once its engine is open.
        self._probes[slot], self._settled[slot] = actor.pid.remote(), False
        return actor

    @property
    def actor_names(self) -> list[str]:
        """Names of the live actors (namespace ``suffice``): what a test or an operator kills."""
        return [f"suffice-{self._run}-{slot}-{generation}" for slot, generation in enumerate(self.generation)]

    def settled(self, slot: int) -> bool:
        """Whether the driver has seen the slot's actor open its engine (or fail to); only such actors get batches,
        so a death is never misread as an engine that never opened."""
        if not self._settled[slot]:
            done, _ = ray_module().wait([self._probes[slot]], num_returns=1, timeout=0)
            self._settled[slot] = bool(done)
        return self._settled[slot]

    def unsettled_probes(self) -> list[Any]:
        """The probes of the actors still opening their engine."""
        return [probe for slot, probe in enumerate(self._probes) if not self.settled(slot)]

    def opened(self, slot: int, actor: Any) -> bool:
        """Whether ``actor``, the slot's live one, opened its engine (a death before that is never a record's)."""
        if self.actors[slot] is not actor:
            return False
        try:
            ray_module().get(self._probes[slot], timeout=30)
        except Exception:
            return False
        return True

    def replace(self, slot: int, actor: Any, reason: BaseException, tries: int) -> None:
        """Start a new actor in ``slot`` if ``actor`` is still its live one; later replacements wait
        ``replace_delay_s`` times ``tries`` (at most 6 times) first."""
        if self.actors[slot] is not actor:
            return
        if self.generation[slot] > 0:
            delay = self.options.replace_delay_s
            time.sleep(min(6 * delay, delay * tries))
        self._notify(f"a Ray actor died ({type(reason).__name__}); starting another and sending its batches again")
        with contextlib.suppress(Exception):
            ray_module().kill(actor)
        self.replaced += 1
        self.generation[slot] = self.replaced
        self.actors[slot] = self._new_actor(slot)

    def served(self) -> dict[str, str]:
        """What the actors' engine serves, asked of the first actor that answers; one that died is replaced and asked
        again, up to ``max_batch_retries`` times a slot."""
        return dict(self._ask("served"))

    def weights_hash(self) -> str | None:
        """The hash of the actors' weights for the audit log (the driver writes the rows), asked as :meth:`served`."""
        # Asked once, on the control group: never behind the batches an actor is running.
        if self._weights is _UNASKED:
            found = self._ask("weights_hash", CONTROL)
            self._weights = None if found is None else str(found)
        return self._weights  # type: ignore[return-value]

    def _ask(self, method: str, group: str | None = None) -> Any:
        self.start()
        ray = ray_module()
        last: BaseException | None = None
        for _ in range(self.options.max_batch_retries + 1):
            for slot, actor in enumerate(self.actors):
                try:
                    call = getattr(actor, method)
                    return ray.get((call if group is None else call.options(concurrency_group=group)).remote())
                except Exception as exc:
                    last = cause(exc)
                    if isinstance(last, SufficeError):
                        raise last from None
                    self.replace(slot, actor, last, tries=1)
        raise EngineDeadError(
            f"no Ray actor stayed up to say what its engine serves ({self.replaced} replaced; last: {last}); "
            "see the actors' logs, then rerun the same command to resume"
        )

    def close(self, dropping: int = 0) -> None:
        """Close every engine, then the actors; ``dropping``: batches still on them, whose results are thrown away."""
        if not self._started:
            return
        ray = ray_module()
        if dropping:
            # The actors drop what has not begun, so close is not queued behind it (ray.cancel does not reach it).
            self._notify(f"stopping: {dropping} batches on the actors are dropped; closing the engines")
            self._on_each(lambda actor: actor.stop.options(concurrency_group=CONTROL).remote(), CLOSE_WAIT_S[True])
        # Stop each engine cleanly (its processes go with it), then the actors.
        self._on_each(lambda actor: actor.close.remote(), CLOSE_WAIT_S[bool(dropping)])
        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self.actors = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False

    def _on_each(self, call: Callable[[Any], Any], timeout: float) -> None:
        """``call`` each actor; wait at most ``timeout`` seconds for them all to answer."""
        refs = []
        for actor in self.actors:
            with contextlib.suppress(Exception):
                refs.append(call(actor))
        with contextlib.suppress(Exception):
            ray_module().wait(refs, num_returns=len(refs), timeout=timeout)
