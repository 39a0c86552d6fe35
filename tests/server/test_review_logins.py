"""The review page's login and session against a real server on loopback (issue 52's low findings): a CSRF value
that is not ASCII is refused, not a 500; a logout closes the session whatever its form holds; a login posted from
another site's page is refused; logins are limited per address and per key; one key logging in again and again
replaces its own oldest sessions, never another reviewer's."""

from __future__ import annotations

import re
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
