"""Run the service: listen first, start the engine behind it, serve until SIGTERM, then drain.

Order matters.  The port is bound and listening before the engine starts, so a port in use fails
in a second, not after a minute of loading, and a caller can tell a service that starts from one
that is gone: while the engine loads (on a thread of its own) ``/health`` answers 200 ``starting``,
``/ready`` and every judge route 503 ``starting`` with ``Retry-After``.  On SIGTERM or Ctrl-C
uvicorn stops accepting, lets the requests in flight finish (their verdicts and audit rows
included) and only then is the engine shut down; the exit status is 0.  A SIGTERM while the engine
starts waits for the start to end (an engine half made cannot be closed), then closes it: 0 too.
If the engine dies, the server answers 503 and exits 1 for its supervisor; if it fails to start,
the server stops and the error is raised as before it listened.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from suffice.exceptions import ConfigError
from suffice.server.config import ServeConfig, read_api_key
from suffice.server.http_guard import KEEP_ALIVE_S, MAX_HEAD_BYTES, ConnectionLimits, protocol_class
from suffice.server.service import GateService, check_served

Notify = Callable[[str], None]
#: Seconds a SIGTERM drain waits beyond the request timeout.
DRAIN_MARGIN_S = 30
#: Connections waiting to be accepted (uvicorn's default).
BACKLOG = 2048
#: Descriptors kept for the engine, the audit log and the rest beside the connections.
SPARE_DESCRIPTORS = 256


def reserve_descriptors(connections: int) -> None:
    """Raise the soft descriptor limit so ``connections`` fit beside :data:`SPARE_DESCRIPTORS`;
    a hard limit too low for that is an error naming ``max_connections``."""
    try:
        import resource
    except ImportError:  # not POSIX: no limit to raise here
        return
    need = connections + SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            "max_connections",
            connections,
            f"needs {need} open files with the {SPARE_DESCRIPTORS} kept aside; this process may open {hard} "
            "(ulimit -n): lower --max-connections or raise the limit",
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def bind(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket; errors name the ``port`` or ``host``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError("host", host, f"cannot be resolved: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError("port", port, f"cannot be bound on {host}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def listen(sock: socket.socket, host: str, port: int) -> None:
    """Listen on the socket :func:`bind` made; errors name the ``port``.

    Why here and not in uvicorn: two servers started on one port both bind it
    (``SO_REUSEADDR``, neither listening yet), and only the second ``listen`` fails.
    uvloop's ``create_server`` swallows that failure, leaving a server that prints
    its URL and never listens.
    """
    try:
        sock.listen(BACKLOG)
    except OSError as exc:
        raise ConfigError("port", port, f"cannot be listened on at {host}: {exc.strerror or exc}") from exc


@contextmanager
def _signals_absorbed() -> Iterator[None]:
    """uvicorn re-raises the signal that stopped it once it has drained; a finished
    drain is a clean exit here, so the re-raised SIGTERM/SIGINT is absorbed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _start(config: ServeConfig, started: Future[GateService], stop: Callable[[], None]) -> None:
    """Start the engine into ``started`` (run on a thread of its own); a start that fails stops the server."""
    try:
        started.set_result(GateService.open(config))
    except BaseException as exc:
        started.set_exception(exc)
        stop()


def serve(config: ServeConfig, notify: Notify) -> int:
    """Serve until stopped; 0 after a drain, 1 if the engine died."""
    import uvicorn

    from suffice.server.app import create_app

    api_key = read_api_key(config.api_key_file) if config.api_key_file is not None else None
    reserve_descriptors(config.max_connections)
    check_served(config)  # a bad option fails in a second, before the port opens
    sock = bind(config.host, config.port)
    started: Future[GateService] = Future()
    server: uvicorn.Server | None = None

    def stop() -> None:
        if server is not None:
            server.should_exit = True

    def on_fatal(reason: str) -> None:
        notify(f"error: {reason}\nstopping: the engine cannot judge any more")
        stop()

    def ready(start: Future[GateService]) -> None:
        if start.exception() is None:
            engine = start.result().engine
            notify(f"suffice serve: ready; model {engine.model_id}, backend {engine.backend}")

    loader = threading.Thread(target=_start, args=(config, started, stop), name="suffice-engine-start")

    try:
        host, port = sock.getsockname()[:2]
        app = create_app(started, config, api_key, on_fatal)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="info" if config.verbose else "warning",
                access_log=config.verbose,
                # Requests in flight end by their own timeouts (504): the body's upload
                # (BodyLimit) and then the judging each have request_timeout; the margin
                # covers the audit write and the response, so a drain cuts none short.
                timeout_graceful_shutdown=2 * int(config.request_timeout) + DRAIN_MARGIN_S,
                # Heads, connections and keep-alive bounded (see suffice.server.http_guard); the
                # buffer limit is h11's own bound on a head, should httptools be missing.
                http=protocol_class(ConnectionLimits(config.max_connections, config.header_timeout)),
                h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                timeout_keep_alive=KEEP_ALIVE_S,
                ws="none",  # no route takes a WebSocket
            )
        )
        listen(sock, host, port)
        notify(
            f"suffice serve: http://{host}:{port} (OpenAPI at /openapi.json); gates {', '.join(config.gates)}"
            + ("; bearer token required" if api_key is not None else "")
            + "; starting the engine (/ready answers 503 until it is up)"
        )
        started.add_done_callback(ready)
        loader.start()
        stopped_starting = False
        with _signals_absorbed():
            server.run(sockets=[sock])
            if not started.done():
                stopped_starting = True
                notify("stopping: the engine is still starting; it is closed once it is up")
            loader.join()
    finally:
        sock.close()
        if loader.is_alive():  # server.run raised: the engine that starts is still closed
            loader.join()
        service = started.result() if started.done() and started.exception() is None else None
        if service is not None:
            service.close()
    if service is None:
        if stopped_starting:  # Ctrl-C reaches the engine's processes too: their start fails, as asked
            notify("suffice serve: stopped before the engine was up")
            return 0
        raise started.exception() or RuntimeError("the engine did not start")
    notify("suffice serve: stopped" + (" (engine dead)" if service.dead else " after finishing the requests in flight"))
    return 1 if service.dead is not None else 0
