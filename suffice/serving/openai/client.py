"""HTTP to the server with plain ``httpx``: retries with backoff on connection errors, timeouts, 429 and 5xx, then
the server is declared gone (:class:`~suffice.exceptions.EngineDeadError`) or the one request fails
(:class:`~suffice.exceptions.EngineError`); also ``Retry-After``, health checks, proxies, redirects, size and time
bounds.

Only the proxy given (``proxy``) is used: ``trust_env`` is off, so HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and ``.netrc``,
set for other tools, never get the key or the prompts (SSL_CERT_FILE and SSL_CERT_DIR are still honoured).  The key
is shown as ``***`` in whatever a server's answer quotes back into an error."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import replace
from typing import Any

import httpx

from suffice.exceptions import EngineDeadError, EngineError, EngineFatalError, EngineUnreachableError
from suffice.network import RetryPolicy, bearer_key, read_key_file
from suffice.serving.engine_config import EngineConfig

#: Seconds before the first retry; each further retry waits twice as long (0.5, 1, 2 ...).
BACKOFF_SECONDS = 0.5
#: A server's ``Retry-After`` is honoured up to this many seconds (a longer one waits this long).
MAX_RETRY_AFTER = 30.0
#: Seconds to open a connection (a host that drops packets fails fast, then is retried).
CONNECT_TIMEOUT = 10.0
#: Characters of a server's error message or of an off-constraint text quoted in errors.
QUOTE_CHARS = 300
#: Seconds a health check may take, tried twice (it does not wait the generation timeout).
HEALTH_TIMEOUT = 10.0
#: Bytes an answer may have (a real one is a few MiB at most).
MAX_ANSWER_BYTES = 64 * 2**20
#: The routes a health check asks (a timeout on any other call asks them).
_HEALTH_ROUTES = ("/health", "/v1/models")
_GONE = "nothing more can be judged in this run; what was done is kept, rerun to resume once the server is back"


class ServerError(EngineError):
    """The server refused one call (HTTP 4xx other than 401, 403 and 429): not retried."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class _AnswerTooLarge(Exception):
    """An answer longer than :data:`MAX_ANSWER_BYTES`."""


class Client:
    """Calls to one server, at most ``max_concurrency`` in flight (health checks aside)."""

    def __init__(self, config: EngineConfig, transport: httpx.BaseTransport | None) -> None:
        # The server's root: ``/v1`` is added per route, ``/tokenize`` lives at the root.
        self.base_url = (config.base_url or "").rstrip("/").removesuffix("/v1").rstrip("/")
        self._config = config
        path = config.api_key_file  # the server's key: its file's mode is the operator's business
        self._key = (
            bearer_key(read_key_file(path, "api_key_file", forging=None), "api_key_file", str(path)) if path else None
        )
        self._retry = RetryPolicy(config.retries, MAX_RETRY_AFTER, backoff=BACKOFF_SECONDS, cap=True)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(config.request_timeout, connect=min(CONNECT_TIMEOUT, config.request_timeout)),
            limits=httpx.Limits(max_connections=config.concurrency + 4),
            transport=transport,
            trust_env=False,
            proxy=config.proxy,
            verify=httpx.create_ssl_context(trust_env=True),
        )
        self.closed = False
        #: Completions whose connection was cut while the server worked on them.
        self.cuts = 0
        self._lock = threading.Lock()

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """One HTTP call, retried where a retry can help; a response with status < 400.

        Raises :class:`EngineDeadError` when a completion's connection was cut and the server is then gone (its
        records in flight are suspects), :class:`EngineUnreachableError` when it is gone otherwise or answers no
        health check after a request timed out.
        """
        policy = self._retry if retries is None else replace(self._retry, retries=retries)
        cut = False
        attempt = 0
        while True:
            asked = None  # the Retry-After of an answer
            try:
                # A health check takes no slot, or it would wait behind hung requests (the pool keeps 4 spare).
                with self._slots if path not in _HEALTH_ROUTES else contextlib.nullcontext():
                    response = self._exchange(method, path, body, timeout)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                # Connected but slow is not gone: that request fails, and a health check decides.
                reachable = isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout))
                if path == "/v1/completions" and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
                    cut = True
                    with self._lock:
                        self.cuts += 1
                if reachable and path not in _HEALTH_ROUTES:
                    silent = self.unhealthy()
                    if silent is not None:
                        raise EngineUnreachableError(
                            f"the server at {self.base_url} did not answer a request within "
                            f"{self._config.request_timeout:g} s, nor a health check ({silent}): {_GONE}"
                        ) from exc
            except httpx.ProxyError as exc:
                raise EngineUnreachableError(
                    f"the server at {self.base_url} was asked for through the proxy {self._config.proxy} (--proxy), "
                    f"which refused it ({self._redact(str(exc))}): for a server on this network leave --proxy out"
                ) from exc
            except (httpx.DecodingError, _AnswerTooLarge) as exc:  # a broken gzip, say, or too long an answer
                failure = f"the answer did not decode: {exc}" if isinstance(exc, httpx.DecodingError) else str(exc)
                reachable = True
            else:
                status = response.status_code
                if 300 <= status < 400:  # not followed: a key must not travel to another host
                    where = response.headers.get("Location", "another address")
                    raise ServerError(
                        status,
                        f"HTTP {status} from the server at {self.base_url}{path}: it redirects to {where}; "
                        "give the address it redirects to",
                    )
                if status < 400:
                    return response
                message = _server_message(response, self._key)
                if status in (401, 403):
                    where = f" ({self._config.api_key_file})" if self._config.api_key_file else " (none was given)"
                    raise EngineFatalError(
                        f"the server at {self.base_url} refused the API key (HTTP {status}: {message}): "
                        f"check the server's key file{where} (--api-key-file; --engine-key-file in suffice serve)"
                    )
                if not policy.retried(status):
                    raise ServerError(status, f"HTTP {status} from the server at {self.base_url}{path}: {message}")
                failure = f"HTTP {status}: {message}"
                reachable = True
                asked = response.headers.get("Retry-After")
            delay = policy.wait(attempt, asked=asked)
            if delay is None or self.closed:
                break
            time.sleep(delay)
            attempt += 1
        tries = f"{attempt + 1} {'try' if attempt == 0 else 'tries'}"
        if not reachable and cut:
            raise self.went_away(f"{failure}; {tries}")
        if not reachable:
            raise EngineUnreachableError(
                f"the server at {self.base_url} cannot be reached ({failure}; {tries}): {_GONE}"
            )
        raise EngineError(f"the server at {self.base_url}{path} failed ({failure}; {tries})")

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None, timeout: float | None) -> httpx.Response:
        """One request and its whole answer, within the call's timeout (not per read) and :data:`MAX_ANSWER_BYTES`."""
        seconds = self._config.request_timeout if timeout is None else timeout
        request = self._http.build_request(
            method, path, json=body, timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout
        )
        deadline = time.monotonic() + seconds
        response = self._http.send(request, stream=True)
        content = bytearray()
        try:
            for chunk in response.iter_bytes():
                content += chunk
                if len(content) > MAX_ANSWER_BYTES:
                    raise _AnswerTooLarge(f"the answer was larger than {MAX_ANSWER_BYTES} bytes; cut there")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the answer did not end within {seconds:g} s", request=request)
        finally:
            response.close()
        # Decoded already: the encoding and length headers no longer describe it.
        headers = [(k, v) for k, v in response.headers.multi_items() if k not in ("content-encoding", "content-length")]
        return httpx.Response(
            response.status_code,
            headers=headers,
            content=bytes(content),
            request=request,
            extensions=response.extensions,
        )

    def _redact(self, text: str) -> str:
        """``text`` with the key shown as ``***`` (a server or proxy may quote the request's headers back)."""
        return text.replace(self._key, "***") if self._key else text

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """A POST's answer as JSON; a body that is not (a proxy's HTML page) fails this call as an EngineError."""
        try:
            return self.call("POST", path, body).json()
        except ValueError as exc:
            raise EngineError(f"the server at {self.base_url} answered {path} with a body that is not JSON") from exc

    def went_away(self, detail: str) -> EngineDeadError:
        """The server died while it worked on a completion: its records in flight are suspects."""
        return EngineDeadError(
            f"the server at {self.base_url} went away while it judged ({detail}): the records in flight "
            "are noted; what was done is kept, rerun to resume once the server is back"
        )

    def check_alive(self) -> None:
        """Raise :class:`EngineDeadError` if the server cannot be reached or reports its engine dead."""
        try:
            self._health()
        except EngineFatalError:
            raise
        except EngineError as exc:
            raise EngineUnreachableError(
                f"the server at {self.base_url} reports itself unhealthy ({exc}): {_GONE}"
            ) from exc

    def _health(self) -> None:
        """``/health`` (or ``/v1/models``) answered within :data:`HEALTH_TIMEOUT`, tried twice."""
        try:
            self.call("GET", "/health", retries=1, timeout=HEALTH_TIMEOUT)
        except ServerError:  # no /health route (not vLLM's own server): is it answering at all?
            self.call("GET", "/v1/models", retries=1, timeout=HEALTH_TIMEOUT)

    def unhealthy(self) -> str | None:
        """Why the server fails a health check, or ``None`` if it passes."""
        try:
            self._health()
        except EngineFatalError as exc:  # a refused key is the next call's to report
            return str(exc) if isinstance(exc, EngineUnreachableError) else None
        except EngineError as exc:
            return str(exc)
        return None

    def close(self) -> None:
        self.closed = True
        self._http.close()


def _server_message(response: httpx.Response, key: str | None) -> str:
    """The server's ``{"error": {"message"}}`` (vLLM's form), or what it sent instead; ``key`` shown as ``***``
    (before the cut, so no part of it is left at the end)."""
    try:
        data = response.json()
    except ValueError:
        data = None
    message: object = None
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message is None:
            message = data.get("detail") or data.get("message")
    if message is None:
        message = response.text.strip() or response.reason_phrase
    text = message if isinstance(message, str) else json.dumps(message)
    return (text.replace(key, "***") if key else text)[:QUOTE_CHARS]
