"""The judging behind the HTTP routes: one engine, a judge per gate variant, the audit log.

The gates differ in prompt and constraint, not weights, so one engine serves all of them in one running batch.
A judge is built per gate and per rubric or threshold preset, and kept.  Everything here is thread-safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from suffice.audit import AuditLog
from suffice.audit.recording import audit_values, record_results, review_rule, weights_hash
from suffice.config import JudgeConfig
from suffice.exceptions import CancelledError, ConfigError, InputError
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT, verdict_format, verdict_format_names
from suffice.gates import Gate
from suffice.judge import Judge
from suffice.records.fields import FieldMap
from suffice.records.item import Item
from suffice.results import Judged, JudgeResult, ResultsStream
from suffice.rows.shaping import result_row
from suffice.server.config import ServeConfig, options_for
from suffice.server.contract import settable
from suffice.serving.base import Engine
from suffice.serving.factory import engine_settings, make_engine
from suffice.serving.weights import embedded_notice
from suffice.settings import per_request
from suffice.telemetry import engine_start

logger = logging.getLogger(__name__)

#: No renamed fields: strings as chunks and RAGAS names, as in ``suffice judge``.
_READ_AS_JUDGE = FieldMap()


def check_served(config: ServeConfig) -> None:
    """Every served gate builds with its options (checked before the engine starts)."""
    for gate in config.gates:
        judge_config(config, gate, {}).make_gate()


def judge_config(config: ServeConfig, gate: str, request: Mapping[str, Any]) -> JudgeConfig:
    """The config of ``gate``'s judge: the served options it declares, then the request's; a judge setting the
    request may set (declared ``per_request``) is read as its declaration says (a query parameter is text)."""
    settings = {d.name: d for d in per_request(type(config.judge))}
    chosen = {key: settings[key].parsed(value) for key, value in request.items() if key in settings}
    options = {key: value for key, value in request.items() if key not in settings}
    return dataclasses.replace(config.judge, gate=gate, options={**options_for(config, gate), **options}, **chosen)


class RequestError(InputError):
    """A request parameter the service refuses (names the parameter; answered 422).  Its cause, where it has one,
    is the error a judge in process raises for the same mistake: the 422 names its type, and a client raises it."""


#: An absolute path (POSIX, or Windows with a drive), up to a space, quote, comma or semicolon.
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:[\\/]|/)[^\s'\",;]*")


def without_paths(message: str) -> str:
    """``message`` with every absolute path cut to its last part: clients are not told the server's folders."""

    def last_part(match: re.Match[str]) -> str:
        parts = [part for part in re.split(r"[\\/]", match.group(0)) if part]
        return parts[-1] if parts else ""

    return _PATH.sub(last_part, message)


def _shown(result: JudgeResult) -> JudgeResult:
    """``result`` as a client sees it: an error row's message without the server's folders, whether the record
    named a rubric itself or a request option did (the audit log keeps the full message)."""
    error = result.error
    if error is None or without_paths(error.message) == error.message:
        return result
    return result.model_copy(update={"error": error.model_copy(update={"message": without_paths(error.message)})})


@dataclass(frozen=True)
class Options:
    """Per-request choices: the gate's own options a request may set, and the output format."""

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fmt: str = DEFAULT_VERDICT_FORMAT


@dataclass
class Outcome:
    request_id: str
    rows: list[dict[str, Any]]
    results: list[JudgeResult]
    seconds: float


class _AuditWriter:
    """The audit log on one thread of its own (SQLite); rows are written before the response is sent."""

    def __init__(self, config: ServeConfig) -> None:
        assert config.audit_db is not None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="suffice-audit")
        self._log: AuditLog = self._pool.submit(AuditLog, config.audit_db, config.audit_key).result()
        # A wrong key or a damaged head fails at start-up, not as a 503 on every request.
        self._pool.submit(self._log.check_writable).result()

    def record(
        self,
        rows: list[dict[str, Any]],
        results: Sequence[JudgeResult],
        items: Sequence[Item | None],
        run_id: str,
        gate: Gate | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the rows, and queue a review for each record sent to a person (its route, or two failed
        generations); raises :class:`AuditError` when they cannot be written: the request is not answered."""
        self._pool.submit(record_results, self._log, rows, results, items, run_id, gate, settings).result()

    def close(self) -> None:
        self._pool.submit(self._log.close).result()
        self._pool.shutdown()


class GateService:
    """Build with :meth:`open` (starts the engine), then :meth:`judge` from any thread."""

    def __init__(self, config: ServeConfig, engine: Engine, audit: _AuditWriter | None = None) -> None:
        """``audit``: the audit log :meth:`open` opened (``None``: opened here if ``config.audit_db`` is set)."""
        self.config = config
        self.engine = engine
        #: Each gate's own judge (no per-request options), built at start-up and kept.
        self._defaults: dict[str, Judge] = {}
        #: Judges for per-request options, least recently used first; at most ``judge_cache_size``,
        #: since every distinct value (a threshold of 0.50001) would otherwise keep one for ever.
        self._judges: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], Judge] = OrderedDict()
        self._lock = threading.Lock()
        self._audit: _AuditWriter | None = audit
        self._weights = weights_hash(getattr(engine, "model_path", None))
        #: What the engine records beside a batch output (read once, on the first :meth:`settings`).
        self._engine_settings: dict[str, str] | None = None
        #: Why the engine can no longer judge (``None`` while it can).
        self.dead: str | None = None
        #: Records routed to a person with no audit log to queue them (said in the log, and again at close).
        self.unqueued_reviews = 0
        #: Each request's results, published once they are to be answered (the audit log holds them): what
        #: ``/metrics`` counts (:class:`~suffice.server.metrics.Metrics` observes it), so it counts what clients get.
        self.results = ResultsStream()
        for gate in config.gates:  # a bad default option fails at start-up
            self._defaults[gate] = self._build(gate, Options())
        if config.audit_db is not None and self._audit is None:
            self._audit = _AuditWriter(config)
        #: What the service says of its model where it is the embedded one (``/v1/settings``, the log at start).
        self.notice = embedded_notice(getattr(engine, "model_id", None))
        if self.notice is not None:
            logger.warning("suffice serve: %s", self.notice)

    @classmethod
    def open(cls, config: ServeConfig) -> GateService:
        check_served(config)  # before the engine starts: a bad option fails in a second
        with contextlib.ExitStack() as undo:  # what is open is closed if the start fails
            # Before the engine too: a wrong key or a bad log fails before a model loads.
            audit = _AuditWriter(config) if config.audit_db is not None else None
            if audit is not None:
                undo.callback(audit.close)
            with engine_start():  # its own spans stay out of the traces of the requests it serves
                engine = make_engine(config.judge.engine)
            undo.callback(engine.close)
            service = cls(config, engine, audit)
            undo.pop_all()
        return service

    def judge_for(self, gate: str, options: Options) -> Judge:
        """The judge for ``gate`` with the request's options (kept among the last ``judge_cache_size`` built)."""
        if not options.values:
            return self._defaults[gate]
        key = self._key(gate, options)
        with self._lock:
            judge = self._judges.get(key)
            if judge is not None:
                self._judges.move_to_end(key)
                return judge
            judge = self._build(gate, options)
            self._judges[key] = judge
            while len(self._judges) > self.config.judge_cache_size:
                self._judges.popitem(last=False)
        return judge

    def _key(self, gate: str, options: Options) -> tuple[str, tuple[tuple[str, str], ...]]:
        allowed = settable(gate, type(self.config.judge))
        for name in options.values:
            if name not in allowed:
                named = ", ".join(allowed) or "none"
                message = f"the {gate} gate takes no option {name!r} per request (settable: {named})"
                # Its cause names the error a judge in process raises for an option it refuses, for the 422 to name.
                raise RequestError(name, message) from ConfigError(name, options.values[name], message)
        return (gate, tuple(sorted((k, repr(v)) for k, v in options.values.items())))

    def _build(self, gate: str, options: Options) -> Judge:
        """A new judge for ``gate`` with these options; :class:`RequestError` names an option it refuses."""
        try:
            config = judge_config(self.config, gate, options.values)
            gate_obj = config.make_gate()
        except ConfigError as exc:
            raise RequestError(exc.parameter, without_paths(str(exc))) from exc
        except InputError as exc:  # an unknown rubric (RubricError names the field)
            raise RequestError(exc.field or "options", without_paths(exc.reason)) from exc
        try:
            judge = Judge(self.engine, gate_obj, config)
        except ConfigError as exc:  # these options' prompt cannot fit the window
            if not options.values:
                raise  # the gate's own judge (built at start-up): the service cannot serve it
            # It names the server's context window; the 422 names what the request set (min_chunk_tokens).
            field = exc.parameter if exc.parameter in options.values else min(options.values)
            raise RequestError(field, without_paths(str(exc))) from exc
        judge.review_queue = "the service"  # it queues in --audit-db, or says in its log what went to nobody
        return judge

    def settings(self, gate: str, options: Options) -> dict[str, str]:
        """What decides the rows ``gate`` gives with these options: the values ``suffice judge`` records beside
        an output (:class:`~suffice.batch.run_settings.RunSettings`, less the caller's format and field mapping), so
        that a client resuming an output checks them as an in-process run does.  Raises :class:`RequestError`
        for an option the gate does not take per request.

        Nothing is kept: a judge these options built is dropped, and a kept one is not marked used,
        so looking settings up costs no memory, whoever asks and however many values they try."""
        if not options.values:
            judge = self._defaults[gate]
        else:
            key = self._key(gate, options)
            with self._lock:
                kept = self._judges.get(key)
            judge = kept if kept is not None else self._build(gate, options)
        with self._lock:
            if self._engine_settings is None:
                self._engine_settings = engine_settings(self.config.judge.engine)
            engine = self._engine_settings
        # A judge setting the request set decides its rows as a gate option does: named as the gate's are.
        chosen = {d.name: repr(getattr(judge.config, d.name)) for d in per_request(type(self.config.judge))}
        return {**judge.gate.settings(), **{k: v for k, v in chosen.items() if k in options.values}, **engine}

    def judge(
        self, gate: str, records: Sequence[object], options: Options, cancel: threading.Event | None = None
    ) -> Outcome:
        """One row per record, in order (a verdict or that record's error row), read as ``suffice judge`` does.

        Raises :class:`RequestError` for a parameter the gate does not take and
        :class:`~suffice.exceptions.AuditError` when the audit log cannot be written; lets
        :class:`~suffice.exceptions.EngineFatalError` and :class:`~suffice.exceptions.CancelledError` through.
        """
        records = [_READ_AS_JUDGE.apply(record, None) for record in records]
        try:
            shape = verdict_format(options.fmt)
        except ConfigError:
            raise RequestError("format", f"must be one of {', '.join(verdict_format_names())}") from None
        judge = self.judge_for(gate, options)
        refused = shape.refuses(judge.gate)
        if refused is not None:
            raise RequestError("format", refused)
        if cancel is not None and cancel.is_set():  # given up while waiting for a thread
            raise CancelledError("the caller withdrew the request")
        request_id = uuid.uuid4().hex
        began = time.perf_counter()
        results = judge.judge_batch(list(records), cancel=cancel)
        seconds = time.perf_counter() - began
        if self._audit is not None:
            items = [judge.item_or_none(record) for record in records]
            settings = self.settings(gate, options)
            rows = [
                audit_values(
                    judge.gate,
                    result,
                    item,
                    run_id=request_id,
                    round=1,
                    latency_ms=seconds * 1000,
                    weights_hash=self._weights,
                    settings=settings,
                )
                for item, result in zip(items, results, strict=True)
            ]
            self._audit.record(rows, results, items, request_id, judge.gate, settings)
        else:
            to_person = sum(review_rule(judge.gate, r) is not None for r in results)
            if to_person:
                with self._lock:
                    self.unqueued_reviews += to_person
                    total = self.unqueued_reviews
                logger.warning(
                    "%d record(s) of request %s routed to a person (human_review), but no review queue is "
                    "configured (--audit-db); %d so far",
                    to_person,
                    request_id,
                    total,
                )
        rows = []
        for index, result in enumerate(results):
            row = result_row(_shown(result), judge.gate, options.fmt, index)
            row["index"] = row.pop("line")
            rows.append(row)
        if cancel is None or not cancel.is_set():  # set: the route answered 504 or 499, not these results
            self.results.publish(Judged(records, results, seconds, judge.gate, gate))
        return Outcome(request_id, rows, results, seconds)

    def check_alive(self) -> None:
        self.engine.check_alive()

    def close(self) -> None:
        if self._audit is not None:
            self._audit.close()
        if self.unqueued_reviews:
            logger.warning(
                "%d record(s) were routed to a person (human_review) with no review queue configured (--audit-db)",
                self.unqueued_reviews,
            )
        self.engine.close()
