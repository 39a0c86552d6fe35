"""The review page's login and session against a real server on loopback (issue 52's low findings): a CSRF value
that is not ASCII is refused, not a 500; a logout closes the session whatever its form holds; a login posted from
another site's page is refused; logins are limited per address and per key; one key logging in again and again
replaces its own oldest sessions, never another reviewer's."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from suffice.audit import AuditLog
from suffice.server.reviews import sessions
from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.server.live import live
from tests.server.test_reviews import make_keys


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    db = tmp_path / "audit.db"
    log = AuditLog(db)
    seq = log.record(item_id="q1", gate="sufficiency", decision="human_review", scores={"p_sufficient": 0.4})
    log.enqueue_review(item_id="q1", gate="sufficiency", reason="r", evaluation_seq=seq, payload={"question": "Q?"})
    log.close()
    keys = make_keys(tmp_path / "reviewers", "alice", "bob")
    with live(ScriptedEngine(good), key="k" * 32, audit_db=db, reviewer_keys=tmp_path / "reviewers") as (_, port):
        yield f"http://127.0.0.1:{port}", keys


def logged_in(base: str, key: str, **headers: str) -> tuple[httpx.Client, httpx.Response]:
    client = httpx.Client(base_url=base, headers=headers)
    return client, client.post("/reviews/login", data={"key": key}, follow_redirects=False)


def in_session(client: httpx.Client) -> bool:
    return "Log in to review" not in client.get("/reviews").text


def test_a_csrf_value_that_is_not_ascii_is_refused_not_a_500(site):
    base, keys = site
    client, _ = logged_in(base, keys["alice"])
    answer = client.post("/reviews/1/decision", data={"csrf": "é" * 40, "decision": "deliver"})
    assert answer.status_code == 403, answer.text
    assert in_session(client)


def test_a_logout_without_its_csrf_value_still_closes_the_session(site):
    base, keys = site
    client, _ = logged_in(base, keys["alice"])
    cookie = client.cookies["suffice_review"]
    assert client.post("/reviews/logout", data={}).status_code == 303
    copied = httpx.Client(base_url=base, cookies={"suffice_review": cookie})
    assert not in_session(copied)  # a copy of the cookie no longer opens the page


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://attacker.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://127.0.0.1:1"}],
    ids=["other-origin", "cross-site", "other-port"],
)
def test_a_login_posted_from_another_sites_page_is_refused(site, headers):
    base, keys = site
    client, answer = logged_in(base, keys["alice"], **headers)
    assert answer.status_code == 403 and "suffice_review" not in client.cookies
    same, ok = logged_in(base, keys["alice"], Origin=base, **{"Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 303 and in_session(same)


def test_logins_are_limited_per_address_and_per_key(site, monkeypatch):
    base, keys = site
    monkeypatch.setattr(sessions, "LOGINS_PER_WINDOW", 4)
    statuses = [logged_in(base, "00" * 32)[1].status_code for _ in range(5)]
    assert statuses == [401, 401, 401, 401, 429]
    _, good_key = logged_in(base, keys["alice"])
    assert good_key.status_code == 429  # the address is at its limit, a right key too
    assert "Too many logins" in good_key.text


def test_one_key_logging_in_again_and_again_never_ends_another_reviewers_session(site, monkeypatch):
    base, keys = site
    monkeypatch.setattr(sessions, "SESSIONS_PER_REVIEWER", 3)
    bob, _ = logged_in(base, keys["bob"])
    alices = [logged_in(base, keys["alice"])[0] for _ in range(6)]
    assert in_session(bob)
    assert [in_session(c) for c in alices] == [False, False, False, True, True, True]
    assert re.search(r"alice|bob", bob.get("/reviews").text)


def test_the_security_page_states_the_limits_the_code_has():
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    assert f"`LOGINS_PER_WINDOW` ({sessions.LOGINS_PER_WINDOW}) a minute" in text
    assert sessions.LOGIN_WINDOW_S == 60.0
    assert f"`SESSIONS_PER_REVIEWER` ({sessions.SESSIONS_PER_REVIEWER}) sessions" in text


def test_login_bodies_cut_short_do_not_fill_the_log(tmp_path: Path):
    """A login body then a hang-up, again and again: each wrote a 4 KB traceback (18.1 MiB in 10 s).  The log of a
    real ``suffice serve`` process stays at its start-up lines."""
    import socket
    import subprocess
    import sys

    from suffice.audit import write_key_file
    from tests.server.scripted_serve import wait_ready
    from tests.vllm_server import free_port

    (tmp_path / "reviewers").mkdir()
    write_key_file(tmp_path / "reviewers" / "alice.key")
    AuditLog(tmp_path / "audit.db").close()
    port, log = free_port(), tmp_path / "serve.log"
    command = [sys.executable, "-m", "tests.server.scripted_serve", "serve", "--port", str(port)]
    command += ["--audit-db", str(tmp_path / "audit.db"), "--reviewer-keys", str(tmp_path / "reviewers")]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(process, port, log)
        started = log.stat().st_size
        head = f"POST /reviews/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        head += "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nkey=00"
        for _ in range(500):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(head.encode())
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        assert log.stat().st_size - started < 4096, log.read_text()[-2000:]
    finally:
        process.terminate()
        process.wait(30)


def test_slow_login_bodies_do_not_hold_the_places_of_keyed_clients(tmp_path: Path):
    """Connections sending ``/reviews/login`` bodies slowly held every place of ``--max-connections`` (a body
    arriving counted as work in flight): keyed judge requests were answered 503.  A body still arriving on a path
    outside ``/v1/`` counts as waiting now, so a keyed client's connection takes the place of the longest waiting."""
    import socket
    import subprocess
    import sys

    from suffice.audit import write_key_file
    from tests.server.scripted_serve import wait_ready
    from tests.server.test_app import record
    from tests.vllm_server import free_port

    (tmp_path / "reviewers").mkdir()
    write_key_file(tmp_path / "reviewers" / "alice.key")
    AuditLog(tmp_path / "audit.db").close()
    key = tmp_path / "client.key"
    key.write_text("c" * 32 + "\n")
    key.chmod(0o600)
    port, log, cap = free_port(), tmp_path / "serve.log", 16
    command = [sys.executable, "-m", "tests.server.scripted_serve", "serve", "--port", str(port)]
    command += ["--audit-db", str(tmp_path / "audit.db"), "--reviewer-keys", str(tmp_path / "reviewers")]
    command += ["--api-key-file", str(key), "--max-connections", str(cap)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    head = (
        f"POST /reviews/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\nkey="
    ).encode()
    holders = []
    try:
        wait_ready(process, port, log)
        for _ in range(cap):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(head)
            holders.append(sock)
        time.sleep(0.5)
        for sock in holders:
            with contextlib.suppress(OSError):
                sock.sendall(b"0")  # still sending, slowly
        auth = {"authorization": "Bearer " + "c" * 32}
        statuses = [
            httpx.post(
                f"http://127.0.0.1:{port}/v1/judge/sufficiency", json=record(0), headers=auth, timeout=30
            ).status_code
            for _ in range(5)
        ]
        assert statuses == [200] * 5
    finally:
        for sock in holders:
            sock.close()
        process.terminate()
        process.wait(30)


def test_the_security_page_states_the_connection_limits_the_code_has():
    from suffice.server import http_guard

    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    assert f"`MAX_PIPELINED` ({http_guard.MAX_PIPELINED})" in text
    assert f"`WRITE_TIMEOUT_S` ({http_guard.WRITE_TIMEOUT_S:g})" in text
    assert f"outside `{http_guard.PROTECTED_PREFIX}`" in text
