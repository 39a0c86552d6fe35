"""The FastAPI app: routes, status codes, and where the work runs.

Every HTTP request judges on its own worker thread, not behind a lock, so the engine batches whatever is in
flight; the event loop only parses, checks and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse as _Utf8JSONResponse
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.requests import ClientDisconnect

from suffice.exceptions import AuditError, EngineFatalError
from suffice.gates import gate_class
from suffice.jsonl import parse_line
from suffice.records import InvalidRecord
from suffice.server.config import ServeConfig, host_names
from suffice.server.contract import query_parameters, request_body, response_model
from suffice.server.guards import OPEN_PATHS, BearerAuth, BodyLimit, HostAllowList
from suffice.server.metrics import JUDGE_PATH, CountedRequests, Metrics
from suffice.server.reviews import ReviewPaths
from suffice.server.reviews import install as install_reviews
from suffice.server.service import Options, RequestError
from suffice.telemetry import attached, request_context

#: How often a waiting request checks its deadline and whether its client is still there.
POLL_SECONDS = 0.5
#: Seconds between background checks that the engine is alive.
HEALTH_INTERVAL = 5.0
#: Seconds a readiness check may take.
PROBE_TIMEOUT = 10.0
#: Seconds a readiness answer is reused: any client may ask, and each probe queues on one thread.
READY_CACHE_S = 1.0
#: What a 429 asks the client to wait before it tries again (``Retry-After``).
RETRY_AFTER_S = 5
#: Worker threads judging at once; requests beyond wait for a thread (and count as waiting).
WORKERS = 256

_log = logging.getLogger("suffice.server")

#: The refusals of a judge route, for its OpenAPI description.
_REFUSALS: dict[int | str, dict[str, Any]] = {
    400: {"description": "the Host header does not name this service"},
    401: {"description": "missing or wrong bearer token"},
    413: {"description": "body over the limit"},
    415: {"description": "the body is not application/json"},
    422: {"description": "malformed body or parameter, or a value past a cap (names the field and the cap)"},
    429: {"description": "the service holds --max-pending-chunks chunks already: retry after Retry-After s"},
    500: {"description": "an unexpected failure (an id to find it in the server's log)"},
    503: {"description": "the engine can no longer judge, or the audit log cannot be written"},
    504: {"description": "over the request timeout"},
}


class GateSettings(BaseModel):
    """What decides a served gate's rows: the values ``suffice judge`` records beside an output (gate, prompt
    version, the gate's options, model, weights, engine, backend, context window), each a string."""

    gate: str
    settings: dict[str, str]


class JSONResponse(_Utf8JSONResponse):
    """JSON whose strings UTF-8 cannot hold (lone surrogates) written as escapes, where Starlette's raises."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _retrieve(work: asyncio.Future[Any]) -> None:
    """Collect the outcome of work whose request was answered already, so no error goes unretrieved."""
    if not work.cancelled():
        work.exception()


def _envelope(value: object) -> tuple[object, Any]:
    """The items and options of a body ``{"items": [...], "options": {...}}``; any other body is the items."""
    if isinstance(value, dict) and isinstance(value.get("items"), list) and "question" not in value:
        return value["items"], value.get("options", {})
    return value, {}


Location = list[str | int]


class _Over(Exception):
    """A value in the body past one of the caps (answered 422 at ``location``)."""

    def __init__(self, location: Location, message: str) -> None:
        super().__init__(message)
        self.location = location
        self.message = message


def _path(trail: tuple[Any, ...]) -> Location:
    """The location a ``(parent, key)`` trail stands for."""
    keys: Location = []
    while trail:
        trail, key = trail
        keys.append(key)
    return keys[::-1]


def _work(value: object, base: Location, config: ServeConfig, *, item: bool) -> int:
    """Raise :class:`_Over` at the first string or list in ``value`` past its cap; else the work
    ``value`` asks for in chunks (an item: 1 plus the entries of its lists).

    Iterative, and the location is only built for the answer: a body holds millions of values.
    """
    strings, entries = config.max_field_chars, config.max_chunks_per_item
    work = 1
    stack: list[tuple[object, tuple[Any, ...]]] = [(value, ())]
    while stack:
        node, trail = stack.pop()
        if isinstance(node, str):
            if len(node) > strings:
                where = base + _path(trail)
                raise _Over(where, f"{len(node)} characters: at most {strings} a string (--max-field-chars)")
        elif isinstance(node, dict):
            for key, child in node.items():
                if len(key) > strings:
                    raise _Over(base + _path(trail), f"a key of {len(key)} characters: at most {strings}")
                if item and not trail and isinstance(child, list):
                    work += len(child)
                stack.append((child, (trail, key)))
        elif isinstance(node, list):
            if len(node) > entries:
                where = base + _path(trail)
                raise _Over(where, f"{len(node)} entries: at most {entries} (--max-chunks-per-item)")
            stack.extend((child, (trail, index)) for index, child in enumerate(node))
    return work


def _request_work(value: object, records: list[object], options: object, config: ServeConfig) -> int:
    """The request's work in chunks; :class:`_Over` names the first value past a cap."""
    base: Location = ["body"]
    if isinstance(value, dict) and value.get("items") is records:  # the envelope
        _work(options, ["body", "options"], config, item=False)
        base = ["body", "items"]
    if isinstance(value, dict) and value is records[0]:  # one item
        return _work(value, ["body"], config, item=True)
    return sum(_work(record, [*base, index], config, item=True) for index, record in enumerate(records))


_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def public_model_name(model_id: str) -> str:
    """``model_id`` if it is a model's name (``Qwen/Qwen3-8B``), else its folder's last part:
    where the server keeps its files is no client's business."""
    pathlike = (
        model_id.startswith(("/", ".", "~"))
        or "\\" in model_id
        or model_id.count("/") > 1
        or bool(_WINDOWS_DRIVE.match(model_id))
        or os.path.exists(model_id)
    )
    if not pathlike:
        return model_id
    parts = [part for part in re.split(r"[\\/]", model_id) if part]
    return parts[-1] if parts else "model"


def _version() -> str:
    """suffice's version as installed (``unknown`` when run from a source tree that is not)."""
    try:
        return importlib.metadata.version("suffice")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _unprocessable(location: Location, message: str) -> JSONResponse:
    """422 in FastAPI's own shape, so clients parse one error format."""
    return JSONResponse({"detail": [{"loc": location, "msg": message, "type": "value_error"}]}, status_code=422)


#: The name of the bearer scheme in ``/openapi.json``'s ``components.securitySchemes``.
BEARER_SCHEME = "bearerAuth"


def _with_bearer(build: Callable[[], dict[str, Any]], keyed: Callable[[str], bool]) -> Callable[[], dict[str, Any]]:
    """``build`` (FastAPI's ``app.openapi``) with the bearer scheme declared and required on each path ``keyed``
    names: a client generated from the document then sends the token the service asks for."""

    def openapi() -> dict[str, Any]:
        schema = build()  # FastAPI keeps the document once built: the scheme is added to it once
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        if BEARER_SCHEME not in schemes:
            schemes[BEARER_SCHEME] = {"type": "http", "scheme": "bearer", "description": "the service's API key"}
            for path, operations in schema.get("paths", {}).items():
                if keyed(path):
                    for operation in operations.values():
                        operation["security"] = [{BEARER_SCHEME: []}]
        return schema

    return openapi


def create_app(
    service: Any,
    config: ServeConfig,
    api_key: bytes | None = None,
    on_fatal: Callable[[str], None] | None = None,
) -> Any:
    """The ASGI app over ``service``; ``on_fatal(reason)`` is called once when the engine can no longer judge."""
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="suffice-judge")
    # Probes get a thread of their own, or readiness would fail exactly when the server is busy.
    probes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="suffice-probe")
    #: The last probe's (time, answered) and the probe in flight: callers share one, so a crowd of
    #: /ready calls costs one check, not a queue of them each timing out on the one thread.
    last_probe: list[tuple[float, bool]] = []
    in_flight: list[asyncio.Future[bool]] = []

    async def probe() -> None:
        """Raise EngineFatalError if the engine is gone (TimeoutError: not answering)."""
        check = asyncio.get_running_loop().run_in_executor(probes, service.check_alive)
        await asyncio.wait_for(check, PROBE_TIMEOUT)

    async def probe_once() -> bool:
        """Probe; whether the engine answered (a dead one is recorded in ``service.dead``)."""
        try:
            await probe()
            answered = True
        except EngineFatalError as exc:
            fatal(str(exc))
            answered = True
        except Exception:  # a slow check is /ready's business, not a death
            answered = False
        last_probe[:] = [(asyncio.get_running_loop().time(), answered)]
        return answered

    async def answered() -> bool:
        """Whether the engine answered a probe within the last READY_CACHE_S (probing if none did)."""
        loop = asyncio.get_running_loop()
        if last_probe and loop.time() - last_probe[0][0] < READY_CACHE_S:
            return last_probe[0][1]
        if not in_flight or in_flight[0].done() or in_flight[0].get_loop() is not loop:
            in_flight[:] = [asyncio.ensure_future(probe_once())]
        return await asyncio.shield(in_flight[0])

    async def watch() -> None:
        """Notice an engine that dies while idle within HEALTH_INTERVAL; the server stops for its supervisor."""
        while service.dead is None:
            await asyncio.sleep(HEALTH_INTERVAL)
            await answered()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watcher = asyncio.create_task(watch())
        yield
        watcher.cancel()
        pool.shutdown(wait=True)  # requests past their timeout still hold the engine
        probes.shutdown(wait=False)
        if desk is not None:
            desk.close()

    app = FastAPI(
        lifespan=lifespan,
        # Swagger UI and ReDoc load their scripts from a CDN: a page that works only online, and
        # a third party's code run against the service.  /openapi.json stays.
        docs_url=None,
        redoc_url=None,
        default_response_class=JSONResponse,
        title="suffice",
        description="Evidence gates for RAG: is the retrieved context sufficient, which chunks "
        "matter, which claims are supported. Verdicts are valid by construction.",
        version="1",
    )
    gates_literal = tuple(config.gates)
    engine = service.engine
    build = {
        "version": _version(),
        "model": public_model_name(engine.model_id),
        "backend": engine.backend,
        "gates": ",".join(gates_literal),
    }
    metrics = Metrics(gates_literal, build)
    # The review page and its JSON routes, where there is an audit log to hold the reviews.
    desk = install_reviews(app, config, metrics) if config.audit_db is not None else None
    #: Items and chunks admitted and not yet done (event loop only, so unlocked); past the chunk bound a client
    #: hears 429 at once instead of a 504 after its timeout.  Released when the work ends, not when the answer
    #: goes out.
    pending = [0]
    pending_chunks = [0]

    def release(items: int, chunks: int) -> Callable[[Any], None]:
        def done(_: Any) -> None:
            pending[0] -= items
            pending_chunks[0] -= chunks
            metrics.pending_items.set(pending[0])

        return done

    def fatal(reason: str) -> None:
        if service.dead is None:
            service.dead = reason
            metrics.engine_alive.set(0)
            if on_fatal is not None:
                on_fatal(reason)

    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def judge(
        gate: str,
        request: Request,
        format: Literal["suffice", "seed", "ragflow"] = "suffice",
    ) -> Response:
        """One result per item, in order: a verdict or that item's error.  Options (query parameters, or
        `options` in the body) apply to this request only."""
        if gate not in gates_literal:
            return JSONResponse({"detail": f"gate {gate!r} is not served (served: {', '.join(gates_literal)})"}, 404)
        if service.dead is not None:
            return JSONResponse({"detail": f"the engine cannot judge: {service.dead}"}, status_code=503)
        # A web form can post text/plain across origins without asking; only JSON is read.
        if request.headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
            return JSONResponse({"detail": "the body must be sent as Content-Type: application/json"}, 415)
        try:
            raw = await request.body()
        except ClientDisconnect:
            return Response(status_code=499)
        # Off the event loop: 16 MiB of items takes 2.7 s to parse, which would stall /health.
        value = await asyncio.to_thread(parse_line, raw, 1)
        if isinstance(value, InvalidRecord):
            return _unprocessable(["body"], f"the body {value.message}")
        value_read = value
        value, body_options = _envelope(value)
        if not isinstance(body_options, dict):
            return _unprocessable(["body", "options"], "must be an object of option names to values")
        query = {key: item for key, item in request.query_params.items() if key != "format"}
        where = {key: ["query", key] for key in query} | {key: ["body", "options", key] for key in body_options}
        if isinstance(value, dict):
            records: list[object] = [value]
        elif isinstance(value, list):
            records = value
        else:
            return _unprocessable(["body"], f"must be an item object or a list of items, not {type(value).__name__}")
        if not records:
            return _unprocessable(["body"], "the list of items is empty")
        if len(records) > config.max_items:
            return _unprocessable(["body"], f"{len(records)} items: at most {config.max_items} per request")
        try:
            chunks = await asyncio.to_thread(_request_work, value_read, records, body_options, config)
        except _Over as over:
            return _unprocessable(over.location, over.message)
        if chunks > config.max_pending_chunks:
            return _unprocessable(
                ["body"], f"{chunks} chunks (an item counts 1 more): at most {config.max_pending_chunks} per request"
            )
        if pending_chunks[0] + chunks > config.max_pending_chunks:
            metrics.refused_items.inc(len(records))
            return JSONResponse(
                {
                    "detail": f"the service is full: {pending_chunks[0]} chunks are being judged or wait for the "
                    f"engine, at most {config.max_pending_chunks}; try again after {RETRY_AFTER_S} s"
                },
                status_code=429,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        options = Options(values={**query, **body_options}, fmt=format)
        cancel = threading.Event()
        metrics.waiting.inc()
        try:
            pending[0] += len(records)
            pending_chunks[0] += chunks
            metrics.pending_items.set(pending[0])
            # The worker thread judges in the caller's trace (a `traceparent` header), where spans are recorded.
            traced = attached(request_context(request.headers), service.judge)
            work = asyncio.ensure_future(in_thread(traced, gate, records, options, cancel))
            work.add_done_callback(release(len(records), chunks))
            work.add_done_callback(_retrieve)
            deadline = asyncio.get_running_loop().time() + config.request_timeout
            while True:
                left = deadline - asyncio.get_running_loop().time()
                done, _ = await asyncio.wait({work}, timeout=max(0.0, min(POLL_SECONDS, left)))
                if done:
                    break
                if left <= 0:
                    cancel.set()  # the engine stops this request's generation
                    return JSONResponse({"detail": f"not judged within {config.request_timeout:g} s"}, status_code=504)
                if await request.is_disconnected():
                    cancel.set()
                    return Response(status_code=499)
            outcome = work.result()
        except asyncio.CancelledError:
            # The drain ran out or the loop is closing: stop the generation too.
            cancel.set()
            raise
        except RequestError as exc:
            return _unprocessable(where.get(exc.field or "", ["query", exc.field or "query"]), str(exc))
        except EngineFatalError as exc:
            fatal(str(exc))
            return JSONResponse({"detail": f"the engine cannot judge: {exc}"}, status_code=503)
        except AuditError as exc:
            # Judged, but not answered: a verdict the audit log does not hold is not given.
            return JSONResponse({"detail": f"not answered: {exc}"}, status_code=503)
        except Exception:
            # The cause goes to the log only: exception text names files and settings of the server.
            error_id = uuid.uuid4().hex[:16]
            _log.exception("suffice serve: request failed (error id %s)", error_id)
            return JSONResponse(
                {"detail": f"internal error (id {error_id} in the server's log)", "error_id": error_id}, 500
            )
        finally:
            metrics.waiting.dec()
        metrics.observe(gate, outcome.results, outcome.seconds, outcome.gate)
        body = {"request_id": outcome.request_id, "gate": gate, "results": outcome.rows}
        return JSONResponse(body, headers={"x-request-id": outcome.request_id})

    def route_of(gate: str) -> Callable[..., Awaitable[Response]]:
        async def judge_gate(request: Request, format: Literal["suffice", "seed", "ragflow"] = "suffice") -> Response:
            return await judge(gate, request, format)

        return judge_gate

    # A route per served gate, each described with its own options and typed rows; the path
    # with a parameter behind them answers 404 for any other name.
    for gate in gates_literal:
        app.add_api_route(
            f"{JUDGE_PATH}{gate}",
            route_of(gate),
            methods=["POST"],
            response_model=response_model(gate, config.judge.detail),
            openapi_extra={"requestBody": request_body(gate), "parameters": query_parameters(gate)},
            summary=f"Judge one item or a list of items with the {gate} gate",
            description=judge.__doc__ or "",
            operation_id=f"judge_{gate}",
            responses=_REFUSALS,
        )
    app.add_api_route(f"{JUDGE_PATH}{{gate}}", judge, methods=["POST"], include_in_schema=False)

    @app.get("/health", summary="Liveness: the process serves and its engine is not dead", operation_id="health")
    async def health() -> Response:
        if service.dead is not None:
            return JSONResponse({"status": "dead", "detail": service.dead}, status_code=503)
        return JSONResponse({"status": "alive"})

    @app.get("/ready", summary="Readiness: the engine is loaded and answering", operation_id="ready")
    async def ready() -> Response:
        if service.dead is None and not await answered():
            return JSONResponse({"status": "busy", "detail": "the engine check did not answer"}, 503)
        if service.dead is not None:
            return JSONResponse({"status": "dead", "detail": service.dead}, status_code=503)
        engine = service.engine
        return JSONResponse(
            {
                "status": "ready",
                "gates": list(gates_literal),
                "model": public_model_name(engine.model_id),
                "backend": engine.backend,
                "max_model_len": engine.max_model_len,
                "options": {gate: sorted(gate_class(gate).options_model.per_request) for gate in gates_literal},
            }
        )

    @app.get(
        "/v1/settings/{gate}",
        response_model=GateSettings,
        summary="What decides the gate's rows here, with the options given as query parameters",
        operation_id="get_gate_settings",
        responses={
            401: {"description": "missing or wrong bearer token"},
            404: {"description": "gate not served"},
            422: {"description": "an option the gate does not take per request, or a value it refuses"},
        },
    )
    async def gate_settings(gate: str, request: Request) -> Response:
        """The settings `suffice judge` records beside an output, as this service judges `gate` with these
        options: `suffice judge --server` checks them before it extends an output."""
        if gate not in gates_literal:
            return JSONResponse({"detail": f"gate {gate!r} is not served (served: {', '.join(gates_literal)})"}, 404)
        options = Options(values=dict(request.query_params))
        try:
            values = await in_thread(service.settings, gate, options)
        except RequestError as exc:
            return _unprocessable(["query", exc.field or "query"], str(exc))
        if "model" in values:
            values["model"] = public_model_name(values["model"])
        return JSONResponse(GateSettings(gate=gate, settings=values).model_dump())

    @app.get("/metrics", summary="Prometheus metrics", operation_id="get_metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    if api_key is not None:
        keyed = {"/metrics"} if not config.metrics_without_auth else set()
        # Replacing app.openapi is FastAPI's documented way to extend the generated document.
        app.openapi = _with_bearer(  # type: ignore[method-assign]
            app.openapi, lambda path: path.startswith((JUDGE_PATH, "/v1/settings/")) or path in keyed
        )
    limited: Any = BodyLimit(app, config.max_body_bytes, config.request_timeout, OPEN_PATHS | {"/metrics"})
    guarded = limited
    if api_key is not None:
        guarded = BearerAuth(guarded, api_key, OPEN_PATHS | ({"/metrics"} if config.metrics_without_auth else set()))
    if desk is not None:  # reviewers authenticate with their own keys
        guarded = ReviewPaths(guarded, app, desk)
    guarded = HostAllowList(guarded, host_names(config))
    return CountedRequests(guarded, metrics, gates_literal)
