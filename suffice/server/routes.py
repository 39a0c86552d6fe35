"""The judge routes, a gate's settings and ``/metrics``: where the work runs.

Every judge request judges on its own worker thread, not behind a lock, so the engine batches whatever is in
flight; the event loop only parses, checks and answers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel

from suffice.exceptions import ConfigError, EngineFatalError, SufficeError, status_of
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT
from suffice.server.admission import Admission, Admitted
from suffice.server.config import ServeConfig
from suffice.server.contract import format_parameter, query_parameters, request_body, response_model
from suffice.server.metrics import JUDGE_PATH, Metrics
from suffice.server.readiness import Readiness
from suffice.server.responses import JSONResponse, error_responses, public_model_name, refused, unprocessable
from suffice.server.service import Options, RequestError
from suffice.telemetry import attached, request_context

#: How often a waiting request checks its deadline and whether its client is still there.
POLL_SECONDS = 0.5
#: Worker threads judging at once; requests beyond wait for a thread (and count as waiting).
WORKERS = 256

_log = logging.getLogger("suffice.server")

#: The refusals of a judge route, for its OpenAPI description.
REFUSALS = error_responses(
    {
        400: "the Host header does not name this service",
        401: "missing or wrong bearer token",
        413: "body over the limit",
        415: "the body is not application/json",
        422: "malformed body or parameter, or a value past a cap (names the field and the cap)",
        429: "the service holds --max-pending-chunks chunks already: retry after Retry-After s",
        500: "an unexpected failure (an id to find it in the server's log)",
        503: "the engine is starting (status starting, Retry-After) or can no longer judge, or the audit log cannot "
        "be written",
        504: "over the request timeout",
    }
)


class SettingsAnswer(BaseModel):
    """What decides a served gate's rows: the values ``suffice judge`` records beside an output (gate, prompt
    version, the gate's options, model, weights, engine, backend, context window), each a string."""

    gate: str
    settings: dict[str, str]
    #: What the service says of its model (the embedded model's verdicts are not judgements); null for others.
    notice: str | None = None
    #: The request limits: a client sends a larger batch in requests within them (--max-items, --max-body-bytes).
    max_items: int
    max_body_bytes: int


def _retrieve(work: asyncio.Future[Any]) -> None:
    """Collect the outcome of work whose request was answered already, so no error goes unretrieved."""
    if not work.cancelled():
        work.exception()


def _not_served(gate: str, gates: tuple[str, ...]) -> Response:
    error = ConfigError("gate", gate, f"is not served (served: {', '.join(gates)})")
    return refused(404, str(error), error=error)


def _refused_request(exc: RequestError, location: list[str | int]) -> Response:
    """The 422 of a request parameter refused, naming the error a judge in process raises for it (its cause)."""
    cause = exc.__cause__
    return unprocessable(location, str(exc), cause if isinstance(cause, SufficeError) else None)


class Routes:
    """The routes over the service that ``readiness`` holds, judging on ``pool``."""

    def __init__(
        self,
        config: ServeConfig,
        readiness: Readiness,
        admission: Admission,
        metrics: Metrics,
        pool: ThreadPoolExecutor,
    ) -> None:
        self.config = config
        self.gates = tuple(config.gates)
        self.readiness = readiness
        self.admission = admission
        self.metrics = metrics
        self.pool = pool

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def judge(
        self,
        gate: str,
        request: Request,
        format: str = DEFAULT_VERDICT_FORMAT,
    ) -> Response:
        """One result per item, in order: a verdict or that item's error.  Options (query parameters, or
        `options` in the body) apply to this request only."""
        if gate not in self.gates:
            return _not_served(gate, self.gates)
        service = self.readiness.service
        refusal = self.readiness.refusal()
        if refusal is not None or service is None:
            return refusal or self.readiness.starting()
        admitted = await self.admission.admit(request)
        if not isinstance(admitted, Admitted):
            return admitted
        return await self._judge_admitted(service, gate, request, admitted, format)

    async def _judge_admitted(
        self, service: Any, gate: str, request: Request, admitted: Admitted, format: str
    ) -> Response:
        options = Options(values=admitted.options, fmt=format)
        cancel = threading.Event()
        with self.admission.answering(admitted) as release:
            try:
                # The worker thread judges in the caller's trace (a `traceparent` header), where spans are recorded.
                traced = attached(request_context(request.headers), service.judge)
                work = asyncio.ensure_future(self.in_thread(traced, gate, admitted.records, options, cancel))
                work.add_done_callback(release)
                work.add_done_callback(_retrieve)
                timeout = self.config.request_timeout
                deadline = asyncio.get_running_loop().time() + timeout
                while True:
                    left = deadline - asyncio.get_running_loop().time()
                    done, _ = await asyncio.wait({work}, timeout=max(0.0, min(POLL_SECONDS, left)))
                    if done:
                        break
                    if left <= 0:
                        cancel.set()  # the engine stops this request's generation
                        return JSONResponse({"detail": f"not judged within {timeout:g} s"}, status_code=504)
                    if await request.is_disconnected():
                        cancel.set()
                        return Response(status_code=499)
                # The service published its results to what counts them (`/metrics`) as it returned them.
                outcome = work.result()
            except asyncio.CancelledError:
                # The drain ran out or the loop is closing: stop the generation too.
                cancel.set()
                raise
            except RequestError as exc:
                field = exc.field or ""
                return _refused_request(exc, admitted.where.get(field, ["query", field or "query"]))
            except SufficeError as exc:
                status = status_of(exc).http  # the one table the command line reads too
                if status >= 500 and status != 503:
                    return _internal_error()
                if isinstance(exc, EngineFatalError):
                    self.readiness.fatal(str(exc))
                    return JSONResponse({"detail": f"the engine cannot judge: {exc}"}, status_code=status)
                # Judged, but not answered: a verdict the audit log does not hold is not given.
                return JSONResponse({"detail": f"not answered: {exc}"}, status_code=status)
            except Exception:
                return _internal_error()
        body = {"request_id": outcome.request_id, "gate": gate, "results": outcome.rows}
        return JSONResponse(body, headers={"x-request-id": outcome.request_id})

    def _route_of(self, gate: str) -> Callable[..., Awaitable[Response]]:
        async def judge_gate(request: Request, format: str = DEFAULT_VERDICT_FORMAT) -> Response:
            return await self.judge(gate, request, format)

        judge_gate.__annotations__["format"] = format_parameter()  # the registry's names: checked, the OpenAPI enum
        return judge_gate

    async def gate_settings(self, gate: str, request: Request) -> Response:
        """The settings `suffice judge` records beside an output, as this service judges `gate` with these
        options: `suffice judge --server` checks them before it extends an output."""
        if gate not in self.gates:
            return _not_served(gate, self.gates)
        service = self.readiness.service
        if service is None:
            return self.readiness.starting()
        try:
            values = await self.in_thread(service.settings, gate, Options(values=dict(request.query_params)))
        except RequestError as exc:
            return _refused_request(exc, ["query", exc.field or "query"])
        if "model" in values:
            values["model"] = public_model_name(values["model"])
        answer = SettingsAnswer(
            gate=gate,
            settings=values,
            notice=service.notice,
            max_items=self.config.max_items,
            max_body_bytes=self.config.max_body_bytes,
        )
        return JSONResponse(answer.model_dump())

    async def prometheus(self) -> Response:
        return Response(self.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def install(self, app: FastAPI) -> None:
        # A route per served gate, each described with its own options and typed rows; the path
        # with a parameter behind them answers 404 for any other name.
        for gate in self.gates:
            app.add_api_route(
                f"{JUDGE_PATH}{gate}",
                self._route_of(gate),
                methods=["POST"],
                response_model=response_model(gate, self.config.judge.detail),
                openapi_extra={
                    "requestBody": request_body(gate),
                    "parameters": query_parameters(gate, type(self.config.judge)),
                },
                summary=f"Judge one item or a list of items with the {gate} gate",
                description=Routes.judge.__doc__ or "",
                operation_id=f"judge_{gate}",
                responses=REFUSALS,
            )
        app.add_api_route(f"{JUDGE_PATH}{{gate}}", self.judge, methods=["POST"], include_in_schema=False)
        app.add_api_route(
            "/v1/settings/{gate}",
            self.gate_settings,
            methods=["GET"],
            response_model=SettingsAnswer,
            summary="What decides the gate's rows here, with the options given as query parameters",
            description=Routes.gate_settings.__doc__ or "",
            operation_id="get_gate_settings",
            responses=error_responses(
                {
                    401: "missing or wrong bearer token",
                    404: "gate not served",
                    422: "an option the gate does not take per request, or a value it refuses",
                    503: "the engine is starting (status starting, Retry-After)",
                }
            ),
        )
        app.add_api_route(
            "/metrics",
            self.prometheus,
            methods=["GET"],
            summary="Prometheus metrics",
            operation_id="get_metrics",
            response_class=PlainTextResponse,
            responses={
                200: {
                    "description": "the metrics in Prometheus's text format (version 0.0.4)",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **error_responses({401: "missing or wrong bearer token (unless --metrics-without-auth)"}),
            },
        )


def _internal_error() -> JSONResponse:
    """500 for the exception being handled: its cause goes to the log only, since exception text names files and
    settings of the server."""
    error_id = uuid.uuid4().hex[:16]
    _log.exception("suffice serve: request failed (error id %s)", error_id)
    return JSONResponse({"detail": f"internal error (id {error_id} in the server's log)", "error_id": error_id}, 500)
