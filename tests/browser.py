"""A headless Chromium driven over the DevTools protocol, for the tests of the review page.

The system's Chromium (Debian's ``chromium`` package), no driver binary: Selenium's would be downloaded
and Playwright's browsers too, and neither can be here.  The protocol is JSON over a WebSocket
(``websockets``, the client uvicorn already brings): navigate, evaluate, wait for a load, take a screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from websockets.sync.client import ClientConnection, connect

#: Where Debian installs it; ``SUFFICE_CHROMIUM`` names another.
CHROMIUM = os.environ.get("SUFFICE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
START_WITHIN = 60.0
#: Nothing of the browser's own reaches out: no updates, no sync, no metrics.
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # the tests run as root in CI
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def chromium_or_skip() -> str:
    """The browser's path; outside CI a machine without it skips (CI installs it: .ci/run)."""
    if Path(CHROMIUM).is_file():
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail(f"no Chromium at {CHROMIUM}: .ci/run installs Debian's chromium for the review page's tests")
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")


class Page:
    """One tab: commands over its WebSocket, events read as they come."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, event: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for index, message in enumerate(self.events):
                if message.get("method") == event:
                    return self.events.pop(index)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {event} within {timeout:g} s")
            self.events.append(json.loads(self.ws.recv(timeout=left)))

    def load(self, action: Any) -> None:
        """Run ``action`` (a navigation, a click that submits) and wait until the page it leads to loaded."""
        self.events.clear()
        action()
        self.wait_for("Page.loadEventFired")

    def goto(self, url: str) -> None:
        self.load(lambda: self.send("Page.navigate", url=url))

    def evaluate(self, expression: str) -> Any:
        """``expression``'s value in the page (DevTools evaluation: the page's own policy runs no script)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """Click the element (a submit button) and wait for the page the form posts to."""
        self.load(lambda: self.evaluate(f"document.querySelector({json.dumps(selector)}).click()"))

    def fill(self, selector: str, value: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}")

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText"))

    def html(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def screenshot(self, path: Path, width: int = 1100) -> None:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))


@contextlib.contextmanager
def browser(profile: Path) -> Iterator[Page]:
    """A headless Chromium with a fresh profile in ``profile``, and its first tab; closed on exit."""
    executable = chromium_or_skip()
    profile.mkdir(parents=True, exist_ok=True)
    log = (profile.parent / "chromium.log").open("wb")
    process = subprocess.Popen(
        [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_WITHIN
        while not port_file.is_file() or not port_file.read_text().strip():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Chromium did not start ({executable}); see {log.name}")
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        targets = json.loads(urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        tab = next(t for t in targets if t.get("type") == "page")
        with connect(tab["webSocketDebuggerUrl"], max_size=2**26, open_timeout=30) as ws:
            page = Page(ws)
            page.send("Page.enable")
            yield page
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
