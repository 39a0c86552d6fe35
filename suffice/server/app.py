"""The FastAPI app: routes, status codes, and where the work runs.

Every HTTP request judges on its own worker thread, not behind a lock, so the engine batches whatever is in
flight; the event loop only parses, checks and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse as _Utf8JSONResponse
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from suffice.exceptions import AuditError, EngineFatalError
from suffice.gates import gate_class
from suffice.jsonl import parse_line
from suffice.records import InvalidRecord
from suffice.server.config import ServeConfig
from suffice.server.guards import BearerAuth, BodyLimit
from suffice.server.metrics import CountedRequests, Metrics
from suffice.server.service import Options, RequestError

#: How often a waiting request checks its deadline and whether its client is still there.
POLL_SECONDS = 0.5
#: Seconds between background checks that the engine is alive.
HEALTH_INTERVAL = 5.0
#: Seconds a readiness check may take.
PROBE_TIMEOUT = 10.0
#: What a 429 asks the client to wait before it tries again (``Retry-After``).
RETRY_AFTER_S = 5
#: Worker threads judging at once; requests beyond wait for a thread (and count as waiting).
WORKERS = 256

_log = logging.getLogger("suffice.server")

_ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One record in the JSONL format of `suffice judge`: id, question, chunks "
    "(strings, whose positions are their ids, or {id, text, source, score}), and response for "
    "the recovery gate. RAGAS names (user_input, retrieved_contexts) are read as they are.",
    "additionalProperties": True,
}
_ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The items with options of the gate's own for this request (those /ready lists)",
    "required": ["items"],
    "properties": {"items": {"type": "array", "items": _ITEM_SCHEMA}, "options": {"type": "object"}},
}
_BODY_SCHEMA: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"type": "object", "anyOf": [_ITEM_SCHEMA, _ENVELOPE_SCHEMA]},
                    {"type": "array", "items": _ITEM_SCHEMA},
                ]
            },
            "example": {"id": "q1", "question": "Who wrote Hamlet?", "chunks": ["Hamlet is a play by Shakespeare."]},
        }
    },
}


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


def _request_options(gates: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Every option a request may set on some served gate, as an OpenAPI query parameter."""
    parameters: dict[str, dict[str, Any]] = {}
    for gate in gates:
        model = gate_class(gate).options_model
        schema = model.model_json_schema()["properties"]
        for key in sorted(model.per_request):
            entry = parameters.setdefault(
                key, {"name": key, "in": "query", "required": False, "schema": schema[key], "description": ""}
            )
            described = f"{gate} gate: {schema[key].get('description', '')}"
            entry["description"] = f"{entry['description']} {described}".strip()
    return parameters


def _envelope(value: object) -> tuple[object, Any]:
    """The items and options of a body ``{"items": [...], "options": {...}}``; any other body is the items."""
    if isinstance(value, dict) and isinstance(value.get("items"), list) and "question" not in value:
        return value["items"], value.get("options", {})
    return value, {}


def _unprocessable(location: list[str], message: str) -> JSONResponse:
    """422 in FastAPI's own shape, so clients parse one error format."""
    return JSONResponse({"detail": [{"loc": location, "msg": message, "type": "value_error"}]}, status_code=422)


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

    async def probe() -> None:
        """Raise EngineFatalError if the engine is gone (TimeoutError: not answering)."""
        check = asyncio.get_running_loop().run_in_executor(probes, service.check_alive)
        await asyncio.wait_for(check, PROBE_TIMEOUT)

    async def watch() -> None:
        """Notice an engine that dies while idle within HEALTH_INTERVAL; the server stops for its supervisor."""
        while service.dead is None:
            await asyncio.sleep(HEALTH_INTERVAL)
            try:
                await probe()
            except EngineFatalError as exc:
                fatal(str(exc))
            except Exception:  # a slow check is /ready's business, not a death
                continue

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watcher = asyncio.create_task(watch())
        yield
        watcher.cancel()
        pool.shutdown(wait=True)  # requests past their timeout still hold the engine
        probes.shutdown(wait=False)

    app = FastAPI(
        lifespan=lifespan,
        default_response_class=JSONResponse,
        title="suffice",
        description="Evidence gates for RAG: is the retrieved context sufficient, which chunks "
        "matter, which claims are supported. Verdicts are valid by construction.",
        version="1",
    )
    metrics = Metrics()
    gates_literal = tuple(config.gates)
    query_options = _request_options(gates_literal)
    #: Items admitted and not yet done (event loop only, so unlocked); past the bound a client hears 429 at
    #: once instead of a 504 after its timeout.  Released when the work ends, not when the answer goes out.
    pending = [0]

    def release(items: int) -> Callable[[Any], None]:
        def done(_: Any) -> None:
            pending[0] -= items
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

    @app.post(
        "/v1/judge/{gate}",
        openapi_extra={"requestBody": _BODY_SCHEMA, "parameters": list(query_options.values())},
        summary="Judge one item or a list of items",
        responses={
            401: {"description": "missing or wrong bearer token"},
            404: {"description": "gate not served"},
            413: {"description": "body over the limit"},
            422: {"description": "malformed body or parameter (names the field)"},
            429: {"description": "the service holds --max-pending-items items already: retry after Retry-After s"},
            500: {"description": "an unexpected failure (JSON naming its type; logged)"},
            503: {"description": "the engine can no longer judge, or the audit log cannot be written"},
            504: {"description": "over the request timeout"},
        },
    )
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
        try:
            raw = await request.body()
        except ClientDisconnect:
            return Response(status_code=499)
        # Off the event loop: 16 MiB of items takes 2.7 s to parse, which would stall /health.
        value = await asyncio.to_thread(parse_line, raw, 1)
        if isinstance(value, InvalidRecord):
            return _unprocessable(["body"], f"the body {value.message}")
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
        if pending[0] + len(records) > config.max_pending_items:
            metrics.refused_items.inc(len(records))
            return JSONResponse(
                {
                    "detail": f"the service is full: {pending[0]} items are being judged or wait for the engine, "
                    f"at most {config.max_pending_items}; try again after {RETRY_AFTER_S} s"
                },
                status_code=429,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        options = Options(values={**query, **body_options}, fmt=format)
        cancel = threading.Event()
        metrics.waiting.inc()
        try:
            pending[0] += len(records)
            metrics.pending_items.set(pending[0])
            work = asyncio.ensure_future(in_thread(service.judge, gate, records, options, cancel))
            work.add_done_callback(release(len(records)))
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
        except Exception as exc:
            _log.exception("suffice serve: request failed")
            return JSONResponse({"detail": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)
        finally:
            metrics.waiting.dec()
        metrics.observe(gate, outcome.results, outcome.seconds)
        body = {"request_id": outcome.request_id, "gate": gate, "results": outcome.rows}
        return JSONResponse(body, headers={"x-request-id": outcome.request_id})

    @app.get("/health", summary="Liveness: the process serves and its engine is not dead")
    async def health() -> Response:
        if service.dead is not None:
            return JSONResponse({"status": "dead", "detail": service.dead}, status_code=503)
        return JSONResponse({"status": "alive"})

    @app.get("/ready", summary="Readiness: the engine is loaded and answering")
    async def ready() -> Response:
        if service.dead is None:
            try:
                await probe()
            except EngineFatalError as exc:
                fatal(str(exc))
            except TimeoutError:
                return JSONResponse({"status": "busy", "detail": "the engine check did not answer"}, 503)
        if service.dead is not None:
            return JSONResponse({"status": "dead", "detail": service.dead}, status_code=503)
        engine = service.engine
        return JSONResponse(
            {
                "status": "ready",
                "gates": list(gates_literal),
                "model": engine.model_id,
                "backend": engine.backend,
                "max_model_len": engine.max_model_len,
                "options": {gate: sorted(gate_class(gate).options_model.per_request) for gate in gates_literal},
            }
        )

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    guarded: Any = BodyLimit(app, config.max_body_bytes, config.request_timeout)
    if api_key is not None:
        guarded = BearerAuth(guarded, api_key)
    return CountedRequests(guarded, metrics, gates_literal)
