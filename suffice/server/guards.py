"""ASGI guards in front of the routes: the ``Host`` allow-list, bearer-token authentication and a body-size limit.

Why plain ASGI and not route dependencies: all must answer before the body is read
(a client without the key, or with a 2 GB body, costs nothing), and the size limit
must hold for chunked bodies that carry no ``Content-Length``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths any client may call: probes and the API description.
OPEN_PATHS = frozenset({"/health", "/ready", "/openapi.json"})


async def _answer(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header's value (``""`` for another scheme or none)."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def host_name(value: bytes) -> str:
    """The name in a ``Host`` header, lower case and without its port (``[::1]`` keeps its brackets)."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text.partition("]")[0] + "]"
    return text.partition(":")[0]


class HostAllowList:
    """400 unless the ``Host`` header names this service (``*`` among ``names``: any).

    A web page can make a browser post to the service by DNS rebinding (its own name
    resolving to 127.0.0.1); the browser then still sends the page's host name.
    """

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "*" in self.names:
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope.get("headers", []) if name == b"host"), None)
        if given is None or host_name(given) not in self.names:
            await _answer(send, 400, "the Host header does not name this service (--allowed-host adds a name)")
            return
        await self.app(scope, receive, send)


class BearerAuth:
    """401 unless ``Authorization: Bearer KEY`` carries the key (compared in constant time);
    ``open_paths`` are answered without it."""

    def __init__(self, app: ASGIApp, key: bytes, open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.key = key
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers", [])).get(b"authorization", b"")
        given = bearer_token(header.decode("latin-1")).encode("latin-1")
        if not hmac.compare_digest(given, self.key):
            detail = "missing bearer token" if not given else "wrong bearer token"
            await _answer(send, 401, detail, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """413 for a body over ``limit`` bytes, by its ``Content-Length`` or as it streams in;
    408 for a body not received within ``seconds`` (a client stalled mid-upload would
    otherwise hold a connection, and a SIGTERM drain, for ever).

    The body of a request to one of ``bodiless`` (routes that take none, open to any client) is
    not read at all: the answer goes out at once, and whatever body follows counts against the
    next request's head limits (:mod:`suffice.server.http_guard`), so no client without a key
    holds a connection for ``seconds`` by sending a body slowly."""

    def __init__(self, app: ASGIApp, limit: int, seconds: float, bodiless: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.limit = limit
        self.seconds = seconds
        self.bodiless = bodiless

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.bodiless:
            await self.app(scope, receive, send)
            return
        too_large = f"request body over {self.limit} bytes (--max-body-bytes)"
        close = [(b"connection", b"close")]  # the rest of the body is not read
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _answer(send, 400, "Content-Length is not a number")
                    return
                if declared > self.limit:
                    await _answer(send, 413, too_large, close)
                    return
        # The body is joined as it arrives and handed on as one message: keeping each
        # ASGI message would cost a dict per chunk (a 16 MiB body sent a byte a chunk
        # is 16 million of them, gigabytes), whatever the byte limit says.
        body = bytearray()
        ended: Message | None = None  # what ended the body other than its last part
        deadline = asyncio.get_running_loop().time() + self.seconds
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except TimeoutError:
                await _answer(send, 408, f"request body not received within {self.seconds:g} s", close)
                return
            if message["type"] != "http.request":
                ended = message
                break
            body += message.get("body", b"")
            if len(body) > self.limit:
                await _answer(send, 413, too_large, close)
                return
            if not message.get("more_body", False):
                break
        replay = iter([{"type": "http.request", "body": bytes(body), "more_body": False}] if ended is None else [ended])

        async def replayed() -> Message:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await self.app(scope, replayed, send)
