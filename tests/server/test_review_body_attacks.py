"""A client without a reviewer's key cannot hold a connection through the review paths (issue 38's "no way to
stall"): a POST to a review path other than the login form is refused 401 from its headers, before any body is
read, and a review body (the login form's too) must arrive within REVIEW_BODY_SECONDS.  Against a real
``suffice serve --audit-db --reviewer-keys`` process on a scripted engine."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from suffice.server.reviews import REVIEW_BODY_BYTES, REVIEW_BODY_SECONDS
from tests.server.scripted_serve import wait_ready
from tests.server.test_reviews import make_keys
from tests.vllm_server import free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("review-bodies")
    keys = make_keys(folder / "reviewers", "ada")
    port = free_port()
    log = folder / "server.log"
    command = [sys.executable, "-m", "tests.server.scripted_serve", "serve", "--port", str(port)]
    command += ["--gate", "sufficiency", "--audit-db", str(folder / "audit.db")]
    command += ["--reviewer-keys", str(folder / "reviewers")]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    wait_ready(process, port, log)
    yield port, keys
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


def dribble(port: int, head: bytes, seconds: float) -> tuple[bytes, float | None]:
    """Send ``head``, then one body byte every 0.2 s for up to ``seconds``; the answer and when it came."""
    answer = b""
    began = time.monotonic()
    answered = None
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(0.2)
        sock.sendall(head)
        while time.monotonic() - began < seconds:
            with contextlib.suppress(OSError):
                sock.sendall(b"x")
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
            if answered is None and b"HTTP/1.1 " in answer:
                answered = time.monotonic() - began
    return answer, answered


@pytest.mark.parametrize("path", ["/v1/reviews/1/decision", "/reviews/1/decision", "/reviews/logout"])
def test_a_post_without_a_reviewer_key_is_refused_before_its_body(served, path):
    port, _ = served
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "Content-Length: 60000\r\n\r\n"
    answer, answered = dribble(port, head.encode(), 5)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert answered is not None and answered < 1.5


def test_a_login_form_sent_slowly_is_cut_at_the_review_body_deadline(served):
    port, _ = served
    head = b"POST /reviews/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 60000\r\n\r\nkey="
    answer, answered = dribble(port, head, REVIEW_BODY_SECONDS + 10)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert answered is not None and answered < REVIEW_BODY_SECONDS + 3


def test_a_review_body_over_its_cap_is_413(served):
    port, keys = served
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/reviews/1/decision",
        headers={"authorization": f"Bearer {keys['ada']}"},
        content=b"{" + b" " * REVIEW_BODY_BYTES + b"}",
        timeout=30,
    )
    assert answer.status_code == 413


def test_a_reviewer_with_a_key_is_still_heard(served):
    port, keys = served
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/reviews/999/decision",
        headers={"authorization": f"Bearer {keys['ada']}"},
        json={"decision": "answer"},
        timeout=30,
    )
    assert answer.status_code == 404  # past the guard: the route looked the review up


def test_the_docs_state_the_review_body_limits():
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    assert f"{REVIEW_BODY_BYTES // 1024} KiB" in text and f"{REVIEW_BODY_SECONDS:g} s" in text
