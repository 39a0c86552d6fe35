"""The judge: build once (engine, model, backend), then judge batches.

Every item yields exactly one :class:`JudgeResult`, in input order; a failure confined to one item becomes
an error result for that item only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from suffice.cache import VerdictCache, cache_key, judge_digest, shared_cache
from suffice.config import JudgeConfig
from suffice.exceptions import (
    CalibrationMismatchWarning,
    CancelledError,
    ConfigError,
    EngineError,
    EngineFatalError,
    GenerationError,
    ItemError,
    PreparationError,
    PromptTooLongError,
    VerdictError,
)
from suffice.gates import Gate, gate_names, roles
from suffice.gates.base import fitted_mismatch
from suffice.gates.decision_mode import AutoGate, DecisionGate
from suffice.gates.registry import check_call
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.grammars.scores import decision_probabilities
from suffice.prompts.fitting import FittedPrompt, fit_prompt
from suffice.prompts.templates import Message
from suffice.records.item import Chunk, Item, record_id
from suffice.results import (
    Cascade,
    ErrorInfo,
    FailedAttempt,
    Judged,
    JudgeResult,
    JudgeStats,
    ResultsStream,
    TokenCounts,
)
from suffice.rows.frames import Results
from suffice.serving.base import CappedProgress, Engine, Generation, GenerationRequest, Progress, checked_progress
from suffice.serving.factory import engine_settings, make_engine
from suffice.serving.isolation import isolate
from suffice.serving.progress import progress_of
from suffice.telemetry import BatchTrace, engine_start

#: Appended once when an output fails validation (the seeds' retry rule).
RETRY_NOTE = (
    "Your previous output failed schema validation: {error}\n"
    "Answer again with only the JSON object in the required format."
)
_ERROR_CHARS = 200
#: Judges kept for other gates and options than a judge's own (``judge_batch(gate=, options=)``), least recently
#: used dropped first: every distinct value (a threshold of 0.50001) would otherwise keep one for ever.
DERIVED_JUDGES = 16


@dataclass
class _PassStats(JudgeStats):
    """A cascade pass's counters: the work it did counts in the cascade judge's stats, the records and their
    outcomes only once, off the cascade judge's own results stream."""

    parent: JudgeStats | None = None

    def add(self, counter: str, n: int = 1) -> None:
        super().add(counter, n)
        if self.parent is not None:
            self.parent.add(counter, n)


@dataclass
class _Pending:
    index: int
    item: Item
    fitted: FittedPrompt
    tokens: TokenCounts = field(default_factory=TokenCounts)
    #: The model's probability of the gate's positive decision value, once a generation gave one.
    p_positive: float | None = None
    #: The outputs that failed validation before this generation: its result carries them to the audit log.
    attempts: tuple[FailedAttempt, ...] = ()


_log = logging.getLogger("suffice")


class Judge(AbstractContextManager["Judge"]):
    """A gate on an engine: one result per record, in order; a :class:`~suffice.JudgeProtocol`.

    ``gate=`` and ``options=`` work as on :class:`~suffice.Client`: a judge for them is built once on the same
    engine and kept (the last :data:`DERIVED_JUDGES`), its counters in this one's ``stats``.  Every batch is
    published once to :attr:`stream`, which :attr:`stats` observes; subscribe another observer there."""

    def __init__(self, engine: Engine, gate: Gate | str | None = None, config: JudgeConfig | None = None) -> None:
        """``gate`` defaults to the one ``config`` names (built with its options)."""
        self.engine = engine
        named = gate if isinstance(gate, str) else gate.name if gate is not None else None
        known = named if named in gate_names() else None
        if config is not None and known is not None and known != config.gate:
            raise ConfigError("gate", named, f"differs from the config's gate {config.gate!r}; give one of them")
        self.config = config or (JudgeConfig(gate=known) if known else JudgeConfig())
        self.gate = gate if isinstance(gate, Gate) else self.config.make_gate()
        if self.config.detail == "auto" and not isinstance(self.gate, AutoGate | DecisionGate):
            self.gate = AutoGate(self.gate)  # a full gate given under the cascade's config: cascade it
        self.stats = JudgeStats()
        self.stream = ResultsStream([self.stats])
        #: Who queues this judge's routes to a person (an audit log's owner); ``None``: nobody, and each batch
        #: that sends records to a person says how many on the ``suffice`` logger.
        self.review_queue: str | None = None
        self._derived: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], Judge] = OrderedDict()
        self._derived_lock = threading.Lock()
        self._passes: tuple[Judge, Judge] | None = None
        self.cache: VerdictCache | None = None
        self._cache_digest = ""
        if isinstance(self.gate, AutoGate):
            # Each pass keys the cache by its own detail: a decision-only or full run's verdicts are its hits.
            self._passes = (self._pass(self.gate.decision, "decision"), self._pass(self.gate.inner, "full"))
            self.cache = self._passes[0].cache
            return
        self.check_window()
        self.check_calibration()
        self.cache, self._cache_digest = self._open_cache()

    def _pass(self, gate: Gate, detail: str) -> Judge:
        """One pass of the cascade: a judge at ``detail`` on this engine, with its own cache keys."""
        judge = Judge(self.engine, gate, dataclasses.replace(self.config, detail=detail))
        judge.stats = _PassStats(parent=self.stats)
        judge.stream = ResultsStream([judge.stats])
        judge.review_queue = "the cascade"  # a pass's routes are not final: the cascade says what went to a person
        return judge

    def _open_cache(self) -> tuple[VerdictCache | None, str]:
        """The verdict cache (``None``: off, or verdicts not reusable) and the part of every key this judge makes."""
        path = self.config.cache_path()
        if path is None or not self.engine.cacheable:
            return None, ""
        config = self.config
        fitting = {
            key: getattr(config, key)
            for key in ("detail", "max_question_tokens", "max_response_tokens", "min_chunk_tokens", "max_chunks")
        }
        engine = type(self.engine).settings_of(config.engine)
        sampling = {"temperature": 0.0, "model_id": self.engine.model_id, "backend": self.engine.backend}
        return shared_cache(path, config.cache_max_bytes), judge_digest(engine, self.gate, fitting, sampling)

    def check_calibration(self) -> None:
        """Warn (:class:`CalibrationMismatchWarning`) when the gate's threshold was calibrated under other engine
        settings, which move its scores.  Not an error: a threshold can still be the best one at hand."""
        fitted = roles.calibrated_under(self.gate)
        if not fitted:
            return
        try:
            now = type(self.engine).settings_of(self.config.engine)
        except Exception:  # an engine that cannot say what it is: nothing to compare with
            return
        problem = fitted_mismatch(fitted, now)
        if problem is not None:
            warnings.warn(
                CalibrationMismatchWarning(f"{self.gate.name} gate: {problem}; calibrate again under this engine"),
                stacklevel=3,
            )

    def check_window(self) -> None:
        """Refuse a ``max_model_len`` that not even the smallest record fits, before any record is judged
        (else every record would be its own ``PromptTooLongError`` row)."""
        probe = Item(
            id="window-check",
            question="Who?",
            chunks=(Chunk(id=0, text="Nobody."),),
            response="Nobody." if self.gate.needs_response else None,
        )
        try:
            self._fit(probe)
        except PromptTooLongError as exc:
            shorter = " (or detail='decision', whose output is one value)" if self.config.detail == "full" else ""
            raise ConfigError(
                "max_model_len",
                self.engine.max_model_len,
                f"too small for the {self.gate.name} gate: {exc}; give a larger window{shorter}",
            ) from exc
        except Exception:  # anything else is a record's own concern
            return

    @classmethod
    def open(cls, config: JudgeConfig) -> Judge:
        """A judge on a new engine, made from ``config.engine`` (its gate is built first)."""
        gate = config.make_gate()
        with engine_start():
            engine = make_engine(config.engine)
        try:
            return cls(engine, gate, config)
        except BaseException:
            engine.close()  # a refused window must not leave the engine's processes behind
            raise

    @property
    def prompt_version(self) -> str:
        return self.gate.prompt_version

    def requests(self, records: Sequence[object]) -> list[GenerationRequest]:
        """The engine requests the judgeable records would send (for benchmarks and inspection)."""
        out: list[GenerationRequest] = []
        for record in records:
            try:
                _, prepared = self._prepare(record)
            except ItemError:
                continue
            if isinstance(prepared, FittedPrompt):
                out.extend(GenerationRequest(messages, constraint) for messages, constraint in prepared.prompts)
        return out

    def item_or_none(self, record: object) -> Item | None:
        """The record as this gate's item, or ``None`` if it is not one."""
        try:
            return roles.parse_item(self.gate, record)
        except Exception:
            return None

    def _prepare(self, record: object, cancel: threading.Event | None = None) -> tuple[Item, BaseModel | FittedPrompt]:
        """The record's item and either its verdict without the model or its fitted prompt.  Anything raised
        becomes this record's :class:`ItemError`, but a fatal engine failure or ``cancel`` stops the batch."""
        try:
            item = roles.parse_item(self.gate, record)
        except ItemError:
            raise
        except Exception as exc:
            raise PreparationError("record", f"cannot be read: {type(exc).__name__}: {exc}") from exc
        try:
            verdict = roles.shortcut(self.gate, item)
            return item, (verdict if verdict is not None else self._fit(item, cancel))
        except (ItemError, EngineFatalError, CancelledError):
            raise
        except EngineError as exc:
            self.engine.check_alive()
            raise GenerationError(f"the engine failed while fitting the prompt: {exc}") from exc
        except Exception as exc:
            raise PreparationError("chunks", f"cannot be fitted into a prompt: {type(exc).__name__}: {exc}") from exc

    def _fit(self, item: Item, cancel: threading.Event | None = None) -> FittedPrompt:
        return fit_prompt(
            self.engine,
            self.gate.template,
            item,
            self.config,
            functools.partial(roles.item_constraint, self.gate, item),
            self.gate.system_context(item),
            self.gate.user_context(item),
            cancel,
            roles.response_segments(self.gate, item),
        )

    def gate_for(self, gate: str | None = None, options: Mapping[str, Any] | None = None) -> Gate:
        """The gate that judges a call with this ``gate`` and ``options`` (a refused one: :class:`ConfigError`)."""
        return self._for(gate, options).gate

    def settings_for(self, gate: str | None = None, options: Mapping[str, Any] | None = None) -> dict[str, str]:
        """What decides the rows of a call with this ``gate`` and ``options``: the gate's settings and the
        engine's, as ``suffice serve`` reports them (``GET /v1/settings/{gate}``)."""
        judge = self._for(gate, options)
        return {**judge.gate.settings(), **engine_settings(judge.config.engine)}

    def _for(self, gate: str | None, options: Mapping[str, Any] | None) -> Judge:
        """This judge, or the one for ``gate`` with ``options`` on the same engine (built once and kept)."""
        check_call(gate, options)
        name = gate or self.gate.name
        if name == self.gate.name and not options:
            return self
        if name == self.gate.name and self.gate.name != self.config.gate:
            # A gate object of the caller's own: there is no recipe to build it again with other options.
            raise ConfigError(
                "options", dict(options or {}), f"the judge's {name} gate was built by the caller: build one with them"
            )
        merged = {**self.config.options, **(options or {})} if name == self.config.gate else dict(options or {})
        key = (name, tuple(sorted((str(k), repr(v)) for k, v in merged.items())))
        with self._derived_lock:
            judge = self._derived.get(key)
            if judge is not None:
                self._derived.move_to_end(key)
                return judge
        config = dataclasses.replace(self.config, gate=name, options=merged)
        judge = Judge(self.engine, config.make_gate(), config)
        judge._count_in(self.stats, self.stream)
        with self._derived_lock:
            judge = self._derived.setdefault(key, judge)
            self._derived.move_to_end(key)
            while len(self._derived) > DERIVED_JUDGES:
                self._derived.popitem(last=False)
        return judge

    def _count_in(self, stats: JudgeStats, stream: ResultsStream) -> None:
        """Count this judge's work in ``stats`` and publish its results to ``stream`` (a derived judge's parent's)."""
        self.stats = stats
        self.stream = stream
        for part in self._passes or ():
            assert isinstance(part.stats, _PassStats)
            part.stats.parent = stats

    def judge(
        self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        """One record's result (see :meth:`judge_batch`)."""
        return self.judge_batch([record], gate=gate, options=options)[0]

    def judge_batch(
        self,
        records: Sequence[object],
        progress: Progress | bool | None = None,
        cancel: threading.Event | None = None,
        *,
        gate: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Results:
        """One result per record, in order; ``progress``: ``True`` draws a bar on stderr, or a
        :class:`~suffice.serving.base.Progress` is credited once per record and told prompts as the engine reads
        them.  Setting ``cancel`` stops the engine and raises :class:`~suffice.exceptions.CancelledError`.
        Traced through OpenTelemetry when installed (:mod:`suffice.telemetry`: a span per batch and per record)."""
        if isinstance(progress, bool):
            with progress_of(progress, len(records)) as bar:
                return self.judge_batch(records, bar, cancel, gate=gate, options=options)
        progress = checked_progress(progress)
        judge = self._for(gate, options)
        if judge is not self:
            judge.review_queue = self.review_queue
            return judge.judge_batch(records, progress, cancel)
        began = time.perf_counter()
        with BatchTrace(self.gate, self.engine, len(records)) as trace:
            if self._passes is not None:
                final = self._cascade(records, progress, cancel, trace)
            else:
                final = self._judge_batch(records, progress, cancel, trace)
        self.stream.publish(Judged(records, final, time.perf_counter() - began, self.gate, self.gate.name))
        if self.review_queue is None:
            self._say_unqueued(final)
        return Results(final, self.gate)

    def _say_unqueued(self, results: Sequence[JudgeResult]) -> None:
        """Once per batch: how many of its records went to a person that no queue holds (no route is silent)."""
        to_person = 0
        for result in results:
            try:
                to_person += result.verdict is not None and self.gate.route(result.verdict).route == "human_review"
            except TypeError:  # a plug-in gate that routes no such verdict: counted nowhere, as telemetry does
                continue
        if to_person:
            _log.warning(
                "%d of %d record(s) routed to a person (human_review), but this Judge has no review queue: give the "
                "Pipeline or the integration an audit log (audit=...), or judge with suffice judge --audit-db",
                to_person,
                len(results),
            )

    def _cascade(
        self, records: Sequence[object], progress: Progress | None, cancel: threading.Event | None, trace: BatchTrace
    ) -> list[JudgeResult]:
        """``detail="auto"``: every record decision-only (one engine batch), then a full verdict (one more) for
        those :meth:`AutoGate.escalate` picks.  ``progress`` is credited once a record's last pass is done."""
        assert self._passes is not None and isinstance(self.gate, AutoGate)
        decide, full = self._passes
        margin = self.config.auto_margin
        if not self.gate.decision.decision_delivers:
            # Every decision of this gate would be judged again: a decision pass would only add its prefill.
            judged = [
                result.model_copy(update={"cascade": Cascade(detail="full", reason="decision_only", margin=margin)})
                for result in full.judge_batch(records, progress, cancel)
            ]
            trace.finish(judged, {}, inference_spans=False)
            return judged
        decided = decide.judge_batch(records, cancel=cancel)
        why: dict[int, str] = {}
        for index, result in enumerate(decided):
            if isinstance(result.verdict, DecisionVerdict):
                reason = self.gate.escalate(result.verdict, margin)
                if reason is not None:
                    why[index] = reason
        if progress is not None and len(records) > len(why):
            progress(len(records) - len(why))
        again = full.judge_batch([records[i] for i in why], progress, cancel) if why else []
        redone = dict(zip(why, again, strict=True))
        final: list[JudgeResult] = []
        for index, result in enumerate(decided):
            probability = result.verdict.probability if isinstance(result.verdict, DecisionVerdict) else None
            second = redone.get(index)
            if second is None:
                cascade = Cascade(detail="decision", probability=probability, margin=margin)
                final.append(result.model_copy(update={"cascade": cascade}))
                continue
            cascade = Cascade(detail="full", reason=why[index], probability=probability, margin=margin)
            # The row's tokens, retries and failed outputs are what the record cost: both passes.
            tokens = TokenCounts(
                prompt=result.tokens.prompt + second.tokens.prompt,
                completion=result.tokens.completion + second.tokens.completion,
            )
            update = {
                "cascade": cascade,
                "tokens": tokens,
                "retries": result.retries + second.retries,
                "attempts": (*result.attempts, *second.attempts),
            }
            final.append(second.model_copy(update=update))
        p_positive = {i: r.verdict.probability for i, r in enumerate(decided) if isinstance(r.verdict, DecisionVerdict)}
        # Each pass's judge wrote the records' inference spans under this batch's.
        trace.finish(final, {i: p for i, p in p_positive.items() if p is not None}, inference_spans=False)
        return final

    def _judge_batch(
        self, records: Sequence[object], progress: Progress | None, cancel: threading.Event | None, trace: BatchTrace
    ) -> list[JudgeResult]:
        results: list[JudgeResult | None] = [None] * len(records)
        pending: list[_Pending] = []
        keys: dict[int, str] = {}
        for index, record in enumerate(records):
            try:
                item, prepared = self._prepare(record, cancel)
            except ItemError as exc:
                results[index] = self._result(record_id(record), TokenCounts(), 0, exc)
                continue
            if isinstance(prepared, FittedPrompt):
                if self.cache is not None:
                    keys[index] = cache_key(self._cache_digest, item, prepared.constraint, prepared.shown)
                    hit = self.cache.get(keys[index], self.gate)
                    if hit is not None:
                        results[index] = hit.model_copy(update={"id": item.id})
                        continue
                pending.append(_Pending(index, item, prepared))
            else:
                results[index] = self._result(item.id, TokenCounts(), 0, verdict=prepared)

        if progress is not None and len(records) > len(pending):
            progress(len(records) - len(pending))
        trace.settle(results, before_model=True)
        failed = self._run(pending, results, retries=0, progress=progress, cancel=cancel)
        trace.settle(results)
        retry: list[_Pending] = []
        if failed:
            self.stats.add("retries", len(failed))
            retry = [
                _Pending(
                    p.index,
                    p.item,
                    # ASCII only, so the note's token count stays within the fitting's reserve.
                    _with_note(
                        p.fitted, RETRY_NOTE.format(error=str(error).encode("ascii", "replace").decode()[:_ERROR_CHARS])
                    ),
                    p.tokens,
                    attempts=_failed(p, error),
                )
                for p, error in failed
            ]
            for p, error in self._run(retry, results, retries=1, cancel=cancel):
                self.stats.add("retry_failures", 1)
                results[p.index] = self._result(p.item.id, p.tokens, 1, error, attempts=_failed(p, error))

        if self.cache is not None:
            fresh = [(keys[p.index], results[p.index]) for p in pending]
            self.cache.put_many([(key, result) for key, result in fresh if result is not None])
        final = [r for r in results if r is not None]
        assert len(final) == len(records), "every item gets exactly one result"
        trace.finish(final, {p.index: p.p_positive for p in (*pending, *retry) if p.p_positive is not None})
        return final

    async def ajudge_batch(
        self,
        records: Sequence[object],
        progress: Progress | bool | None = None,
        *,
        gate: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Results:
        """:meth:`judge_batch` on a worker thread (in the task's context, so spans join its trace): concurrent
        awaits share the engine's batch.  Cancelling the task sets ``cancel`` and re-raises it."""
        if isinstance(progress, bool):
            with progress_of(progress, len(records)) as bar:
                return await self.ajudge_batch(records, bar, gate=gate, options=options)
        progress = checked_progress(progress)
        judge = self._for(gate, options)  # a refused gate or option is raised here, not on the thread
        cancel = threading.Event()
        work = asyncio.ensure_future(asyncio.to_thread(judge.judge_batch, list(records), progress, cancel))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()
            # The thread cannot be interrupted: its result (CancelledError, or what it finished) is dropped.
            work.add_done_callback(_drop_outcome)
            raise

    async def ajudge(
        self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        """One record's result, awaited (see :meth:`ajudge_batch`)."""
        return (await self.ajudge_batch([record], gate=gate, options=options))[0]

    def _run(
        self,
        pending: list[_Pending],
        results: list[JudgeResult | None],
        retries: int,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[tuple[_Pending, ItemError]]:
        """Generate for ``pending``, store verdicts, return the items that failed validation."""
        failed: list[tuple[_Pending, ItemError]] = []
        # A response judged in windows is one request per window; its generations are read together.
        requests = [GenerationRequest(m, c) for p in pending for m, c in p.fitted.prompts]
        credit = CappedProgress(progress, len(pending)) if progress is not None else None
        generated = iter(self._generate(requests, credit, cancel))
        if credit is not None:
            credit.settle()
        for p in pending:
            gens = [next(generated) for _ in p.fitted.prompts]
            engine_error = next((g for g in gens if isinstance(g, EngineError)), None)
            if engine_error is not None:
                results[p.index] = self._result(
                    p.item.id, p.tokens, retries, GenerationError(str(engine_error)), attempts=p.attempts
                )
                continue
            windows = [g for g in gens if not isinstance(g, EngineError)]
            p.tokens = TokenCounts(
                prompt=p.tokens.prompt + sum(g.prompt_tokens for g in windows),
                completion=p.tokens.completion + sum(g.completion_tokens for g in windows),
            )
            gen = windows[0]
            text = "\n".join(g.text for g in windows)
            try:
                for window, (_, constraint) in zip(windows, p.fitted.prompts, strict=True):
                    if window.finish_reason == "length":
                        self.stats.add("length_cutoffs", 1)
                        raise VerdictError(
                            f"output cut off at max_tokens={constraint.max_tokens} "
                            "(the constraint's worst case should make this impossible)",
                            text,
                        )
                    if window.finish_reason != "stop":
                        # vLLM ends a request with "error" when the backend refuses a token its mask allowed;
                        # the retry's prompt names the error.
                        reason = window.finish_reason
                        raise VerdictError(f"the engine ended the output with finish_reason={reason!r}", text)
                verdict = self.gate.parse(text, p.fitted, p.item)
                token = roles.decision_of(self.gate)
                if gen.tokens is not None and gen.top_logprobs is not None and token is not None:
                    probabilities = decision_probabilities(
                        gen.text, gen.tokens, gen.top_logprobs, token.marker, token.values
                    )
                    verdict = roles.with_probabilities(self.gate, verdict, probabilities)
                    if probabilities is not None:
                        p.p_positive = probabilities.get(token.positive)
            except VerdictError as exc:
                failed.append((p, exc))
                continue
            results[p.index] = self._result(
                p.item.id, p.tokens, retries, verdict=verdict, raw_text=text, fence=p.fitted.fence, attempts=p.attempts
            )
        return failed

    def _generate(
        self, requests: list[GenerationRequest], progress: Progress | None = None, cancel: threading.Event | None = None
    ) -> list[Generation | EngineError]:
        """One engine call; if it fails, the batch is split so one poisoned request fails alone
        (:func:`~suffice.serving.isolation.isolate`); a fatal engine failure goes to the caller unsplit."""

        def failed(exc: Exception, part: Sequence[GenerationRequest]) -> EngineError:
            if not isinstance(exc, EngineError) or isinstance(exc, EngineFatalError):
                raise exc
            self.engine.check_alive()
            if len(part) == 1 and progress is not None:
                progress(1)
            return exc

        return isolate(lambda part: self.engine.generate(list(part), progress, cancel), requests, failed)

    def _result(
        self, item_id: str | None, tokens: TokenCounts, retries: int, error: ItemError | None = None, **outcome: Any
    ) -> JudgeResult:
        """This judge's result: its ``error``, or ``outcome`` (``verdict``, ``raw_text``, ``fence``, ``attempts``)."""
        return JudgeResult(
            id=item_id,
            gate=self.gate.name,
            error=None if error is None else ErrorInfo.from_exception(error),
            model=self.engine.model_id,
            backend=self.engine.backend,
            prompt_version=self.prompt_version,
            tokens=tokens,
            retries=retries,
            **outcome,
        )

    def close(self) -> None:
        self.engine.close()

    def __exit__(self, *_: object) -> None:
        self.close()


def _drop_outcome(work: asyncio.Future[Results]) -> None:
    """Retrieve a withdrawn call's outcome so that asyncio does not log it as never retrieved."""
    if not work.cancelled():
        work.exception()


def _failed(p: _Pending, error: ItemError) -> tuple[FailedAttempt, ...]:
    """``p``'s failed outputs with ``error``'s, the latest: the seeds' "log every evaluation attempt"."""
    return (*p.attempts, FailedAttempt.from_exception(error))


def _with_note(fitted: FittedPrompt, note: str) -> FittedPrompt:
    """The same prompt (every window of it) with the validation error appended to the user turn."""

    def noted(messages: tuple[Message, ...]) -> tuple[Message, ...]:
        *head, last = messages
        return (*head, {**last, "content": last["content"] + "\n\n" + note})

    more = tuple((noted(m), c) for m, c in fitted.more_windows)
    return dataclasses.replace(fitted, messages=noted(fitted.messages), more_windows=more)
