"""Limits on the HTTP connection itself, before any request reaches the app: what a client
without a key can make the process hold.

uvicorn's HTTP/1.1 parsers put no limit on a request's head.  httptools collects a URL or a
header value piece by piece without end (each piece copies what came before, on the event
loop), and neither parser closes a connection whose head never ends, nor refuses a connection
past any count.  So one client sending header bytes for ever stalls every request, and a
thousand half-open requests use up the process's descriptors.

Here the protocol uvicorn would pick is subclassed, and the bytes of a request's head are
counted before the parser sees them: a request line over :data:`MAX_REQUEST_LINE` is answered
414, a head over :data:`MAX_HEAD_BYTES` or :data:`MAX_HEADERS` lines 431, a head not complete
within ``header_timeout`` seconds 408, each with ``Connection: close``.  A connection past
``max_connections`` takes the place of the one that has waited longest without a request in
flight (a slow or idle client); when every connection has one in flight, the new one is answered
503 at once and closed, so descriptors stay bounded.

Two rules keep a client that has just connected from being taken for an idle one, and closed with
its request unanswered, when a burst of connections arrives behind it:

- bytes already in the kernel count, though the loop has not read them: a busy loop may accept a
  whole burst before it reads any connection.  A whole head waiting is a request, so that
  connection is not idle; part of a head is a slow head like any other;
- a connection that has sent nothing counts as having waited :data:`SILENT_GRACE_S` less: its
  client may not have been scheduled between ``connect`` and ``send``.  A slow head or an idle
  keep-alive connection goes first; among silent ones the oldest still goes, so a flood of silent
  connections cannot hold the cap.

What a client without a key can make one connection cost is bounded the same way: at most
:data:`MAX_PIPELINED` requests queued behind the one in flight (more: 503 and closed; each pipelined
head counted by the parser's own callbacks, so a second head in the same read meets the head limits
too); an answer the client does not read closes the connection after :data:`WRITE_TIMEOUT_S` of
writing blocked; and a request still sending its body to a path outside ``/v1/`` (the review login)
counts as waiting, so slow logins cannot hold the cap against keyed requests.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import math
import os
import socket
import struct
import termios
from dataclasses import dataclass
from typing import Any

#: Longest request line (method, target, version) in bytes; a longer one is 414.
MAX_REQUEST_LINE = 8 * 1024
#: Largest head (request line and headers) in bytes; a larger one is 431.
MAX_HEAD_BYTES = 32 * 1024
#: Most header lines in one head; more is 431.
MAX_HEADERS = 100
#: Seconds an idle keep-alive connection stays open after its last answer.
KEEP_ALIVE_S = 5
#: Seconds a connection that has sent nothing counts as younger when one must make room.
SILENT_GRACE_S = 1.0
#: Most kernel buffers a new connection past the cap reads to find the one that makes room.
READS_PER_NEW_CONNECTION = 32
#: What a refusal asks the client to wait before it tries again (``Retry-After``).
RETRY_AFTER_S = 1
#: Requests one connection may queue behind the one in flight (HTTP/1.1 pipelining); more is 503.
MAX_PIPELINED = 4
#: Seconds an answer may wait for the client to read it (the transport's buffer past its high-water mark).
WRITE_TIMEOUT_S = 10.0
#: Where a request is protected work: a slow body elsewhere (the review login) is as idle as a slow head.
PROTECTED_PREFIX = "/v1/"

_REASONS = {
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}
_END = b"\r\n\r\n"


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-process limits on connections (see the module's docstring)."""

    max_connections: int
    header_timeout: float


def refusal(status: int, detail: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection."""
    body = json.dumps({"detail": detail}).encode()
    head = [
        b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    if status == 503:
        head.append(b"retry-after: %d" % RETRY_AFTER_S)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class _Guarded:
    """Mixed in before a uvicorn HTTP/1.1 protocol class; ``limits`` is set on the subclass."""

    limits: ConnectionLimits
    # The uvicorn protocol's own attributes this relies on.
    connections: set[Any]
    transport: asyncio.Transport
    cycle: Any
    loop: asyncio.AbstractEventLoop

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._head_bytes = 0
        self._head_lines = 0
        self._line_done = False
        self._tail = b""
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._seen_cycle: Any = None
        self._begun = False
        self._waiting_since = self.loop.time()
        self._silent = True
        self._arm()
        if len(self.connections) > self.limits.max_connections:
            oldest = _longest_waiting([c for c in self.connections if c is not self])
            if oldest is not None:
                oldest._refuse(408, "closed for a new connection: no request arrived in time")
            else:
                self._refuse(503, f"the service holds {self.limits.max_connections} connections (--max-connections)")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._unblocked()
        super().connection_lost(exc)  # type: ignore[misc]

    def pause_writing(self) -> None:
        """The client does not read what is written: closed if it still does not within :data:`WRITE_TIMEOUT_S`."""
        super().pause_writing()  # type: ignore[misc]
        if self._write_deadline is None:
            self._write_deadline = self.loop.call_later(WRITE_TIMEOUT_S, self.transport.abort)

    def resume_writing(self) -> None:
        self._unblocked()
        super().resume_writing()  # type: ignore[misc]

    def _unblocked(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def send_400_response(self, msg: str) -> None:
        if not self.transport.is_closing():  # refused already, with its own answer
            super().send_400_response(msg)  # type: ignore[misc]

    def _without_request(self) -> bool:
        """Open, and no request in flight (idle, or its head not yet complete), or one still sending its body to a
        path that is not protected work."""
        if self.transport.is_closing():
            return False
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return True
        return bool(cycle.more_body) and not str(cycle.scope.get("path", "")).startswith(PROTECTED_PREFIX)

    def _idle_since(self) -> float | None:
        """When this connection, without a request in flight, began to wait, moved later by the
        silent grace; ``None`` when a whole head waits unread (a request)."""
        pending = _unread(self.transport)
        if _END in self._tail + pending:
            return None
        silent = self._silent and not pending
        return self._waiting_since + (SILENT_GRACE_S if silent else 0.0)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.limits.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        seconds = f"{self.limits.header_timeout:g}"
        self._refuse(408, f"request headers not received within {seconds} s (--header-timeout)")

    def _refuse(self, status: int, detail: str) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(refusal(status, detail))
            self.transport.close()

    def _in_head(self) -> bool:
        """Whether arriving bytes belong to a request's head: no request in flight (so not its
        body), or the parser began the next one (pipelined)."""
        return self.cycle is None or self.cycle.response_complete or self._begun

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        self._silent = False
        if self._in_head():
            self._arm()
            joined = self._tail + data
            end = joined.find(_END)
            part = data if end < 0 else joined[len(self._tail) : end + len(_END)]
            if not self._line_done:
                newline = part.find(b"\n")
                line = self._head_bytes + (len(part) if newline < 0 else newline)
                if line > MAX_REQUEST_LINE:
                    self._refuse(414, f"request line over {MAX_REQUEST_LINE} bytes")
                    return
                self._line_done = newline >= 0
            self._head_bytes += len(part)
            self._head_lines += part.count(b"\n")
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, f"request head over {MAX_HEAD_BYTES} bytes")
                return
            if self._head_lines > MAX_HEADERS + 2:  # the request line and the empty line besides
                self._refuse(431, f"more than {MAX_HEADERS} header lines")
                return
            self._tail = joined[-(len(_END) - 1) :] if end < 0 else b""
        super().data_received(data)  # type: ignore[misc]
        if self.cycle is not None and self.cycle is not self._seen_cycle:
            self._head_complete()

    def _head_complete(self) -> None:
        """A request's head was parsed (a new request cycle): its count starts again for the next."""
        self._seen_cycle = self.cycle
        self._begun = False
        self._disarm()
        self._head_bytes = self._head_lines = 0
        self._line_done = False
        self._tail = b""

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self.cycle is not self._seen_cycle:  # a pipelined request started
            self._head_complete()
        if self._without_request():  # idle from now, not pipelined
            self._waiting_since = self.loop.time()


def _longest_waiting(connections: list[Any]) -> Any | None:
    """The connection that has waited longest without a request in flight, by :meth:`_Guarded._idle_since`.

    Its exact wait reads the connection's kernel buffer (two or three system calls), and only ever comes out later
    than the time it began to wait: so connections are read in that order until none left can beat the best, and
    at most :data:`READS_PER_NEW_CONNECTION` once one is found (a flood past a cap of 512 would otherwise cost 512
    reads a connection)."""
    best, best_since = None, math.inf
    waiting = sorted(
        (c for c in connections if isinstance(c, _Guarded) and c._without_request()), key=lambda c: c._waiting_since
    )
    for reads, connection in enumerate(waiting):
        if connection._waiting_since >= best_since or (best is not None and reads >= READS_PER_NEW_CONNECTION):
            break
        since = connection._idle_since()
        if since is not None and since < best_since:
            best, best_since = connection, since
    return best


def _unread(transport: asyncio.Transport) -> bytes:
    """The start of what waits in the kernel for this connection, not consumed (up to a head)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return b""
    try:
        fd = sock.fileno()
        count = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        if count <= 0:
            return b""
        copy = os.dup(fd)  # the transport's own socket object may not offer recv (uvloop's does not)
        try:
            peek = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            raise
        with peek:
            return peek.recv(min(count, MAX_HEAD_BYTES), socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (OSError, ValueError):  # closed under us: nothing to protect
        return b""


class _Stop(Exception):
    """Raised in a parser callback once the connection is refused: the parser stops reading the rest."""


class _Pipelined:
    """httptools: the parser says when the next request's head begins, while the last is still in flight, so
    pipelined heads are counted too: their number, and each one's request line, bytes and lines as the parser
    reads them (a second head in the same read as the first is never seen by :meth:`_Guarded.data_received`'s
    count)."""

    pipeline: Any
    _refuse: Any

    def on_message_begin(self) -> None:
        if len(self.pipeline) >= MAX_PIPELINED:
            self._refuse(503, f"more than {MAX_PIPELINED} requests pipelined behind one in flight")
            raise _Stop
        super().on_message_begin()  # type: ignore[misc]
        self._begun = True
        self._parsed_line = self._parsed_bytes = self._parsed_lines = 0

    def on_url(self, url: bytes) -> None:
        self._parsed_line += len(url)
        if self._parsed_line > MAX_REQUEST_LINE:
            self._refuse(414, f"request line over {MAX_REQUEST_LINE} bytes")
            raise _Stop
        super().on_url(url)  # type: ignore[misc]

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed_bytes += len(name) + len(value) + 4
        self._parsed_lines += 1
        if self._parsed_line + self._parsed_bytes > MAX_HEAD_BYTES:
            self._refuse(431, f"request head over {MAX_HEAD_BYTES} bytes")
            raise _Stop
        if self._parsed_lines > MAX_HEADERS:
            self._refuse(431, f"more than {MAX_HEADERS} header lines")
            raise _Stop
        super().on_header(name, value)  # type: ignore[misc]

    def on_headers_complete(self) -> None:
        super().on_headers_complete()  # type: ignore[misc]
        self._begun = False


def guarded(base: type[asyncio.Protocol], limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """``base``, one of uvicorn's HTTP/1.1 protocols, with ``limits`` and this module's head limits."""
    mixins: tuple[type, ...] = (_Pipelined, _Guarded) if hasattr(base, "on_message_begin") else (_Guarded,)
    return type(f"Guarded{base.__name__}", (*mixins, base), {"limits": limits})


def protocol_class(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """The protocol uvicorn would pick (httptools when installed, else h11), guarded."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed: h11, whose buffer limit is set in run.py
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return guarded(H11Protocol, limits)
    return guarded(HttpToolsProtocol, limits)
