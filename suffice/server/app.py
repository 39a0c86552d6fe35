"""The FastAPI app: the routes over the service, behind the guards, counted.

Three parts, each a module: :mod:`~suffice.server.admission` (what a judge request must pass before it
waits), :mod:`~suffice.server.readiness` (starting, ready or dead: ``/health`` and ``/ready``) and
:mod:`~suffice.server.routes` (the judge routes, settings, ``/metrics``).  Here they are put together,
with the review desk, the OpenAPI document's bearer scheme and the guards in front.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI

from suffice.server.admission import RETRY_AFTER_S, Admission
from suffice.server.config import ServeConfig, host_names
from suffice.server.contract import request_schemas
from suffice.server.guards import OPEN_PATHS, BearerAuth, BodyLimit, HostAllowList
from suffice.server.metrics import JUDGE_PATH, CountedRequests, Metrics
from suffice.server.outcomes import is_client_path
from suffice.server.readiness import Readiness, build_info
from suffice.server.responses import JSONResponse, public_model_name
from suffice.server.reviews import API as REVIEW_API
from suffice.server.reviews import ReviewPaths
from suffice.server.reviews import install as install_reviews
from suffice.server.routes import WORKERS, Routes, SettingsAnswer

__all__ = ["BEARER_SCHEME", "RETRY_AFTER_S", "JSONResponse", "SettingsAnswer", "create_app", "public_model_name"]


#: The name of the bearer scheme in ``/openapi.json``'s ``components.securitySchemes``.
BEARER_SCHEME = "bearerAuth"


def _completed(
    build: Callable[[], dict[str, Any]], schemas: dict[str, Any], keyed: Callable[[str], bool] | None
) -> Callable[[], dict[str, Any]]:
    """``build`` (FastAPI's ``app.openapi``) with the judge routes' named request ``schemas`` added and, where
    ``keyed`` is given, the bearer scheme declared and required on each path it names: a client generated from
    the document then sends the token the service asks for."""

    def openapi() -> dict[str, Any]:
        schema = build()  # FastAPI keeps the document once built: it is completed once
        components = schema.setdefault("components", {})
        named = components.setdefault("schemas", {})
        if "Item" not in named:
            named.update(schemas)
            if keyed is not None:
                schemes = components.setdefault("securitySchemes", {})
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
    """The ASGI app over ``service``, or over a :class:`~concurrent.futures.Future` of it while its engine starts
    (answering 503 ``starting`` until then); ``on_fatal(reason)`` is called once when the engine can no longer
    judge."""
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="suffice-judge")
    gates = tuple(config.gates)
    metrics = Metrics(gates, build_info(None if isinstance(service, Future) else service.engine, gates))
    readiness = Readiness(service, metrics, gates, on_fatal)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watcher = asyncio.create_task(readiness.watch())
        yield
        watcher.cancel()
        pool.shutdown(wait=True)  # requests past their timeout still hold the engine
        readiness.close()
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
    # The review page and its JSON routes, where there is an audit log to hold the reviews.
    desk = install_reviews(app, config, metrics) if config.audit_db is not None else None
    Routes(config, readiness, Admission(config, metrics), metrics, pool).install(app)
    readiness.install(app)

    open_metrics = config.metrics_without_auth

    def keyed(path: str) -> bool:
        """Whether ``path`` asks a bearer token: the service's key, or a reviewer's on /v1/reviews (but for the
        application's outcome routes: the service's key)."""
        if path.startswith(REVIEW_API) and not is_client_path(path):
            return desk is not None
        return api_key is not None and (
            path.startswith((JUDGE_PATH, "/v1/settings/"))
            or is_client_path(path)
            or (path == "/metrics" and not open_metrics)
        )

    # Replacing app.openapi is FastAPI's documented way to extend the generated document.
    tokens = keyed if api_key is not None or desk is not None else None
    schemas = request_schemas(gates, type(config.judge))
    app.openapi = _completed(app.openapi, schemas, tokens)  # type: ignore[method-assign]
    limited: Any = BodyLimit(app, config.max_body_bytes, config.request_timeout, OPEN_PATHS | {"/metrics"})
    guarded = limited
    if api_key is not None:
        guarded = BearerAuth(guarded, api_key, OPEN_PATHS | ({"/metrics"} if config.metrics_without_auth else set()))
    if desk is not None:  # reviewers authenticate with their own keys
        guarded = ReviewPaths(guarded, app, desk)
    guarded = HostAllowList(guarded, host_names(config))
    return CountedRequests(guarded, metrics, gates)
