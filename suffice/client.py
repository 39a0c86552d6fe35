"""Clients of ``suffice serve`` with the in-process judge's call shape.

``Client(url).judge_batch(records)`` returns what ``Judge.judge_batch(records)`` returns: one
:class:`~suffice.results.JudgeResult` per record, in order, its verdict parsed into the gate's
verdict model (or :class:`~suffice.grammars.decision_verdict.DecisionVerdict` for a decision-only row), a
record's failure as its ``error``.  Both clients are a :class:`~suffice.config.JudgeProtocol`, as
:class:`~suffice.judge.Judge` is: ``judge`` / ``judge_batch`` block, ``ajudge`` / ``ajudge_batch`` are
awaited, all with ``gate=`` and ``options=``.  Code written against a judge runs against a service by
swapping one object.

A 429 or 5xx with ``Retry-After`` is retried after the wait it asks for (at most ``retries`` times,
each wait at most ``max_wait`` s: :class:`~suffice.network.RetryPolicy`); other refusals are typed errors under
:class:`~suffice.exceptions.ServiceError`, except a gate, option or value refused: that is the error the
in-process judge raises for the same mistake (a :class:`~suffice.exceptions.ConfigError` naming the option, a
:class:`~suffice.exceptions.RubricError`), rebuilt from the type the service's answer names, with the
:class:`~suffice.exceptions.InvalidRequestError` as its ``__cause__``.  The proxy settings of the environment
are not read (``trust_env=False``): the key goes to the service named and nowhere else.  The address is checked when
a client is made, by the openai engine's rules (:mod:`suffice.network`): http or https with a host, no
``user:password@`` in it, and no key over plain ``http://`` to another machine unless
``allow_insecure_http=True``.  Each request carries
the caller's current trace as a W3C ``traceparent`` header where OpenTelemetry is installed, so the
service's spans join it (:mod:`suffice.telemetry`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from suffice.config import JudgeConfig
from suffice.exceptions import (
    AuthenticationError,
    ConfigError,
    InputError,
    InvalidRequestError,
    RequestTooLargeError,
    ReviewNotFoundError,
    ServiceError,
    ServiceTimeoutError,
    ServiceUnavailableError,
    SufficeError,
    refused_as,
)
from suffice.gates import Gate, gate_class, gate_names, make_gate
from suffice.gates.decision_mode import VerdictReader
from suffice.gates.registry import check_call
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.network import RetryPolicy, bearer_key, check_url, redact_url, refuse_plain_http
from suffice.records.item import record_id
from suffice.results import (
    MAX_EVENTS,
    MAX_EVENTS_WAIT_S,
    CacheHit,
    Cascade,
    ErrorInfo,
    Judged,
    JudgeResult,
    JudgeStats,
    ResultsStream,
    ReviewEvents,
    ReviewOutcome,
    TokenCounts,
)
from suffice.rows.frames import Results
from suffice.serving.base import Progress
from suffice.serving.progress import progress_of
from suffice.settings import per_request
from suffice.telemetry import outgoing_headers, traced_async_transport, traced_transport

#: The default of ``timeout``: seconds a request may take before :class:`ServiceTimeoutError`.
DEFAULT_TIMEOUT_S = 600.0

_Answer = TypeVar("_Answer", ReviewOutcome, ReviewEvents)
_Read = TypeVar("_Read")
#: A call's gate options, over the client's.
_Options = Mapping[str, Any] | None
#: What an exchange asks its driver for: a request (method, URL, httpx's other arguments), or seconds to wait.
_Step = tuple[str, str, dict[str, Any]] | float


class _Base:
    def __init__(
        self,
        base_url: str,
        config: JudgeConfig | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        gate: str | None = None,
        retries: int = 3,
        max_wait: float = 30.0,
        allow_insecure_http: bool = False,
        judge_settings: Mapping[str, Any] | None = None,
        api_key_source: str | None = None,
    ) -> None:
        # Checked here, not at the first call: a mistyped address is the caller's mistake, not an outage to retry.
        parts = check_url("base_url", base_url, ("http", "https"), "give the service's key as api_key")
        #: Where the key comes from (or would be given), said when the service refuses it.
        self._auth = _KeySource(api_key is not None, api_key_source or "the api_key argument")
        api_key = None if api_key is None else bearer_key(api_key, "api_key", self._auth.source)
        if api_key is not None and not allow_insecure_http:
            refuse_plain_http("base_url", base_url, parts, "the API key and every record", "allow_insecure_http=True")
        self.base_url = base_url.rstrip("/")
        #: The options sent with every call (under the call's own): the config's, as ``Judge.open(config)`` uses them.
        self.options: dict[str, Any] = {}
        if config is not None:
            if not isinstance(config, JudgeConfig):
                raise ConfigError("config", type(config).__name__, "must be a suffice.JudgeConfig")
            if gate is not None and gate != config.gate:
                raise ConfigError("gate", gate, f"differs from the config's gate {config.gate!r}; give one of them")
            gate, self.options = config.gate, dict(config.options)
            # The judge settings a request may carry, where the config sets them; its engine is the service's.
            judge_settings = {**_set_per_request(config), **(judge_settings or {})}
        self.gate = gate or gate_names()[0]
        self.timeout = timeout
        #: The counts over this client's results, as :attr:`Judge.stats` counts a judge's (the same class).
        self.stats = JudgeStats()
        #: Every batch judged, published once: :attr:`stats` observes it; subscribe another observer to count too.
        self.stream = ResultsStream([self.stats])
        #: The service's request limits (most items, largest body), asked once, at the first batch of two or more.
        self._limits: tuple[int, int] | None = None
        #: When a refused call is tried again: a 429 or 5xx that asks to wait at most ``max_wait`` s.
        self.retry = RetryPolicy(retries, max_wait)
        #: Judge settings sent with every call (under its own options), each one a request may set.
        self.judge_settings = _request_settings(judge_settings)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        # What AsyncClient makes its blocking Client with.
        self._made_with: dict[str, Any] = {
            "base_url": base_url,
            "config": None,
            "api_key": api_key,
            "timeout": timeout,
            "gate": gate,
            "retries": retries,
            "max_wait": max_wait,
            "allow_insecure_http": allow_insecure_http,
            "judge_settings": self.judge_settings,
            "api_key_source": api_key_source,
        }
        self._key = api_key
        self._open()

    def _open(self) -> None:
        """Make what the subclass sends with."""
        raise NotImplementedError

    def _call(self, gate: str | None, options: _Options) -> tuple[str, dict[str, Any]]:
        """The gate and options of a call, checked as the in-process judge checks them (a ConfigError naming
        ``gate`` or ``options``); the service checks what they hold."""
        check_call(gate, options)
        return gate or self.gate, {**self.judge_settings, **self.options, **(options or {})}

    def _request(
        self, records: Sequence[object], gate: str | None, options: _Options
    ) -> tuple[str, str, object, dict[str, Any]]:
        """The gate, the URL and the JSON body of one call, and what it sent by name (to rebuild a refusal)."""
        name, values = self._call(gate, options)
        items = list(records)
        body: object = {"items": items, "options": values} if values else items
        return name, f"{self.base_url}/v1/judge/{quote(name, safe='')}", body, {**values, "gate": name}

    def _settings_exchange(self, gate: str | None, options: _Options) -> Generator[_Step, Any, dict[str, str]]:
        """The exchange of ``GET /v1/settings/{gate}``; a refusal is rebuilt from what it sent by name."""
        name, values = self._call(gate, options)
        query = {key: value if isinstance(value, str) else json.dumps(value) for key, value in values.items()}
        read = functools.partial(_settings, sent={**values, "gate": name}, auth=self._auth)
        return self._exchange(read, "GET", f"{self.base_url}/v1/settings/{quote(name, safe='')}", None, params=query)

    def _unsent_results(
        self,
        name: str,
        records: Sequence[object],
        unsent: Mapping[int, InputError],
        judged: list[JudgeResult],
        settings: Mapping[str, str] | None,
    ) -> list[JudgeResult]:
        """``judged`` with the error row of each record in ``unsent`` put back in its place; the model, backend
        and prompt version of those rows are those of a judged row, or of ``settings`` when none was judged."""
        source: Mapping[str, str] = (
            {"model": judged[0].model, "backend": judged[0].backend, "prompt_version": judged[0].prompt_version}
            if judged
            else settings or {}
        )
        rows = iter(judged)
        results = []
        for index, record in enumerate(records):
            error = unsent.get(index)
            if error is None:
                results.append(next(rows))
                continue
            results.append(
                JudgeResult(
                    id=record_id(record),
                    gate=name,
                    error=ErrorInfo.from_exception(error),
                    model=source.get("model", ""),
                    backend=source.get("backend", ""),
                    prompt_version=source.get("prompt_version", ""),
                )
            )
        return results

    def _batch(
        self,
        records: Sequence[object],
        gate: str | None,
        options: _Options,
        progress: Progress | bool | None,
        timeout: float | None,
    ) -> Generator[_Step, Any, Results]:
        """A batch's exchanges (see :meth:`_exchange`): one logic for the blocking client and the awaited one, which
        only wait differently.  ``progress``: as ``judge_batch`` takes it."""
        with progress_of(progress, len(records)) as bar:
            # A mistaken call is refused as the in-process judge refuses it, before any request.
            check_call(gate, options)
            began = time.perf_counter()
            if len(records) > 1 and self._limits is None:
                url = f"{self.base_url}/v1/settings/{quote(gate or self.gate, safe='')}"
                self._limits = yield from self._exchange(_limits, "GET", url, timeout)
            unsent, parts = self._plan(records, options)
            judged: list[JudgeResult] = []
            for part in parts:
                name, url, body, sent = self._request([records[i] for i in part], gate, options)
                read = functools.partial(_results, gate=name, count=len(part), sent=sent, auth=self._auth)
                judged += yield from self._exchange(read, "POST", url, timeout, json=body)
                if bar is not None:
                    bar(len(part))
            if unsent and bar is not None:
                bar.skipped(len(unsent))
            results = judged
            if unsent:
                settings = None if judged else (yield from self._settings_exchange(gate, options))
                results = self._unsent_results(gate or self.gate, records, unsent, judged, settings)
            return self._publish(records, results, began, gate, options)

    def _exchange(
        self, read: Callable[[httpx.Response], _Read], method: str, url: str, timeout: float | None, **request: Any
    ) -> Generator[_Step, Any, _Read]:
        """One request, tried again as :attr:`retry` says: it yields the request for the driver (:meth:`_run`,
        :meth:`_arun`) to send, sent back the response or the ``httpx.TransportError``, and each wait to sleep; it
        returns the answer as ``read`` takes it (a typed error but 200)."""
        attempt = 0
        while True:
            response = yield (method, url, {"headers": outgoing_headers(), "timeout": _per_call(timeout), **request})
            if isinstance(response, httpx.TransportError):
                raise self._unanswered(response, timeout) from response
            wait = self.retry.wait(attempt, response.status_code, response.headers.get("retry-after"))
            if wait is None:
                return read(response)
            yield wait
            attempt += 1

    def _run(self, steps: Generator[_Step, Any, _Read]) -> _Read:
        """The answer of ``steps``, each request sent and each wait slept, blocking."""
        raise NotImplementedError

    async def _arun(self, steps: Generator[_Step, Any, _Read]) -> _Read:
        """:meth:`_run`, awaited."""
        raise NotImplementedError

    def _plan(self, records: Sequence[object], options: _Options) -> tuple[dict[int, InputError], list[list[int]]]:
        """The records no request can carry (by index, each its error row's :class:`InputError`) and the others in
        requests within the service's limits, in order: at most ``max_items`` each, and bodies under
        ``max_body_bytes`` (a record larger than that alone is an error row, not a refused batch)."""
        unsent = _unsendable(records)
        max_items, max_bytes = self._limits or (len(records) or 1, 0)
        budget = max_bytes - len(json.dumps({**self.judge_settings, **self.options, **(options or {})})) - 64
        parts: list[list[int]] = []
        size = 0
        for index, record in enumerate(records):
            if index in unsent:
                continue
            length = len(json.dumps(record).encode()) + 1 if max_bytes else 0
            if max_bytes and length > budget:
                unsent[index] = InputError(
                    "record", f"is {length} bytes as JSON: the service takes at most {max_bytes} per request"
                )
                continue
            if not parts or len(parts[-1]) >= max_items or (max_bytes and size + length > budget):
                parts.append([])
                size = 0
            parts[-1].append(index)
            size += length
        return unsent, parts

    def _publish(
        self,
        records: Sequence[object],
        results: list[JudgeResult],
        began: float,
        gate: str | None,
        options: _Options,
    ) -> Results:
        """Publish a judged batch to :attr:`stream` and return it as :class:`~suffice.rows.frames.Results`, with the
        gate that routes its verdicts where it can be built here (one reading a rubric only the service holds cannot:
        its routes are then not counted)."""
        try:
            reader: Gate | None = self.gate_for(gate, options)
        except SufficeError:
            reader = None
        self.stream.publish(Judged(records, results, time.perf_counter() - began, reader, gate or self.gate))
        return Results(results, reader)

    def gate_for(self, gate: str | None = None, options: _Options = None) -> Gate:
        """The gate that reads the service's verdicts for ``gate`` with ``options`` (its decision, route and
        useful chunks), built here: an option the gate does not take is a
        :class:`~suffice.exceptions.ConfigError` naming it, before any request.  It reads a verdict of any
        detail the service judges at (a decision-only verdict routes as the service routes it, never by the full
        gate's rule, which would need the full verdict)."""
        return VerdictReader(make_gate(gate or self.gate, {**self.options, **(options or {})}))

    def _outcome(self, review_id: int) -> Generator[_Step, Any, ReviewOutcome]:
        """The exchange of ``GET /v1/reviews/{review_id}/outcome``; a :class:`ConfigError` for an id that is no id."""
        if isinstance(review_id, bool) or not isinstance(review_id, int) or review_id < 1:
            raise ConfigError("review_id", review_id, "must be a review's number (a whole number from 1)")
        read = functools.partial(_reviewed, model=ReviewOutcome, auth=self._auth)
        return self._exchange(read, "GET", f"{self.base_url}/v1/reviews/{review_id}/outcome", None)

    def _events(self, since: int, wait: float, limit: int | None) -> Generator[_Step, Any, ReviewEvents]:
        """The exchange of ``GET /v1/reviews/events``, its timeout the wait on top of the client's, since the
        service holds the answer that long when nothing is decided.  Values the route refuses are a
        :class:`ConfigError` naming them, before any request."""
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ConfigError("since", since, "must be the `next` of an earlier answer (a whole number from 0)")
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_EVENTS_WAIT_S:
            raise ConfigError("wait", wait, f"must be between 0 and {MAX_EVENTS_WAIT_S:g} seconds")
        query: dict[str, Any] = {"since": since, "wait": wait}
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_EVENTS:
                raise ConfigError("limit", limit, f"must be a whole number from 1 to {MAX_EVENTS}")
            query["limit"] = limit
        read = functools.partial(_reviewed, model=ReviewEvents, auth=self._auth)
        return self._exchange(read, "GET", f"{self.base_url}/v1/reviews/events", self.timeout + wait, params=query)

    def _unanswered(self, exc: httpx.TransportError, timeout: float | None = None) -> ServiceError:
        """The typed error for a request the service did not answer (a timeout is an ``httpx.TransportError``); the
        key, should the transport's words quote it, is not said."""
        said = str(exc) if not self._key else str(exc).replace(self._key, "***")
        if isinstance(exc, httpx.TimeoutException):
            return ServiceTimeoutError(f"no answer within {self.timeout if timeout is None else timeout:g} s: {said}")
        return ServiceUnavailableError(f"cannot reach {redact_url(self.base_url)}: {said}")

    def judge_batch(
        self,
        records: Sequence[object],
        *,
        gate: str | None = None,
        options: _Options = None,
        progress: Progress | bool | None = None,
        timeout: float | None = None,
    ) -> Results:
        """One result per record, in order, as ``Judge.judge_batch`` returns them, however many: they are sent in
        requests within the service's limits, one after another; ``options``: the gate's per-request options;
        ``progress``: ``True`` draws one bar on stderr for them all, or a :class:`~suffice.serving.base.Progress`;
        ``timeout``: seconds each request may take (default: the client's).  Raises a
        :class:`~suffice.exceptions.ServiceError` for a refused request, and for a gate or option refused the error
        ``Judge.judge_batch`` raises (a :class:`~suffice.exceptions.ConfigError` naming it).  Blocking, in an
        :class:`AsyncClient` too (on a connection of its own, made at the first such call)."""
        return self._run(self._batch(records, gate, options, progress, timeout))

    def judge(
        self, record: object, *, gate: str | None = None, options: _Options = None, timeout: float | None = None
    ) -> JudgeResult:
        """One record's result (see :meth:`judge_batch`)."""
        return self.judge_batch([record], gate=gate, options=options, timeout=timeout)[0]

    async def ajudge_batch(
        self,
        records: Sequence[object],
        *,
        progress: Progress | bool | None = None,
        gate: str | None = None,
        options: _Options = None,
        timeout: float | None = None,
    ) -> Results:
        """:meth:`judge_batch`, awaited: a :class:`Client` on a worker thread, an :class:`AsyncClient` natively
        (cancelling its task also ends the request)."""
        return await self._arun(self._batch(records, gate, options, progress, timeout))

    async def ajudge(
        self, record: object, *, gate: str | None = None, options: _Options = None, timeout: float | None = None
    ) -> JudgeResult:
        """One record's result, awaited (see :meth:`ajudge_batch`)."""
        return (await self.ajudge_batch([record], gate=gate, options=options, timeout=timeout))[0]

    def settings_for(self, gate: str | None = None, options: _Options = None) -> dict[str, str]:
        """What decides the rows the service gives for ``gate`` with ``options`` (``GET /v1/settings/{gate}``):
        the values ``suffice judge`` records beside an output, which ``suffice judge --server`` compares before it
        extends one.  Raises a :class:`~suffice.exceptions.ServiceError` as :meth:`judge_batch` does.  Blocking, under
        the name every :class:`~suffice.config.JudgeProtocol` gives it."""
        return self._run(self._settings_exchange(gate, options))

    def review_outcome(self, review_id: int) -> ReviewOutcome:
        """What a person decided on review ``review_id`` of the service's queue (``GET /v1/reviews/{id}/outcome``,
        with the client's key): pending (``decided`` false) or the decision, who made it, the approved answer or the
        reviewers' queries, and the record as queued.  An unknown id raises
        :class:`~suffice.exceptions.ReviewNotFoundError` (as the audit log in process does), other refusals a
        :class:`~suffice.exceptions.ServiceError`."""
        return self._run(self._outcome(review_id))

    def review_events(self, since: int = 0, wait: float = 0.0, limit: int | None = None) -> ReviewEvents:
        """The reviews decided after cursor ``since`` (``GET /v1/reviews/events``), oldest first: pass the answer's
        ``next`` as ``since`` to follow them.  ``wait``: seconds (at most
        :data:`~suffice.results.MAX_EVENTS_WAIT_S`) the service holds the call when none is decided yet;
        ``limit``: the most events (default and at most :data:`~suffice.results.MAX_EVENTS`)."""
        return self._run(self._events(since, wait, limit))

    async def areview_outcome(self, review_id: int) -> ReviewOutcome:
        """:meth:`review_outcome`, awaited."""
        return await self._arun(self._outcome(review_id))

    async def areview_events(self, since: int = 0, wait: float = 0.0, limit: int | None = None) -> ReviewEvents:
        """:meth:`review_events`, awaited: in an :class:`AsyncClient`, cancelling the task ends the long poll."""
        return await self._arun(self._events(since, wait, limit))


class Client(_Base, AbstractContextManager["Client"]):
    """A blocking client of ``suffice serve`` with the call shape of :class:`~suffice.judge.Judge`:
    ``judge_batch(records)`` and ``judge(record)``.  ``gate``: the default gate (the default of
    ``suffice.gate_names()``); ``timeout``: seconds per request; ``retries`` / ``max_wait``: how often
    and how long a 429 or 5xx with ``Retry-After`` is waited on; ``allow_insecure_http``: send ``api_key``
    over plain ``http://`` to another machine (refused otherwise, as a bad address is: a
    :class:`~suffice.exceptions.ConfigError` naming ``base_url``, raised here); ``judge_settings``: judge settings
    sent with every call, as its options are (``{"auto_margin": 0.3}``; one a request cannot set is a
    :class:`~suffice.exceptions.ConfigError` naming it, raised here).  Its awaited calls run on a worker thread."""

    def _open(self) -> None:
        transport = traced_transport(httpx.HTTPTransport())  # a CLIENT span per call
        self._http = httpx.Client(timeout=self.timeout, trust_env=False, headers=self._headers, transport=transport)

    def _run(self, steps: Generator[_Step, Any, _Read]) -> _Read:
        try:
            step = steps.send(None)
            while True:
                step = steps.send(self._send(step))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _send(self, step: _Step) -> object:
        """What a step of :meth:`_Base._exchange` is sent back."""
        if not isinstance(step, tuple):
            time.sleep(step)
            return None
        try:
            return self._http.request(step[0], step[1], **step[2])
        except httpx.TransportError as exc:
            return exc

    async def _arun(self, steps: Generator[_Step, Any, _Read]) -> _Read:
        return await asyncio.to_thread(self._run, steps)

    def settings(self, gate: str | None = None, options: _Options = None) -> dict[str, str]:
        """:meth:`settings_for`."""
        return self.settings_for(gate, options)

    def close(self) -> None:
        self._http.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(_Base):
    """:class:`Client` for asyncio: ``await client.ajudge_batch(records)``, ``await client.ajudge(record)``;
    cancelling the awaiting task closes its connection, and the service stops that request's generation.
    One client serves any number of event loops, one after another (each ``asyncio.run``) or at once (a loop per
    thread): each loop sends on connections of its own, opened at its first call and closed when the loop shuts
    down (its async generators closed, as ``asyncio.run`` does) or at ``aclose()`` in it.
    ``judge`` / ``judge_batch`` / ``settings_for`` block, as on every :class:`~suffice.config.JudgeProtocol`
    (on a connection of their own, made at the first such call), so an AsyncClient serves sync code too."""

    #: The blocking client whose connection the sync calls send on, made at the first such call.
    _blocking_client: Client | None = None

    def _open(self) -> None:
        #: Each event loop's connections, and what closes them when the loop shuts down: an asyncio connection
        #: belongs to the loop that opened it, and a closed loop's cannot be used (nor awaited closed) in another.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopHttp] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    async def _http(self) -> httpx.AsyncClient:
        """The HTTP client of the running event loop, opened at its first call."""
        loop = asyncio.get_running_loop()
        with self._lock:
            bound = self._loops.get(loop)
            if bound is None:
                for ended in [other for other in self._loops if other.is_closed()]:
                    del self._loops[ended]  # shut down (its connections closed then) or closed without: unusable
                transport = traced_async_transport(httpx.AsyncHTTPTransport())
                http = httpx.AsyncClient(
                    timeout=self.timeout, trust_env=False, headers=self._headers, transport=transport
                )
                bound = self._loops[loop] = _LoopHttp(http)
        await bound.watch()
        return bound.http

    def _blocking(self) -> Client:
        """The blocking client of the sync calls: an asyncio connection belongs to the loop that opened it."""
        if self._blocking_client is None:
            self._blocking_client = Client(**self._made_with)
        return self._blocking_client

    def _run(self, steps: Generator[_Step, Any, _Read]) -> _Read:
        return self._blocking()._run(steps)

    async def _arun(self, steps: Generator[_Step, Any, _Read]) -> _Read:
        http = await self._http()
        sent: object = None
        while True:
            try:
                step = steps.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                sent = await (http.request(*step[:2], **step[2]) if isinstance(step, tuple) else asyncio.sleep(step))
            except httpx.TransportError as exc:
                sent = exc

    async def settings(self, gate: str | None = None, options: _Options = None) -> dict[str, str]:
        """What decides the rows the service gives for ``gate`` with ``options`` (see :meth:`settings_for`)."""
        return await self._arun(self._settings_exchange(gate, options))

    async def aclose(self) -> None:
        """Close the running loop's connections and the blocking calls' (another loop's close when it shuts down)."""
        if self._blocking_client is not None:
            self._blocking_client.close()
        with self._lock:
            bound = self._loops.pop(asyncio.get_running_loop(), None)
        if bound is not None:
            await bound.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _request_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``judge_settings`` checked: each a judge setting a request may set (declared ``per_request``: ``suffice schema
    --request``), within its bounds; any other is a :class:`~suffice.exceptions.ConfigError` naming it, since the
    service would judge without it."""
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise ConfigError(
            "judge_settings", type(settings).__name__, "must be a mapping of judge setting names to values"
        )
    allowed = {d.name: d for d in per_request(JudgeConfig)}
    checked = {}
    for name, value in settings.items():
        setting = allowed.get(name)
        if setting is None:
            raise ConfigError(
                str(name),
                value,
                f"cannot be set per request (those that can: {', '.join(allowed)}); the service decides it: set it "
                "where `suffice serve` starts",
            )
        checked[name] = setting.checked(value)
    return checked


class _KeySource(NamedTuple):
    """Whether a key is sent, and where it comes from (or, when none is, where one would be given): a flag, a
    variable, a file, or the ``api_key`` argument."""

    sent: bool
    source: str

    def refused(self) -> str:
        """What a 401 says the caller can do."""
        if not self.sent:
            return f"no key was sent, and the service wants one: give its key with {self.source}"
        return (
            f"the service refused the key from {self.source}: give the key the service reads (suffice serve "
            "--api-key-file)"
        )


class _LoopHttp:
    """One event loop's HTTP client, closed when that loop shuts down: an async generator started in the loop,
    whose ``finally`` closes it, is one the loop closes at its shutdown (``loop.shutdown_asyncgens()``, which
    ``asyncio.run`` calls), so no connection outlives its loop unclosed."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self._closer: AsyncGenerator[None, None] | None = None

    async def watch(self) -> None:
        """Start the closer in the running loop (once)."""
        if self._closer is None:
            self._closer = self._close_at_shutdown()
            await self._closer.__anext__()

    async def _close_at_shutdown(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await self.http.aclose()

    async def close(self) -> None:
        if self._closer is not None:
            await self._closer.aclose()  # runs its finally: the client is closed
        else:
            await self.http.aclose()


def _per_call(timeout: float | None) -> Any:
    """The ``timeout`` argument of one request: the client's own unless the call gives one."""
    return httpx.USE_CLIENT_DEFAULT if timeout is None else timeout


def _set_per_request(config: JudgeConfig) -> dict[str, Any]:
    """The judge settings of ``config`` a request may carry that it sets to other than their defaults."""
    return {
        d.name: getattr(config, d.name) for d in per_request(JudgeConfig) if not d.is_default(getattr(config, d.name))
    }


def _limits(response: httpx.Response) -> tuple[int, int] | None:
    """The service's request limits from a ``GET /v1/settings/{gate}`` answer: most items, largest body in bytes.
    ``None`` for a refusal (not kept: the next batch asks again); the judge request then raises its typed error."""
    if response.status_code != 200:
        return None
    body = response.json()
    return int(body["max_items"]), int(body["max_body_bytes"])


def _settings(response: httpx.Response, sent: Mapping[str, Any], auth: _KeySource) -> dict[str, str]:
    """The values of a ``GET /v1/settings/{gate}`` answer; a typed error for any status but 200."""
    if response.status_code != 200:
        raise _refusal(response, sent, auth)
    values = response.json()["settings"]
    return {str(key): str(value) for key, value in values.items()}


def _reviewed(response: httpx.Response, model: type[_Answer], auth: _KeySource) -> _Answer:
    """A review route's 200 as ``model``; a 404 the :class:`ReviewNotFoundError` the audit log raises in process
    (its cause the :class:`InvalidRequestError`), another status its typed error."""
    if response.status_code == 200:
        return model.model_validate(response.json())
    refusal = _refusal(response, {}, auth)
    if response.status_code == 404 and _named(response) == ReviewNotFoundError.__name__:
        # Not a 404 of a service without the route (no --audit-db, an older suffice): that stays a ServiceError.
        raise ReviewNotFoundError(str(getattr(refusal, "detail", refusal))) from refusal
    raise refusal


def _named(response: httpx.Response) -> object:
    """The error type a refusal's body names (``error``), or ``None``."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None


def _unsendable(records: Sequence[object]) -> dict[int, InputError]:
    """The records JSON cannot carry, by index, each as the :class:`InputError` naming its first such field."""
    found = {}
    for index, record in enumerate(records):
        try:
            json.dumps(record)
        except (TypeError, ValueError):
            found[index] = _json_error(record)
    return found


def _json_error(record: object) -> InputError:
    """The error of a record JSON cannot carry, naming the top-level field that holds the value."""
    if isinstance(record, Mapping):
        for key, value in record.items():
            try:
                json.dumps({key: value})
            except (TypeError, ValueError) as exc:
                return InputError(str(key), f"cannot be sent to the service as JSON: {exc}")
    try:
        json.dumps(record)
    except (TypeError, ValueError) as exc:
        return InputError("record", f"cannot be sent to the service as JSON: {exc}")
    return InputError("record", "cannot be sent to the service as JSON")


def _detail(response: httpx.Response, sent: Mapping[str, Any]) -> tuple[str, str | None, SufficeError | None]:
    """The service's message, the field it names (for a 422, the last part of ``loc``) and the error a judge in
    process raises for the same mistake, where the body names its type (``error``)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase, None, None
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        loc = [str(part) for part in detail[0].get("loc", ()) if isinstance(part, str)]
        field = loc[-1] if loc else None
        where = ".".join(loc)
        message = str(detail[0].get("msg", ""))
        typed = refused_as(detail[0].get("error"), field, message, sent.get(field)) if field else None
        return f"{where}: {message}" if where else message, field, typed
    field = body.get("field") if isinstance(body, dict) else None
    if not isinstance(field, str):
        return str(detail), None, None
    return str(detail), field, refused_as(body.get("error"), field, str(detail), sent.get(field))


def _results(
    response: httpx.Response, gate: str, count: int, sent: Mapping[str, Any], auth: _KeySource
) -> list[JudgeResult]:
    """The results of a 200; a typed error for any other status."""
    status = response.status_code
    if status == 200:
        rows = response.json()["results"]
        if len(rows) != count:
            raise ServiceError(f"{len(rows)} results for {count} records", status)
        return [_result(row, gate) for row in rows]
    raise _refusal(response, sent, auth)


def _refusal(response: httpx.Response, sent: Mapping[str, Any], auth: _KeySource) -> SufficeError:
    """The typed error of a request the service did not answer with 200, once the retries are spent.
    A gate, option or field refused is the error the in-process judge raises for it (a ConfigError naming the
    option, ...), its cause the :class:`InvalidRequestError` with the HTTP status; ``sent``: the call's gate
    and options by name; ``auth``: where the key came from, said with a 401."""
    status = response.status_code
    detail, field, typed = _detail(response, sent)
    if status in (429, 503):
        return ServiceUnavailableError(detail, status)
    if status == 401:
        return AuthenticationError(f"{detail}: {auth.refused()}", status)
    if status == 413:
        return RequestTooLargeError(detail, status)
    if status in (404, 415, 422):
        invalid = InvalidRequestError(detail, status, field)
        if typed is None:
            return invalid
        typed.__cause__ = invalid
        return typed
    if status == 504:
        return ServiceTimeoutError(detail, status)
    return ServiceError(detail, status)


def _result(row: Mapping[str, Any], gate: str) -> JudgeResult:
    """One response row as the :class:`JudgeResult` the in-process judge returns (without ``raw_text``)."""
    verdict = row.get("verdict")
    error = row.get("error")
    return JudgeResult(
        id=row.get("id"),
        gate=row.get("gate", gate),
        verdict=_verdict(verdict, row.get("gate", gate)) if verdict is not None else None,
        error=ErrorInfo.model_validate(error) if error is not None else None,
        model=row["model"],
        backend=row["backend"],
        prompt_version=row["prompt_version"],
        tokens=TokenCounts.model_validate(row.get("tokens", {})),
        retries=row.get("retries", 0),
        # A hit's mark and the cascade's answer, as the in-process judge gives them: a caller tells a cached or
        # decision-only verdict from a fresh full one the same way through either.
        cached=CacheHit.model_validate(row["cached"]) if row.get("cached") is not None else None,
        cascade=Cascade.model_validate(row["cascade"]) if row.get("cascade") is not None else None,
    )


def _verdict(value: Mapping[str, Any], gate: str) -> BaseModel:
    """The verdict in the gate's verdict model, or a decision-only verdict."""
    model = gate_class(gate).verdict_model
    if value.get("detail") == "decision":
        return DecisionVerdict.model_validate(value)
    try:
        return model.model_validate(value)
    except ValidationError:
        return DecisionVerdict.model_validate(value)
