"""``suffice serve``'s app on a real uvicorn server, on a loopback port, in a thread of the test's process."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from suffice.config import JudgeConfig
from suffice.server.app import create_app
from suffice.server.config import ServeConfig
from suffice.server.service import GateService
from tests.fakes import ScriptedEngine


@contextlib.contextmanager
def live(
    engine: ScriptedEngine,
    *,
    key: str | None = None,
    judge: JudgeConfig | None = None,
    gates: tuple[str, ...] = ("sufficiency",),
    uvicorn_options: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[tuple[uvicorn.Server, int]]:
    """The server, once started, and its port; ``uvicorn_options`` go to ``uvicorn.Config``."""
    config = ServeConfig(judge=judge or JudgeConfig(), gates=gates, **settings)
    app = create_app(GateService(config, engine), config, key.encode() if key else None)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", **(uvicorn_options or {})))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "uvicorn did not start within 10 s"
        yield server, listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()
