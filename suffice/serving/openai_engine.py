"""The openai engine: judging through an existing OpenAI-compatible vLLM server.

Why a server at all: a team that already runs vLLM (a GPU box, a shared endpoint)
should not start a second copy of the model in every judging process.  Everything
that makes a verdict valid stays here, on the client: the prompt is fitted and
chat-templated with the model's tokenizer (a local folder, or the server's own
``/tokenize`` route), and each request's constraint is generated segment by segment
like the in-process engine does, every segment continuing the same token sequence
(the prompt ids plus the ids generated so far, sent as a list of token ids).

Three facts about vLLM's server shape this module:

* The constraint goes in the request body as ``"structured_outputs": {"regex": ...}``.
  The older ``guided_regex`` field is accepted with HTTP 200 and silently ignored, and a
  server may run without a structured-output backend at all: output is then
  unconstrained and no verdict could be trusted.  So every segment's text is checked
  against its pattern (Python's ``re``) and the first one outside it stops the run with
  :class:`~suffice.exceptions.ConstraintNotEnforcedError`, naming how to start the
  server so that it enforces the constraint.
* Retries are ours.  The ``openai`` client retries on its own (twice by default), which
  hides failures and multiplies load; here plain ``httpx`` calls are retried on
  connection errors, timeouts, HTTP 429 and 5xx, with a short exponential backoff, and
  then either the server is declared gone (:class:`~suffice.exceptions.EngineDeadError`:
  what was done is kept, a rerun resumes) or the one request fails
  (:class:`~suffice.exceptions.EngineError`: the judge isolates it).  A refused key is
  fatal for every request alike.
* Top log-probabilities come back keyed by token text, so tokens that decode alike
  (the halves of a multi-byte character) are already collapsed by the server; the
  decision values are ASCII, so decision probabilities are unaffected.

Calls are bounded: at most ``max_concurrency`` HTTP calls in flight per engine, shared
by every thread that calls it (``suffice serve`` judges each of its requests on its
own thread).  Requests run on daemon threads, so an interrupted run exits at once
instead of waiting for calls the server may take minutes to answer.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx

from suffice.exceptions import (
    CancelledError,
    ConfigError,
    ConstraintNotEnforcedError,
    EngineDeadError,
    EngineError,
    EngineFatalError,
    EngineUnreachableError,
)
from suffice.grammars.constraint import Segment
from suffice.serving.base import (
    TOKENIZER_LOCK,
    Engine,
    Generation,
    GenerationRequest,
    Message,
    Progress,
    TokenizerMixin,
)
from suffice.serving.engine_config import EngineConfig

#: How often a waiting call checks its cancel event (seconds).
_CANCEL_POLL = 0.5
#: Seconds before the first retry; each further retry waits twice as long (0.5, 1, 2 ...).
BACKOFF_SECONDS = 0.5
#: A server's ``Retry-After`` is honoured up to this many seconds (a longer one waits this long).
MAX_RETRY_AFTER = 30.0
#: Seconds to open a connection (a host that drops packets fails fast, then is retried).
CONNECT_TIMEOUT = 10.0
#: Chat prompts whose token ids are kept (fitting asks for a prompt's length, then
#: generation for its ids: one tokenization, not two round trips).
_PROMPTS_KEPT = 512
#: Successful generations of a failed batch kept for the judge's split retries.
_SALVAGE_KEPT = 4096
#: Characters of a server's error message or of an off-constraint text quoted in errors.
_QUOTE_CHARS = 300
#: Seconds a health check may take, tried twice: it asks whether the server answers,
#: not for a generation (it waited the 300 s generation timeout, with every retry).
HEALTH_TIMEOUT = 10.0
#: Requests refused in a row (the same HTTP status, none answered in between) after which
#: the server is taken to refuse every request (a --tokenizer of another model: every
#: completion was "out of vocabulary"), and the run stops instead of writing an error
#: row for every record.
REFUSED_IN_A_ROW = 32
#: Bytes an answer may have: a completion with top log-probabilities, or a long
#: prompt's ids, is a few MiB at most; a body that goes on is cut here, not read into
#: memory until the process dies.
MAX_ANSWER_BYTES = 64 * 2**20
#: The routes a health check asks (a timeout on any other call asks them).
_HEALTH_ROUTES = ("/health", "/v1/models")
#: What the tokenizer probe compares, local ids against the server's (varied scripts).
_TOKENIZER_PROBE = "suffice: Jane Austen wrote Emma (1815), 東京 — naïve café."

_T = TypeVar("_T")


class ServerError(EngineError):
    """The server refused one call (HTTP 4xx other than 401, 403 and 429): not retried."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class _AnswerTooLarge(Exception):
    """An answer longer than :data:`MAX_ANSWER_BYTES`."""


class _Aborted(Exception):
    """A request given up because another request of its batch hit a fatal error."""


@dataclass
class _Job:
    """One :meth:`OpenAIEngine.generate` call: its requests stop early once it has failed fatally."""

    progress: Progress | None
    aborted: threading.Event = field(default_factory=threading.Event)


class _Workers:
    """A fixed number of daemon threads running submitted calls (a ``ThreadPoolExecutor``
    joins its threads at interpreter exit, so an interrupted run would wait for every
    call in flight)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], _T]) -> Future[_T]:
        future: Future[_T] = Future()
        self._tasks.put((future, fn))
        with self._lock:
            if len(self._threads) < self._size:
                thread = threading.Thread(target=self._loop, name="suffice-openai", daemon=True)
                thread.start()
                self._threads.append(thread)
        return future

    def _loop(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        """Cancel what has not started; each thread ends after its current call."""
        with self._lock:
            while True:
                try:
                    task = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if task is not None:
                    task[0].cancel()
                    # Marks it done for wait(): no worker will pick it up to do so.
                    task[0].set_running_or_notify_cancel()
            for _ in self._threads:
                self._tasks.put(None)
            self._threads.clear()


class _LocalTokenizer(TokenizerMixin):
    """A local Hugging Face tokenizer folder (never a hub download)."""

    def __init__(self, folder: Path) -> None:
        if not folder.is_dir():
            raise ConfigError("tokenizer", str(folder), "is not a folder (give a local Hugging Face tokenizer folder)")
        from suffice.serving.offline import force_offline

        force_offline()
        try:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as exc:
            raise ConfigError("tokenizer", str(folder), f"cannot be loaded: {type(exc).__name__}: {exc}") from exc
        self.eos_ids = _eos_ids(self.tokenizer, folder)

    def decode(self, ids: Sequence[int]) -> str:
        with TOKENIZER_LOCK:
            text: str = self.tokenizer.decode(list(ids), skip_special_tokens=False)  # type: ignore[attr-defined]
        return text


def _eos_ids(tokenizer: Any, folder: Path) -> frozenset[int]:
    """The tokenizer's end-of-sequence id and those of the folder's generation config."""
    ids: set[int] = set()
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        ids.add(int(tokenizer.eos_token_id))
    with contextlib.suppress(OSError, ValueError):
        extra = json.loads((folder / "generation_config.json").read_text()).get("eos_token_id")
        if isinstance(extra, int):
            ids.add(extra)
        elif isinstance(extra, list):
            ids.update(int(i) for i in extra if isinstance(i, int))
    return frozenset(ids)


class OpenAIEngine(Engine):
    """An existing vLLM OpenAI-compatible server, driven through ``/v1/completions``.

    ``transport`` replaces the network (tests pass an ``httpx.MockTransport``).
    """

    def __init__(self, config: EngineConfig, *, transport: httpx.BaseTransport | None = None) -> None:
        if config.base_url is None:
            raise ConfigError("base_url", None, "the openai engine needs the server's address")
        self.config = config
        self.base_url = _root_url(config.base_url)
        self.backend = config.backend_name
        self._retries = config.retries
        self._key_file = config.api_key_file
        headers = {"Authorization": f"Bearer {_read_key(config.api_key_file)}"} if config.api_key_file else {}
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(config.request_timeout, connect=min(CONNECT_TIMEOUT, config.request_timeout)),
            limits=httpx.Limits(max_connections=config.concurrency + 4),
            transport=transport,
        )
        self._workers = _Workers(config.concurrency)
        self._closed = False
        self._patterns: dict[str, re.Pattern[str]] = {}
        self._prompts: OrderedDict[tuple[tuple[tuple[str, str], ...], ...], list[int]] = OrderedDict()
        self._prefixes: dict[str, list[int]] = {}
        self._salvage: OrderedDict[tuple[object, ...], Generation | EngineError] = OrderedDict()
        #: Requests refused in a row with one status: (status, the first one's message, count).
        self._refused: tuple[int, str, int] | None = None
        #: Completions whose connection was cut while the server worked on them.
        self._cuts = 0
        self._pieces: dict[int, str] = {}
        self._lock = threading.Lock()
        self._progress_lock = threading.Lock()
        self._served: dict[str, str] = {}
        try:
            self._local = _LocalTokenizer(config.tokenizer) if config.tokenizer is not None else None
            self.model_id, server_len = self._pick_model(config)
            self._server_max_len = server_len or config.max_model_len or 0
            if not self._server_max_len:
                raise ConfigError(
                    "max_model_len", None, f"the server at {self.base_url} does not say its context window: give it"
                )
            self.max_model_len = min(self._server_max_len, config.max_model_len or self._server_max_len)
            if self._local is None:
                self._probe_tokenizer()
            else:
                self._compare_tokenizer(config.tokenizer)
        except BaseException:
            self.close()
            raise

    @classmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        return {
            "model": config.served_model or "the server's only model",
            "weights": config.base_url or "",
            "engine": config.kind,
            "backend": config.backend_name,
            "max_model_len": "server's own" if config.max_model_len is None else str(config.max_model_len),
        }

    # -- start-up -------------------------------------------------------------------

    def _pick_model(self, config: EngineConfig) -> tuple[str, int | None]:
        """The served model's name and the server's context window for it."""
        try:
            data = self._call("GET", "/v1/models").json()
            models = [m for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        except ServerError as exc:
            raise ConfigError("base_url", self.base_url, f"{exc}: {_NOT_VLLM}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError("base_url", self.base_url, f"/v1/models did not list models: {_NOT_VLLM}") from exc
        names = [str(m["id"]) for m in models]
        if config.served_model is not None:
            if config.served_model not in names:
                raise ConfigError(
                    "served_model",
                    config.served_model,
                    f"the server at {self.base_url} serves {', '.join(names) or 'no model'}",
                )
            chosen = models[names.index(config.served_model)]
        elif len(models) == 1:
            chosen = models[0]
        elif not models:
            raise ConfigError("base_url", self.base_url, "the server lists no model")
        else:
            raise ConfigError(
                "served_model",
                None,
                f"the server at {self.base_url} serves several models ({', '.join(names)}): name one",
            )
        length = chosen.get("max_model_len")
        # vLLM lists the folder or hub name it loaded as ``root``: another model behind the
        # same served name shows there.
        self._served = {"served_model": str(chosen["id"]), "served_root": str(chosen.get("root") or "")}
        return str(chosen["id"]), int(length) if isinstance(length, int) and length > 0 else None

    def served(self) -> dict[str, str]:
        """The model the server answered with at start: its name and what it loaded
        (``root``), so a resume against a server that now serves another model is refused."""
        return dict(self._served)

    def _probe_tokenizer(self) -> None:
        """Fail at start, not per request, when the server has no ``/tokenize`` route."""
        try:
            self._server_encode("suffice")
        except ServerError as exc:
            raise ConfigError(
                "base_url",
                self.base_url,
                f"{exc}: {_NOT_VLLM} (or give a local tokenizer folder with --tokenizer)",
            ) from exc

    def _compare_tokenizer(self, folder: Path | None) -> None:
        """A local tokenizer must give the server's ids: another model's ids reached past
        the server's vocabulary, and every completion was refused.  A server whose
        ``/tokenize`` does not answer (none, refused, a gateway's page) cannot be asked:
        the local tokenizer is trusted, as before this check."""
        assert self._local is not None
        try:
            theirs = self._server_encode(_TOKENIZER_PROBE)
        except EngineUnreachableError:
            raise
        except EngineError:  # no /tokenize here (a gateway with /v1/* only, a refused route)
            return
        ours = self._local.text_ids(_TOKENIZER_PROBE)
        if ours != theirs:
            raise ConfigError(
                "tokenizer",
                str(folder),
                f"does not tokenize as the model the server at {self.base_url} serves ({self.model_id}): "
                f"{ours[:8]}... against the server's {theirs[:8]}...; give that model's tokenizer folder",
            )

    # -- HTTP -------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """One HTTP call, retried where a retry can help; a response with status < 400.

        Raises :class:`EngineDeadError` when a completion's connection was cut while the
        server worked on it and the server is then gone (it may have died of that
        request: the records in flight are suspects, as with a dead in-process engine),
        :class:`EngineUnreachableError` when it is gone otherwise, or answers no health
        check after a request timed out (a wedged server stops the run in one timeout,
        not after every request of every batch has waited its own).
        """
        retries = self._retries if retries is None else retries
        cut = False
        attempt = 0
        while True:
            delay = BACKOFF_SECONDS * 2**attempt
            try:
                # A health check takes no slot: behind requests that hang on a wedged
                # server it would wait as long as they do (the pool keeps it 4 spare).
                with self._slots if path not in _HEALTH_ROUTES else contextlib.nullcontext():
                    response = self._exchange(method, path, body, timeout)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                # Connected but slow (a long queue) is not gone: that request fails, and the
                # judge's check_alive (/health) decides whether the server is.
                reachable = isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout))
                if path == "/v1/completions" and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
                    cut = True
                    with self._lock:
                        self._cuts += 1
                if reachable and path not in _HEALTH_ROUTES:
                    silent = self._unhealthy()
                    if silent is not None:
                        raise EngineUnreachableError(
                            f"the server at {self.base_url} did not answer a request within "
                            f"{self.config.request_timeout:g} s, nor a health check ({silent}): nothing more can "
                            "be judged in this run; what was done is kept, rerun to resume once the server is back"
                        ) from exc
            except httpx.ProxyError as exc:
                # httpx takes a proxy from HTTPS_PROXY/ALL_PROXY (set on many machines for
                # other tools); a proxy that refuses to reach an internal server raised
                # httpx's own ProxyError out of the engine's start, a traceback.
                host = httpx.URL(self.base_url).host
                raise EngineUnreachableError(
                    f"the server at {self.base_url} was asked for through a proxy that refused it ({exc}; the "
                    f"proxy comes from HTTPS_PROXY, HTTP_PROXY or ALL_PROXY): for a server on this network set "
                    f"NO_PROXY={host}, then rerun"
                ) from exc
            except httpx.DecodingError as exc:  # a body that does not decode (a broken gzip)
                failure = f"the answer did not decode: {exc}"
                reachable = True
            except _AnswerTooLarge as exc:
                failure = str(exc)
                reachable = True
            else:
                status = response.status_code
                if 300 <= status < 400:
                    # Not followed (a key must not travel to another host): an http
                    # address behind an https redirect was "did not list models: is this
                    # a vLLM server?", which sent its user looking in the wrong place.
                    where = response.headers.get("Location", "another address")
                    raise ServerError(
                        status,
                        f"HTTP {status} from the server at {self.base_url}{path}: it redirects to {where}; "
                        "give the address it redirects to",
                    )
                if status < 400:
                    return response
                message = _server_message(response)
                if status in (401, 403):
                    where = f" ({self._key_file})" if self._key_file else " (none was given)"
                    raise EngineFatalError(
                        f"the server at {self.base_url} refused the API key (HTTP {status}: {message}): "
                        f"check the server's key file{where} (--api-key-file; --engine-key-file in suffice serve)"
                    )
                if status != 429 and status < 500:
                    raise ServerError(status, f"HTTP {status} from the server at {self.base_url}{path}: {message}")
                failure = f"HTTP {status}: {message}"
                reachable = True
                delay = _retry_after(response) or delay
            if attempt >= retries or self._closed:
                break
            time.sleep(delay)
            attempt += 1
        tries = f"{attempt + 1} {'try' if attempt == 0 else 'tries'}"
        if not reachable and cut:
            raise self._went_away(f"{failure}; {tries}")
        if not reachable:
            raise EngineUnreachableError(
                f"the server at {self.base_url} cannot be reached ({failure}; {tries}): nothing more can be "
                "judged in this run; what was done is kept, rerun to resume once the server is back"
            )
        raise EngineError(f"the server at {self.base_url}{path} failed ({failure}; {tries})")

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None, timeout: float | None) -> httpx.Response:
        """One request and its whole answer, read within the call's timeout and at most
        :data:`MAX_ANSWER_BYTES`.  The client's timeout bounds each read, not the answer:
        a body that trickled on, a byte at a time, held its request (and the batch) past
        ``request_timeout`` for as long as it went on, and one that never ended was read
        into memory until the process died."""
        seconds = self.config.request_timeout if timeout is None else timeout
        request = self._client.build_request(
            method, path, json=body, timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout
        )
        deadline = time.monotonic() + seconds
        response = self._client.send(request, stream=True)
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

    def _outside(self, segment: Segment, piece: str, *, cut_off: bool) -> bool:
        """Whether ``piece`` cannot be the segment's constrained text.  A cut-off text may
        stop inside a match, but no part of a match is longer than the pattern's longest
        match: a server that ignores the constraint usually runs on to max_tokens, and
        that text must stop the run too (read as a cut-off, every record got a final
        error row, never judged again on resume).  A character cut in two decodes to
        U+FFFD, longer than its bytes: not counted."""
        if cut_off:
            return len(piece.rstrip("\ufffd").encode("utf-8")) > segment.max_bytes
        return self._pattern(segment).fullmatch(piece) is None

    def _went_away(self, detail: str) -> EngineDeadError:
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
            self._forget_salvage()
            raise
        except EngineError as exc:
            self._forget_salvage()
            raise EngineUnreachableError(
                f"the server at {self.base_url} reports itself unhealthy ({exc}): nothing more can be judged "
                "in this run; what was done is kept, rerun to resume once the server is back"
            ) from exc

    def _health(self) -> None:
        """``/health`` answered (or ``/v1/models`` where there is none), within
        :data:`HEALTH_TIMEOUT`, tried twice."""
        try:
            self._call("GET", "/health", retries=1, timeout=HEALTH_TIMEOUT)
        except ServerError:  # no /health route (not vLLM's own server): is it answering at all?
            self._call("GET", "/v1/models", retries=1, timeout=HEALTH_TIMEOUT)

    def _unhealthy(self) -> str | None:
        """Why the server fails a health check, or ``None`` if it passes."""
        try:
            self._health()
        except EngineUnreachableError as exc:
            return str(exc)
        except EngineFatalError:
            return None  # a refused key is the next call's to report
        except EngineError as exc:
            return str(exc)
        return None

    # -- tokens -----------------------------------------------------------------------

    def _json(self, response: httpx.Response, route: str) -> Any:
        """The body as JSON; a body that is not (a proxy's HTML page) fails this call,
        retried on resume, never blamed on the record being fitted."""
        try:
            return response.json()
        except ValueError as exc:
            raise EngineError(f"the server at {self.base_url} answered {route} with a body that is not JSON") from exc

    def _server_encode(self, text: str) -> list[int]:
        body = {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        return _ids(self._json(self._call("POST", "/tokenize", body), "/tokenize"), "/tokenize")

    def _server_decode(self, ids: Sequence[int]) -> str:
        answer = self._call("POST", "/detokenize", {"model": self.model_id, "tokens": list(ids)})
        data = self._json(answer, "/detokenize")
        text = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise EngineError(f"the server at {self.base_url} answered /detokenize without a prompt text")
        return text

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if self._local is not None:
            return self._local.count_tokens(texts)
        return [len(self._server_encode(text)) for text in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        if self._local is not None:
            return self._local.truncate(text, max_tokens)
        ids = self._server_encode(text)
        if len(ids) <= max_tokens:
            return text
        # A cut inside a multi-byte character decodes to U+FFFD; drop it.
        return self._server_decode(ids[: max(max_tokens, 0)]).rstrip("\ufffd")

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        return len(self._prompt_ids(messages))

    def _prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The chat-templated prompt's ids, generation prompt included (kept for reuse)."""
        key = tuple(tuple(sorted(m.items())) for m in messages)
        with self._lock:
            cached = self._prompts.get(key)
            if cached is not None:
                self._prompts.move_to_end(key)
                return cached
        if self._local is not None:
            ids = self._local.prompt_ids(messages)
        else:
            body = {"model": self.model_id, "messages": list(messages), "add_generation_prompt": True}
            ids = _ids(self._json(self._call("POST", "/tokenize", body), "/tokenize"), "/tokenize")
        with self._lock:
            self._prompts[key] = ids
            while len(self._prompts) > _PROMPTS_KEPT:
                self._prompts.popitem(last=False)
        return ids

    def _prefix_ids(self, prefix: str) -> list[int]:
        """A segment prefix's token ids (a handful of constant texts: kept)."""
        ids = self._prefixes.get(prefix)
        if ids is None:
            ids = self._encode(prefix)
            with self._lock:
                self._prefixes[prefix] = ids
        return ids

    def _encode(self, text: str) -> list[int]:
        """``text``'s token ids: with the local tokenizer if there is one, else the server's."""
        return self._local.text_ids(text) if self._local is not None else self._server_encode(text)

    def _piece(self, token_id: int) -> str:
        """One token's text with special tokens spelled out (kept: few distinct ids end a segment)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._local.decode([token_id]) if self._local is not None else self._server_decode([token_id])
            self._pieces[token_id] = piece
        return piece

    def _ends_with_stop_token(self, ids: Sequence[int], text: str, finish: str, stop_reason: object) -> bool:
        """Whether the last generated id is the token the server stopped on.

        vLLM keeps the end-of-sequence (or stop) token it stopped on in ``token_ids`` and
        leaves it out of ``text``; a server that drops it ends on a token of the text.
        It must not be fed back into the sequence: the next segment continues the text.
        """
        if finish != "stop" or not ids or isinstance(stop_reason, str):
            return False
        last = ids[-1]
        if isinstance(stop_reason, int) and not isinstance(stop_reason, bool):
            return last == stop_reason
        if self._local is not None and last in self._local.eos_ids:
            return True
        piece = self._piece(last)
        return not piece or not text.endswith(piece)

    # -- generation -------------------------------------------------------------------

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        """Every request's segments, each continuing the same token sequence; requests run
        concurrently (at most ``max_concurrency`` calls in flight for this engine)."""
        if not requests:
            return []
        if self._closed:
            raise EngineFatalError("the openai engine is closed")
        job = _Job(progress)
        cuts_before = self._cuts
        results: list[Generation | None] = [None] * len(requests)
        errors: dict[int, EngineError] = {}
        futures: dict[int, Future[Generation]] = {}
        for index, request in enumerate(requests):
            kept = self._take_salvaged(request)
            if isinstance(kept, EngineError):
                errors[index] = kept  # failed in the batch this one was split from: not sent again
            elif kept is not None:
                results[index] = kept
            else:
                futures[index] = self._workers.submit(partial(self._run, request, job))
        fatal: BaseException | None = None
        pending = set(futures.values())
        while pending:
            done, pending = wait_all(pending, timeout=_CANCEL_POLL, return_when=FIRST_EXCEPTION)
            if (cancel is not None and cancel.is_set()) or self._closed:
                job.aborted.set()  # calls in flight are dropped when they return
                for future in pending:
                    future.cancel()
                if self._closed:
                    raise EngineFatalError("the openai engine was closed while it generated")
                raise CancelledError("the caller withdrew the request")
            if fatal is None:
                fatal = next((f.exception() for f in done if _is_fatal(f.exception())), None)
                if fatal is not None:
                    job.aborted.set()
                    for future in pending:
                        future.cancel()
        failures: list[BaseException] = list(errors.values())
        for index, future in futures.items():
            if future.cancelled():
                continue
            error = future.exception()
            if error is None:
                results[index] = future.result()
            elif isinstance(error, EngineError):
                errors[index] = error
                failures.append(error)
            elif not isinstance(error, _Aborted):
                failures.append(error)
        if fatal is not None:
            self._forget_salvage()
            if isinstance(fatal, EngineUnreachableError) and self._cuts > cuts_before:
                # A request of this call was cut while the server worked on it: the
                # server died with requests in flight, whichever failure came back first.
                raise self._went_away(str(fatal)) from fatal
            raise fatal
        unexpected = next((e for e in failures if not isinstance(e, EngineError)), None)
        if unexpected is not None:
            raise unexpected
        if failures:
            if len(requests) > 1:  # the judge splits it: a batch of one is not asked again
                self._keep_salvaged(requests, results, errors)
            first = failures[0]
            if len(failures) == 1:
                raise first
            raise EngineError(f"{len(failures)} of {len(requests)} requests failed; the first: {first}") from first
        return [r for r in results if r is not None]

    def _salvage_key(self, request: GenerationRequest) -> tuple[object, ...]:
        messages = tuple(tuple(sorted(m.items())) for m in request.messages)
        return (threading.get_ident(), messages, request.constraint.pattern)

    def _keep_salvaged(
        self,
        requests: Sequence[GenerationRequest],
        results: list[Generation | None],
        errors: dict[int, EngineError],
    ) -> None:
        """Keep a failed batch's outcomes: the judge splits the batch and asks again, on
        this thread, until each failure is alone.  Each request here was sent once with
        its own retries already (one HTTP call per request: splitting isolates nothing),
        so neither a success nor a failure is sent again: a request that timed out was
        sent at every level of the split, 20 times for a batch of 16.  Only a batch of
        more than one is kept (the caller keeps nothing of a batch of one, the split's
        last level), so no failure is left behind to fail a later, equal request
        without asking the server."""
        with self._lock:
            for index, request in enumerate(requests):
                outcome = results[index] if results[index] is not None else errors.get(index)
                key = self._salvage_key(request)
                if outcome is None or isinstance(self._salvage.get(key), Generation):
                    continue  # of two equal requests, the one answered is kept
                self._salvage[key] = outcome
            while len(self._salvage) > _SALVAGE_KEPT:
                self._salvage.popitem(last=False)

    def _forget_salvage(self) -> None:
        with self._lock:
            self._salvage.clear()

    def _take_salvaged(self, request: GenerationRequest) -> Generation | EngineError | None:
        if not self._salvage:
            return None
        with self._lock:
            return self._salvage.pop(self._salvage_key(request), None)

    def _run(self, request: GenerationRequest, job: _Job) -> Generation:
        """One request, segment by segment (on a worker thread)."""
        if job.aborted.is_set():
            raise _Aborted
        try:
            generation = self._segments(request, job)
        except ServerError as exc:
            self._count_refused(exc)
            raise
        except (EngineError, _Aborted):
            raise
        except Exception as exc:  # a malformed answer fails this request, not the run
            raise EngineError(f"the server at {self.base_url} answered in an unexpected form: {exc!r}") from exc
        with self._lock:
            self._refused = None
        if job.progress is not None:
            with self._progress_lock:  # callers' progress bars expect one thread at a time
                job.progress(1)
        return generation

    def _count_refused(self, error: ServerError) -> None:
        """Raise :class:`EngineFatalError` once :data:`REFUSED_IN_A_ROW` requests in a row
        were refused with the same status and none answered: the server refuses them all."""
        with self._lock:
            if self._refused is None or self._refused[0] != error.status:
                self._refused = (error.status, str(error), 1)
            else:
                self._refused = (error.status, self._refused[1], self._refused[2] + 1)
            status, first, count = self._refused
        if count < REFUSED_IN_A_ROW:
            return
        raise EngineFatalError(
            f"the server at {self.base_url} refused the last {count} requests in a row (HTTP {status}) and "
            f"answered none in between (the first: {first}): it refuses every request, so nothing more is judged in "
            "this run (a --tokenizer of another model, or a server that cannot take these constraints?); "
            "what was done is kept, rerun to resume once that is fixed"
        )

    def _segments(self, request: GenerationRequest, job: _Job) -> Generation:
        prompt = self._prompt_ids(request.messages)
        generated: list[int] = []
        text = ""
        tokens: list[str] = []
        tops: list[dict[str, float]] = []
        logprobs_ok = self.config.top_logprobs > 0
        completion_tokens = 0
        prefilled = 0  # prefix tokens: prefilled, counted with the prompt
        finish: str | None = None
        segment: Segment | None = request.constraint.first_segment()
        while segment is not None:
            if job.aborted.is_set():
                raise _Aborted
            if self._closed:
                raise EngineFatalError("the openai engine was closed while generating")
            if segment.prefix:
                # Prefilled, not decoded: part of the text, one stand-in token for it.
                prefix_ids = self._prefix_ids(segment.prefix)
                generated.extend(prefix_ids)
                prefilled += len(prefix_ids)
                text += segment.prefix
                tokens.append(segment.prefix)
                tops.append({})
            room = self._server_max_len - len(prompt) - len(generated)
            if room <= 0:
                finish = "length"
                break
            choice = self._complete(prompt + generated, segment, min(segment.max_tokens, room))
            piece = choice["text"]
            finish = choice.get("finish_reason")
            ids = choice.get("token_ids")
            if not isinstance(piece, str):
                raise EngineError(f"the server at {self.base_url} answered without a text")
            if not isinstance(ids, list):
                raise EngineFatalError(
                    f"the server at {self.base_url} returned no token_ids: suffice needs a vLLM server that "
                    "honours return_token_ids (each segment continues the token sequence)"
                )
            completion_tokens += len(ids)
            if finish not in ("stop", "length"):
                raise EngineError(f"the server at {self.base_url} ended the request with finish_reason={finish!r}")
            if self._outside(segment, piece, cut_off=finish == "length"):
                raise ConstraintNotEnforcedError(
                    segment.key,
                    f"the server at {self.base_url} returned text outside the constraint ({segment.key}): "
                    f"{piece[:_QUOTE_CHARS]!r}, so it does not enforce structured outputs: start it with "
                    '--structured-outputs-config \'{"backend": "xgrammar"}\' (or another backend) on a vLLM '
                    "version that reads the request's structured_outputs field",
                )
            kept = len(ids) - self._ends_with_stop_token(ids, piece, finish, choice.get("stop_reason"))
            start_text, start_ids = len(text), len(generated)
            generated.extend(int(i) for i in ids[:kept])
            if not segment.logprobs:
                # One stand-in token for the whole segment: positions stay aligned with the text.
                tokens.append(piece)
                tops.append({})
            elif logprobs_ok:
                mapped = _token_logprobs(choice.get("logprobs"), len(ids))
                if mapped is None:
                    logprobs_ok = False
                else:
                    tokens.extend(mapped[0][:kept])
                    tops.extend(mapped[1][:kept])
            text += piece
            if finish == "length":
                break
            if segment.speculative:
                settled = request.constraint.settled(text, start_text)
                if settled != text:
                    # Cut back: the sequence continues from the kept text, re-encoded.
                    generated[start_ids:] = self._encode(settled[start_text:])
                    tokens[-1] = settled[start_text:]
                    text = settled
            segment = request.constraint.next_segment(text)
        return Generation(
            text=text,
            finish_reason=finish,
            prompt_tokens=len(prompt) + prefilled,
            completion_tokens=completion_tokens,
            tokens=tuple(tokens) if logprobs_ok else None,
            top_logprobs=tuple(tops) if logprobs_ok else None,
        )

    def _complete(self, ids: list[int], segment: Segment, max_tokens: int) -> dict[str, Any]:
        """One segment: the server's only choice."""
        body: dict[str, Any] = {
            "model": self.model_id,
            "prompt": ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": self.config.seed,
            "n": 1,
            "structured_outputs": {"regex": segment.pattern},
            "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if segment.logprobs and self.config.top_logprobs > 0:
            body["logprobs"] = self.config.top_logprobs
        try:
            data = self._call("POST", "/v1/completions", body).json()
        except ServerError as exc:
            if exc.status == 404:  # the route or the model is gone: no request can succeed
                raise EngineFatalError(f"{exc} (did the server restart with another model?)") from exc
            raise
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise EngineError(f"the server at {self.base_url} answered /v1/completions without a choice")
        choice: dict[str, Any] = choices[0]
        return choice

    def _pattern(self, segment: Segment) -> re.Pattern[str]:
        compiled = self._patterns.get(segment.key)
        if compiled is None:
            compiled = re.compile(segment.pattern)
            with self._lock:
                if len(self._patterns) > _SALVAGE_KEPT:
                    self._patterns.clear()
                self._patterns[segment.key] = compiled
        return compiled

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._workers.close()
        self._client.close()


_NOT_VLLM = "is this a vLLM OpenAI-compatible server?"


def _root_url(base_url: str) -> str:
    """The server's root (``/v1`` is added per route; ``/tokenize`` lives at the root)."""
    root = base_url.rstrip("/")
    return root.removesuffix("/v1").rstrip("/")


def _read_key(path: Path | None) -> str:
    """The key, read as UTF-8 without a byte-order mark (an editor's "UTF-8 with BOM"),
    and refused naming ``api_key_file`` unless it is one line of printable ASCII: an
    HTTP header carries nothing else, and such a key raised the HTTP client's own
    ``UnicodeEncodeError`` or ``LocalProtocolError`` out of the engine's start."""
    if path is None:
        return ""
    try:
        key = path.read_text(encoding="utf-8-sig").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("api_key_file", str(path), f"cannot be read: {exc}") from exc
    if not key:
        raise ConfigError("api_key_file", str(path), "is empty")
    if "\n" in key or "\r" in key:
        raise ConfigError("api_key_file", str(path), "holds more than one line (give the key alone)")
    if not all(" " <= c <= "~" for c in key):
        raise ConfigError("api_key_file", str(path), "holds a character an HTTP header cannot carry (not ASCII)")
    return key


def _server_message(response: httpx.Response) -> str:
    """The server's ``{"error": {"message"}}`` (vLLM's form), or what it sent instead."""
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
    return text[:_QUOTE_CHARS]


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds a server asks to wait, at most :data:`MAX_RETRY_AFTER`.  Capped, not
    ignored: a rate limiter that asked for 60 s was retried after the 0.5, 1 and 2 s
    backoff, refused each time, and every request of the run failed within seconds."""
    value = response.headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return min(seconds, MAX_RETRY_AFTER) if seconds is not None and seconds >= 0 else None


def _ids(data: object, route: str) -> list[int]:
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise EngineError(f"the server answered {route} without token ids")
    return tokens


def _is_fatal(error: BaseException | None) -> bool:
    """Whether a request's failure ends the whole call (a dead or unusable server, an interrupt)."""
    return isinstance(error, EngineFatalError) or (error is not None and not isinstance(error, Exception))


def _token_logprobs(logprobs: object, count: int) -> tuple[list[str], list[dict[str, float]]] | None:
    """Token texts and top log-probabilities by text from a completion's ``logprobs``;
    ``None`` unless there is one entry per generated id."""
    if not isinstance(logprobs, dict):
        return None
    tokens, tops = logprobs.get("tokens"), logprobs.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(tops, list) or not len(tokens) == len(tops) == count:
        return None
    out: list[dict[str, float]] = []
    for token, top in zip(tokens, tops, strict=True):
        if not isinstance(token, str) or not isinstance(top, dict):
            return None
        # Keyed by text already (JSON keys are unique): tokens that decode alike were merged
        # by the server, keeping one of them.
        out.append({str(text): float(logprob) for text, logprob in top.items()})
    return list(tokens), out
