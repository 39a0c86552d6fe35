"""Whether the service can judge: starting (the engine loads), ready (it answers a probe), or dead.

The port opens before the engine loads, so a caller can tell a service that starts from one that is
gone: ``/health`` answers 200 ``starting`` and ``/ready`` 503 ``starting`` with ``Retry-After``, and a
judge request is refused the same way, until :meth:`Readiness.started` hands over the service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

from suffice.exceptions import EngineFatalError
from suffice.network import version
from suffice.server.contract import settable
from suffice.server.metrics import Metrics
from suffice.server.responses import Health, JSONResponse, NotReady, Ready, public_model_name

#: Seconds between background checks that the engine is alive.
HEALTH_INTERVAL = 5.0
#: Seconds a readiness check may take.
PROBE_TIMEOUT = 10.0
#: Seconds a readiness answer is reused: any client may ask, and each probe queues on one thread.
READY_CACHE_S = 1.0
#: What a 503 during start-up asks the client to wait before it asks again (``Retry-After``).
STARTING_RETRY_AFTER_S = 5


def build_info(engine: Any | None, gates: Sequence[str]) -> dict[str, str | None]:
    """The labels of ``suffice_build_info``: model and backend are ``None`` while the engine starts."""
    return {
        "version": version() or "unknown",
        "model": None if engine is None else public_model_name(engine.model_id),
        "backend": None if engine is None else engine.backend,
        "gates": ",".join(gates),
    }


class Readiness:
    """The service behind the routes (``None`` while the engine starts) and what is known of its engine."""

    def __init__(
        self, service: Any, metrics: Metrics, gates: Sequence[str], on_fatal: Callable[[str], None] | None
    ) -> None:
        """``service``: the service, or a :class:`~concurrent.futures.Future` of it while its engine starts
        (a start that fails leaves the service dead, with the error as the reason)."""
        self.metrics = metrics
        self.gates = tuple(gates)
        self.on_fatal = on_fatal
        #: Why the engine did not start (``None``: it did, or it still starts).
        self.failed: str | None = None
        self.service: Any | None = None
        if isinstance(service, Future):
            service.add_done_callback(self._start_ended)
        else:
            self._serve(service)
        self._since = time.monotonic()
        # Probes get a thread of their own, or readiness would fail exactly when the server is busy.
        self._probes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="suffice-probe")
        #: The last probe's (time, answered) and the probe in flight: callers share one, so a crowd of
        #: /ready calls costs one check, not a queue of them each timing out on the one thread.
        self._last: list[tuple[float, bool]] = []
        self._in_flight: list[asyncio.Future[bool]] = []
        metrics.engine_alive.set(0 if self.service is None else 1)

    def _start_ended(self, start: Future[Any]) -> None:
        """The engine is up, and the routes judge from now on; or it failed to start (called on the thread that
        started it)."""
        error = start.exception()
        if error is not None:
            self.failed = f"the engine did not start: {error}"
            return
        service = start.result()
        self.metrics.describe(build_info(service.engine, self.gates))
        self._serve(service)
        self.metrics.engine_alive.set(1)

    def _serve(self, service: Any) -> None:
        """The routes judge on ``service`` from now on, and ``/metrics`` counts the results it publishes."""
        service.results.subscribe(self.metrics)
        self.service = service

    @property
    def dead(self) -> str | None:
        """Why the engine can no longer judge (``None`` while it can, or while it starts)."""
        return self.failed if self.service is None else self.service.dead

    def fatal(self, reason: str) -> None:
        """Record that the engine can no longer judge; ``on_fatal`` is told once."""
        service = self.service
        if service is not None and service.dead is None:
            service.dead = reason
            self.metrics.engine_alive.set(0)
            if self.on_fatal is not None:
                self.on_fatal(reason)

    def starting(self) -> Response:
        """The 503 of a request that came before the engine is up."""
        return JSONResponse(
            {"status": "starting", "detail": f"the engine is starting ({time.monotonic() - self._since:.0f} s so far)"},
            status_code=503,
            headers={"Retry-After": str(STARTING_RETRY_AFTER_S)},
        )

    def refusal(self) -> Response | None:
        """The 503 of a request while the engine starts or once it is dead; ``None`` while it judges."""
        dead = self.dead
        if dead is not None:
            return JSONResponse({"detail": f"the engine cannot judge: {dead}"}, status_code=503)
        if self.service is None:
            return self.starting()
        return None

    async def _probe(self) -> None:
        """Raise EngineFatalError if the engine is gone (TimeoutError: not answering)."""
        service = self.service
        if service is None:  # nothing to probe yet
            return
        check = asyncio.get_running_loop().run_in_executor(self._probes, service.check_alive)
        await asyncio.wait_for(check, PROBE_TIMEOUT)

    async def _probe_once(self) -> bool:
        """Probe; whether the engine answered (a dead one is recorded in ``service.dead``)."""
        try:
            await self._probe()
            answered = True
        except EngineFatalError as exc:
            self.fatal(str(exc))
            answered = True
        except Exception:  # a slow check is /ready's business, not a death
            answered = False
        self._last[:] = [(asyncio.get_running_loop().time(), answered)]
        return answered

    async def answered(self) -> bool:
        """Whether the engine answered a probe within the last READY_CACHE_S (probing if none did)."""
        loop = asyncio.get_running_loop()
        if self._last and loop.time() - self._last[0][0] < READY_CACHE_S:
            return self._last[0][1]
        in_flight = self._in_flight
        if not in_flight or in_flight[0].done() or in_flight[0].get_loop() is not loop:
            in_flight[:] = [asyncio.ensure_future(self._probe_once())]
        return await asyncio.shield(in_flight[0])

    async def watch(self) -> None:
        """Notice an engine that dies while idle within HEALTH_INTERVAL; the server stops for its supervisor."""
        while self.dead is None:
            await asyncio.sleep(HEALTH_INTERVAL)
            if self.service is not None:
                await self.answered()

    def close(self) -> None:
        self._probes.shutdown(wait=False)

    def install(self, app: FastAPI) -> None:
        """``/health`` (liveness) and ``/ready`` (readiness) on ``app``."""

        @app.get(
            "/health",
            summary="Liveness: the process serves and its engine is not dead",
            operation_id="health",
            response_model=Health,
            responses={503: {"description": "the engine is dead", "model": Health}},
        )
        async def health() -> Response:
            dead = self.dead
            if dead is not None:
                return JSONResponse({"status": "dead", "detail": dead}, status_code=503)
            if self.service is None:  # alive: a liveness probe must not kill a process that loads its model
                return JSONResponse({"status": "starting"})
            return JSONResponse({"status": "alive"})

        @app.get(
            "/ready",
            summary="Readiness: the engine is loaded and answering",
            operation_id="ready",
            response_model=Ready,
            responses={503: {"description": "starting (with Retry-After), busy or dead", "model": NotReady}},
        )
        async def ready() -> Response:
            if self.service is None:
                failed = self.failed
                if failed is not None:
                    return JSONResponse({"status": "dead", "detail": failed}, status_code=503)
                return self.starting()
            if self.service.dead is None and not await self.answered():
                return JSONResponse({"status": "busy", "detail": "the engine check did not answer"}, 503)
            if self.service.dead is not None:
                return JSONResponse({"status": "dead", "detail": self.service.dead}, status_code=503)
            engine = self.service.engine
            return JSONResponse(
                {
                    "status": "ready",
                    "gates": list(self.gates),
                    "model": public_model_name(engine.model_id),
                    "backend": engine.backend,
                    "max_model_len": engine.max_model_len,
                    "options": {gate: list(settable(gate, type(self.service.config.judge))) for gate in self.gates},
                }
            )
