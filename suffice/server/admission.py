"""What a judge request must pass before it waits for the engine: its content type, a body that parses,
the caps on strings, lists, items and chunks, and room among the chunks already admitted (else 429).

Checked in this order, the cheapest first; every refusal names the field (422) or says when to come back
(429 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from suffice.records.item import InvalidRecord
from suffice.records.lines import parse_line
from suffice.server.config import ServeConfig
from suffice.server.metrics import Metrics
from suffice.server.responses import JSONResponse, Location, unprocessable

#: What a 429 asks the client to wait before it tries again (``Retry-After``).
RETRY_AFTER_S = 5
#: Query parameters that are not gate options.
NOT_OPTIONS = frozenset({"format"})


def envelope(value: object) -> tuple[object, Any]:
    """The items and options of a body ``{"items": [...], "options": {...}}``; any other body is the items."""
    if isinstance(value, dict) and isinstance(value.get("items"), list) and "question" not in value:
        return value["items"], value.get("options", {})
    return value, {}


class Over(Exception):
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


def work_of(value: object, base: Location, config: ServeConfig, *, item: bool) -> int:
    """Raise :class:`Over` at the first string or list in ``value`` past its cap; else the work
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
                raise Over(where, f"{len(node)} characters: at most {strings} a string (--max-field-chars)")
        elif isinstance(node, dict):
            for key, child in node.items():
                if len(key) > strings:
                    raise Over(base + _path(trail), f"a key of {len(key)} characters: at most {strings}")
                if item and not trail and isinstance(child, list):
                    work += len(child)
                stack.append((child, (trail, key)))
        elif isinstance(node, list):
            if len(node) > entries:
                where = base + _path(trail)
                raise Over(where, f"{len(node)} entries: at most {entries} (--max-chunks-per-item)")
            stack.extend((child, (trail, index)) for index, child in enumerate(node))
    return work


def request_work(value: object, records: list[object], options: object, config: ServeConfig) -> int:
    """The request's work in chunks; :class:`Over` names the first value past a cap."""
    base: Location = ["body"]
    if isinstance(value, dict) and value.get("items") is records:  # the envelope
        work_of(options, ["body", "options"], config, item=False)
        base = ["body", "items"]
    if isinstance(value, dict) and value is records[0]:  # one item
        return work_of(value, ["body"], config, item=True)
    return sum(work_of(record, [*base, index], config, item=True) for index, record in enumerate(records))


@dataclass(frozen=True)
class Admitted:
    """A request let in: its records, its options (query parameters, then the body's) and where each option
    was given, for an error that names it."""

    records: list[object]
    options: dict[str, Any]
    where: Mapping[str, Location]
    chunks: int


class Admission:
    """The admission of judge requests, and the items and chunks admitted and not yet done (event loop only,
    so unlocked): past the chunk bound a client hears 429 at once instead of a 504 after its timeout."""

    def __init__(self, config: ServeConfig, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.items = 0
        self.chunks = 0

    async def admit(self, request: Request) -> Admitted | Response:
        """The request's records and options, or the answer that refuses it."""
        config = self.config
        # A web form can post text/plain across origins without asking; only JSON is read.
        if request.headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
            return JSONResponse({"detail": "the body must be sent as Content-Type: application/json"}, 415)
        try:
            raw = await request.body()
        except ClientDisconnect:
            return Response(status_code=499)
        # Off the event loop: 16 MiB of items takes 2.7 s to parse, which would stall /health.  Bounded before the
        # parse, which spends ~80 bytes an object: a 16 MiB body of [{},{},...] would take 454 MiB.
        value = await asyncio.to_thread(parse_line, raw, 1, config.max_containers)
        if isinstance(value, InvalidRecord):
            return unprocessable(["body"], f"the body {value.message}")
        value_read = value
        value, body_options = envelope(value)
        if not isinstance(body_options, dict):
            return unprocessable(["body", "options"], "must be an object of option names to values")
        query = {key: item for key, item in request.query_params.items() if key not in NOT_OPTIONS}
        where = {key: ["query", key] for key in query} | {key: ["body", "options", key] for key in body_options}
        if isinstance(value, dict):
            records: list[object] = [value]
        elif isinstance(value, list):
            records = value
        else:
            return unprocessable(["body"], f"must be an item object or a list of items, not {type(value).__name__}")
        if not records:
            return unprocessable(["body"], "the list of items is empty")
        if len(records) > config.max_items:
            return unprocessable(["body"], f"{len(records)} items: at most {config.max_items} per request")
        try:
            chunks = await asyncio.to_thread(request_work, value_read, records, body_options, config)
        except Over as over:
            return unprocessable(over.location, over.message)
        if chunks > config.max_pending_chunks:
            return unprocessable(
                ["body"], f"{chunks} chunks (an item counts 1 more): at most {config.max_pending_chunks} per request"
            )
        if self.chunks + chunks > config.max_pending_chunks:
            self.metrics.refused_items.inc(len(records))
            return JSONResponse(
                {
                    "detail": f"the service is full: {self.chunks} chunks are being judged or wait for the "
                    f"engine, at most {config.max_pending_chunks}; try again after {RETRY_AFTER_S} s"
                },
                status_code=429,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        return Admitted(records, {**query, **body_options}, where, chunks)

    @contextlib.contextmanager
    def answering(self, admitted: Admitted) -> Iterator[Callable[[Any], None]]:
        """While its request is being answered, count ``admitted`` as waiting for its verdicts; yields the
        callback that releases its items when its work ends (:meth:`hold`)."""
        release = self.hold(admitted)
        self.metrics.waiting.inc()
        try:
            yield release
        finally:
            self.metrics.waiting.dec()

    def hold(self, admitted: Admitted) -> Callable[[Any], None]:
        """Count ``admitted`` as pending; the callback releases it when its work ends (not when the answer
        goes out: the engine is still busy with a request whose client has gone)."""
        self.items += len(admitted.records)
        self.chunks += admitted.chunks
        self.metrics.pending_items.set(self.items)

        def release(_: Any) -> None:
            self.items -= len(admitted.records)
            self.chunks -= admitted.chunks
            self.metrics.pending_items.set(self.items)

        return release
