"""Who may review: the reviewers' keys (``--reviewer-keys FOLDER``), and the page's sessions opened with them."""

from __future__ import annotations

import contextlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from pathlib import Path

from suffice.audit import load_key
from suffice.exceptions import ConfigError
from suffice.server.guards import bearer_token

COOKIE = "suffice_review"
#: Seconds a page session lasts.
SESSION_S = 8 * 3600
#: Sessions kept at once (the oldest go first), and per reviewer: one key logging in again and again replaces its
#: own oldest session, never another reviewer's.
MAX_SESSIONS = 4096
SESSIONS_PER_REVIEWER = 16
#: Login attempts a peer address, and a reviewer's key, may make per :data:`LOGIN_WINDOW_S`; past it 429.
LOGINS_PER_WINDOW = 20
LOGIN_WINDOW_S = 60.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def load_reviewer_keys(folder: Path) -> dict[str, bytes]:
    """Reviewer name -> key from ``folder``'s ``NAME.key`` files (read by :func:`~suffice.audit.load_key`:
    hex, 32 bytes or more, mode 0600).  A :class:`ConfigError` names ``reviewer_keys``: no such folder, no key
    in it, a key file others may read, a name that is not a plain name, or one key for two reviewers."""
    where = str(folder)
    if not folder.is_dir():
        raise ConfigError("reviewer_keys", where, "is not a folder of NAME.key files (suffice audit keygen -o)")
    keys: dict[str, bytes] = {}
    for path in sorted(folder.glob("*.key")):
        name = path.stem
        if not _NAME.match(name):
            raise ConfigError("reviewer_keys", str(path), "a reviewer's name is letters, digits, '.', '_' or '-'")
        try:
            key = load_key(path)
        except ConfigError as exc:
            raise ConfigError("reviewer_keys", str(path), str(exc).partition(": ")[2] or str(exc)) from None
        for other, known in keys.items():
            if hmac.compare_digest(key, known):
                raise ConfigError("reviewer_keys", str(path), f"holds the same key as {other}: one key each")
        keys[name] = key
    if not keys:
        raise ConfigError("reviewer_keys", where, "holds no NAME.key file (suffice audit keygen -o FOLDER/NAME.key)")
    return keys


@dataclass
class Session:
    reviewer: str
    csrf: str
    expires: float

    def csrf_matches(self, given: str) -> bool:
        """Whether a form's CSRF value is this session's (compared as bytes in constant time: any text a client
        sends is an answer, never a 500)."""
        return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.csrf.encode())


class Reviewers:
    """The reviewers' keys (none: nobody may review) and the sessions the page opens with them."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self.keys = keys
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        #: Recent login attempts (monotonic times) by peer address and by reviewer.
        self._attempts: dict[str, list[float]] = {}

    def of_key(self, given: str) -> str | None:
        """The reviewer whose key ``given`` (hex) is, compared in constant time with every key."""
        try:
            raw = bytes.fromhex(given.strip())
        except ValueError:
            raw = b""
        found = None
        for name, key in self.keys.items():
            if hmac.compare_digest(raw, key):
                found = name
        return found

    def of_bearer(self, authorization: str) -> str | None:
        """The reviewer whose key an ``Authorization`` header's value carries."""
        return self.of_key(bearer_token(authorization))

    def allow_login(self, *who: str) -> bool:
        """Note one login attempt by each of ``who`` (``addr:HOST``, ``key:NAME``); ``False`` when one of them made
        :data:`LOGINS_PER_WINDOW` already in the last :data:`LOGIN_WINDOW_S` seconds (the attempt is refused and not
        counted).  The table is bounded: a flood of addresses forgets the oldest."""
        now = time.monotonic()
        with self._lock:
            recent = {w: [t for t in self._attempts.get(w, ()) if now - t < LOGIN_WINDOW_S] for w in who}
            if any(len(times) >= LOGINS_PER_WINDOW for times in recent.values()):
                return False
            for w, times in recent.items():
                self._attempts.pop(w, None)
                self._attempts[w] = [*times, now]
            while len(self._attempts) > MAX_SESSIONS:
                del self._attempts[next(iter(self._attempts))]
        return True

    def open(self, reviewer: str) -> str:
        """A new session's token (the cookie's value)."""
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for old in [t for t, s in self._sessions.items() if s.expires < now]:
                del self._sessions[old]
            own = [t for t, s in self._sessions.items() if s.reviewer == reviewer]
            for old in own[: max(0, len(own) - SESSIONS_PER_REVIEWER + 1)]:
                del self._sessions[old]
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[token] = Session(reviewer, secrets.token_urlsafe(32), now + SESSION_S)
        return token

    def session(self, token: str | None) -> Session | None:
        if not token:
            return None
        with self._lock:
            session = self._sessions.get(token)
            if session is None or session.expires < time.monotonic():
                return None
            return session

    def close(self, token: str | None) -> None:
        with self._lock:
            self._sessions.pop(token or "", None)

    def admits(self, headers: Mapping[str, str]) -> bool:
        """Whether request ``headers`` hold a reviewer's key or a live session's cookie."""
        if self.of_bearer(headers.get("authorization", "")) is not None:
            return True
        cookie = SimpleCookie()
        with contextlib.suppress(CookieError):
            cookie.load(headers.get("cookie", ""))
        morsel = cookie.get(COOKIE)
        return morsel is not None and self.session(morsel.value) is not None
