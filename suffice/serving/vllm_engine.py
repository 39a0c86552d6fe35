"""The vLLM engine (GPU or CPU build), the only module that imports vLLM: an in-process ``LLM``, one
``SamplingParams`` per request with its own regex, temperature 0, prefix caching on."""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import queue
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from suffice import startup
from suffice.exceptions import CancelledError, EngineDeadError, EngineError
from suffice.grammars.constraint import Constraint, Segment
from suffice.serving import machine
from suffice.serving.admission import KVBudget
from suffice.serving.base import (
    Engine,
    Generation,
    GenerationRequest,
    Progress,
    TokenizerMixin,
    local_settings,
    report_read,
)
from suffice.serving.decoding import TokenTrail, eos_ids, merge_by_text
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import (
    MachineSettings,
    apply_settings,
    check_build,
    engine_output,
    log_tail,
    machine_settings,
)
from suffice.serving.models import ModelRef, resolve_model
from suffice.serving.offline import force_offline

_log = logging.getLogger(__name__)


def _token_logprobs(
    token_ids: Sequence[int], logprobs: Any
) -> tuple[tuple[str, ...], tuple[dict[str, float], ...]] | None:
    """Token texts and top log-probabilities by text, or ``None`` unless each generated id has its entry."""
    if not logprobs or len(logprobs) != len(token_ids):
        return None
    tokens: list[str] = []
    tops: list[dict[str, float]] = []
    for token_id, position in zip(token_ids, logprobs, strict=True):
        chosen = position.get(token_id)
        if chosen is None or chosen.decoded_token is None:
            return None
        tokens.append(chosen.decoded_token)
        tops.append(merge_by_text((entry.decoded_token, entry.logprob) for entry in position.values()))
    return tuple(tokens), tuple(tops)


def shutdown_llm(llm: Any) -> None:
    """Stop an ``LLM``'s engine process now (``LLM.shutdown`` is missing in some releases)."""
    shutdown = getattr(llm, "shutdown", None)
    if callable(shutdown):
        shutdown()
        return
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and callable(getattr(core, "shutdown", None)):
        core.shutdown()
    gc.collect()


#: How often a waiting caller checks that the engine's processes are alive (seconds).
WATCH_INTERVAL = 0.5


@dataclass
class _Job:
    """One caller's requests: done when every sequence has its last segment."""

    sequences: list[_Sequence]
    progress: Progress | None
    cancel: threading.Event | None = None
    remaining: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.done.set()


class _Driver:
    """The engine loop, on one daemon thread shared by every caller, so a request from any thread joins the running
    batch at the next step.  Only this thread touches the engine; since ``step()`` never returns once the engine core
    is killed, callers wait with a timeout and check the engine's processes every :data:`WATCH_INTERVAL`.

    Sequences start in the order they came, while they fit in the KV cache (:mod:`suffice.serving.admission`).
    """

    def __init__(self, engine: Any, submit: Any, absorb: Any, alive: Any, capacity: int | None = None) -> None:
        self._engine = engine
        self._submit = submit
        self._absorb = absorb
        self._alive = alive
        #: Jobs to start, and ``(job, error)`` for jobs to stop (their caller gave up).
        self._inbox: queue.Queue[_Job | tuple[_Job, BaseException]] = queue.Queue()
        self._running: dict[str, tuple[_Sequence, _Job]] = {}
        #: Sequences not started yet, in the order they came.
        self._waiting: deque[tuple[_Sequence, _Job]] = deque()
        #: Started sequences not finished: their job and the tokens they may hold.
        self._started: dict[int, tuple[_Job, int]] = {}
        self._budget = KVBudget(capacity)
        #: Requests whose first token was seen, while start-up marks are recorded (:mod:`suffice.startup`).
        self._first_token: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="suffice-engine", daemon=True)
        self._thread.start()

    def run(self, job: _Job) -> None:
        """Submit ``job`` and wait until done; raise what failed it (CancelledError once ``job.cancel`` is set)."""
        job.remaining = len(job.sequences)
        self._inbox.put(job)
        withdrawn = False
        while not job.done.wait(WATCH_INTERVAL):
            self._alive()
            if not withdrawn and job.cancel is not None and job.cancel.is_set():
                self._inbox.put((job, CancelledError("the caller withdrew the request")))
                withdrawn = True  # the loop drops the job after its current step
        if job.error is not None:
            raise job.error

    def _loop(self) -> None:
        while True:
            if not self._running and not self._waiting:
                self._take(self._inbox.get())
            while True:
                try:
                    self._take(self._inbox.get_nowait())
                except queue.Empty:
                    break
            self._admit()
            if not self._running:
                continue
            try:
                outputs = self._engine.step()
            except BaseException as exc:  # every running job fails; the caller decides what it means
                jobs = {id(job): job for _, job in self._running.values()}
                with contextlib.suppress(Exception):
                    self._engine.abort_request(list(self._running))
                self._running.clear()
                for _, cost in self._started.values():
                    self._budget.drop(cost)
                self._started.clear()
                for job in jobs.values():
                    job.fail(exc)
                continue
            follow_ups: list[tuple[_Sequence, _Job]] = []
            self._credit_read()
            for out in outputs:
                if not out.finished:
                    continue
                entry = self._running.pop(out.request_id, None)
                if entry is None:
                    continue
                if startup.enabled():
                    self._first_token.discard(out.request_id)
                    startup.mark(f"segment done {out.request_id}")
                seq, job = entry
                if job.done.is_set():
                    continue
                try:
                    if not seq.read:  # read and done within one step
                        seq.read = True
                        report_read(job.progress, 1)
                    self._absorb(seq, out.outputs[0])
                    # Only a segment ended by end-of-sequence goes on: "length", "abort", "error" end the request.
                    segment = seq.constraint.next_segment(seq.text) if seq.finish_reason == "stop" else None
                    if segment is not None:
                        seq.segment = segment
                        follow_ups.append((seq, job))
                        continue
                    self._release(seq)
                    job.remaining -= 1
                    if job.progress is not None:
                        job.progress(1)
                    if job.remaining == 0:
                        job.done.set()
                except BaseException as exc:  # a failing callback or output fails its job, not the loop
                    self._drop(job, exc)
            for seq, job in follow_ups:
                if not job.done.is_set():
                    self._add(job, [seq])

    def _credit_read(self) -> None:
        """Report every sequence whose prompt the engine has now read (:meth:`~suffice.serving.base.Progress.read`).

        Reads vLLM's per-request ``RequestState.is_prefilling`` (streaming the first segment instead cost 4-7 % of
        generation time); without that flag a request is credited when it completes.
        """
        processor = getattr(self._engine, "output_processor", None)
        states = getattr(processor, "request_states", None)
        if not isinstance(states, dict):
            return
        # Keyed by vLLM's internal ids (ours with a suffix), mapped from ours here.
        internal = getattr(processor, "external_req_ids", None)
        failed: list[tuple[_Job, BaseException]] = []
        # Every segment's first token is looked for only while start-up marks are recorded.
        marking = startup.enabled()
        for request_id, (seq, job) in self._running.items():
            if job.done.is_set() or (seq.read and not (marking and request_id not in self._first_token)):
                continue
            ids = (internal.get(request_id) or [request_id]) if isinstance(internal, dict) else [request_id]
            state = next((states[i] for i in ids if i in states), None)
            if state is not None and getattr(state, "is_prefilling", True) is False:
                if marking and request_id not in self._first_token:
                    self._first_token.add(request_id)
                    startup.mark(f"segment first token {request_id}")
                if seq.read:
                    continue
                seq.read = True
                try:
                    report_read(job.progress, 1)
                except BaseException as exc:  # the caller's callback: fails its job only
                    failed.append((job, exc))
        for job, error in failed:
            if not job.done.is_set():
                self._drop(job, error)

    def _take(self, message: _Job | tuple[_Job, BaseException]) -> None:
        if isinstance(message, tuple):
            job, error = message
            if not job.done.is_set():
                self._drop(job, error)
            return
        self._start(message)

    def _start(self, job: _Job) -> None:
        if not job.sequences:
            job.done.set()
            return
        self._waiting.extend((seq, job) for seq in job.sequences)

    def _admit(self) -> None:
        """Start waiting sequences while they fit (:class:`_Driver`)."""
        while self._waiting:
            seq, job = self._waiting[0]
            if job.done.is_set():
                self._waiting.popleft()
                continue
            cost = self._budget.cost(seq.prompt_ids, seq.constraint)
            if not self._budget.fits(cost):
                return
            self._waiting.popleft()
            self._started[id(seq)] = (job, cost)
            self._budget.take(cost, seq.prompt_ids)
            self._add(job, [seq])

    def _release(self, seq: _Sequence) -> None:
        entry = self._started.pop(id(seq), None)
        if entry is not None:
            self._budget.finish(entry[1], seq.constraint.key, seq.completion_tokens + seq.prefilled)

    def _add(self, job: _Job, sequences: list[_Sequence]) -> None:
        try:
            # One at a time: if the k-th add_request raises, the k-1 before it are aborted with the job.
            for request_id, seq in self._submit(sequences):
                self._running[request_id] = (seq, job)
                startup.mark(f"segment queued {request_id}")
        except BaseException as exc:
            self._drop(job, exc)

    def _drop(self, job: _Job, error: BaseException) -> None:
        """Fail one job and abort its requests; the others run on."""
        mine = [request_id for request_id, (_, owner) in self._running.items() if owner is job]
        for request_id in mine:
            del self._running[request_id]
        self._first_token.difference_update(mine)
        if mine:
            with contextlib.suppress(Exception):
                self._engine.abort_request(mine)
        for key in [key for key, (owner, _) in self._started.items() if owner is job]:
            self._budget.drop(self._started.pop(key)[1])
        job.fail(error)


def _kv_capacity(llm: Any) -> int | None:
    """The tokens vLLM's KV cache holds (None where vLLM does not say)."""
    cache = getattr(getattr(llm.llm_engine, "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if not isinstance(blocks, int) or not isinstance(size, int) or blocks <= 0 or size <= 0:
        return None
    return blocks * size


def _engine_processes() -> list[Any]:
    """The engine's processes (vLLM names them ``VLLM::...``), children of this one."""
    import psutil

    children = psutil.Process().children(recursive=True)
    named = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if "VLLM" in child.name() or any("VLLM" in part for part in child.cmdline()[:1]):
                named.append(child)
    return named


@dataclass
class _Sequence:
    """One request's token sequence as its segments are generated."""

    index: int
    prompt_ids: list[int]
    constraint: Constraint
    segment: Segment
    generated_ids: list[int] = field(default_factory=list)
    text: str = ""
    trail: TokenTrail = field(default_factory=lambda: TokenTrail(wanted=True))
    #: Prefix tokens appended to the sequence (prefilled: counted with the prompt).
    prefilled: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    #: The engine has read the prompt (reported to progress).
    read: bool = False
    #: vLLM's priority for every segment of this sequence: the order its first segment was queued in.  A finished
    #: segment's continuation is a new request; served in its sequence's order, not behind every prompt queued since,
    #: it starts at the next step, its prompt still in the prefix cache.
    rank: int | None = None


def llm_kwargs(config: EngineConfig, settings: MachineSettings, ref: ModelRef) -> dict[str, Any]:
    """The arguments of vLLM's ``LLM`` for ``config`` on this machine (``benchmarks/bench_startup.py`` builds a bare
    vLLM engine with the same ones)."""
    kwargs: dict[str, Any] = {
        "model": str(ref.path),
        "tokenizer": str(ref.path),
        "structured_outputs_config": {"backend": config.backend_name},
        "dtype": settings.dtype,
        # Requests are served in their sequence's order, not their own (_Sequence.rank).
        "scheduling_policy": "priority",
        **config.vllm_kwargs(),
    }
    if settings.block_size is not None:
        kwargs["block_size"] = settings.block_size
    return kwargs


class VLLMEngine(TokenizerMixin, Engine):
    """Build once (start-up takes seconds to minutes), then call :meth:`generate` often."""

    cacheable = True  # greedy decoding of a local folder whose fingerprint is in settings_of

    def __init__(self, config: EngineConfig, model: ModelRef | None = None) -> None:
        gpu = machine.gpu_build()
        check_build(config, gpu=gpu)  # before anything is set or started
        force_offline()
        self.settings = machine_settings(config, gpu=gpu)
        apply_settings(self.settings, verbose=config.verbose)
        if config.verbose:
            _log.info("suffice: %s", self.settings.describe())
        ref = model or resolve_model(config.model, config.verbose)
        kwargs = llm_kwargs(config, self.settings, ref)
        startup.mark("engine settings read")
        with engine_output(config.verbose) as log:
            try:
                from vllm import LLM
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise EngineError(
                    'vLLM is not installed: `pip install "suffice[gpu]"` (GPU) or `"suffice[cpu]"` (CPU)'
                ) from exc
            startup.mark("vllm imported")
            try:
                self._llm = LLM(**kwargs)
            except Exception as exc:
                tail = log_tail(log)
                detail = f"\nlast lines of the engine log {log}:\n{tail}" if tail else ""
                raise EngineError(f"vLLM could not start on {ref.path}: {exc}{detail}") from exc
            startup.mark("engine built")
        self.log_path = log
        self.model_id = ref.model_id
        self.model_path = ref.path
        self.backend = config.backend_name
        self.tokenizer = self._llm.get_tokenizer()
        self.max_model_len = int(self._llm.llm_engine.model_config.max_model_len)
        self.logprobs = config.top_logprobs
        self._eos_ids = eos_ids(
            self.tokenizer, getattr(getattr(self._llm.llm_engine.model_config, "hf_config", None), "eos_token_id", None)
        )
        self._prefixes: dict[str, list[int]] = {}
        self._request_ids = itertools.count()
        self._ranks = itertools.count()
        #: The engine-core and worker processes started for this engine (none when vLLM runs it in this process).
        self._processes = _engine_processes()
        self._dead: str | None = None
        self._driver = _Driver(
            self._llm.llm_engine, self._submit, self._absorb, self.check_alive, _kv_capacity(self._llm)
        )
        startup.mark("engine ready")

    @classmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        settings = local_settings(config)
        # The dtype this machine computes in, asked for or not: bfloat16 sums differ from float32's, so a resume
        # must compute in the same.  float32 is left unrecorded, so outputs written when it was every CPU's default
        # (they record none) still resume.
        dtype = machine.compute_dtype(machine.gpu_build(), config.dtype)[0]
        settings.pop("dtype", None)
        if dtype != "float32":
            settings["dtype"] = dtype
        return settings

    def check_alive(self) -> None:
        """Raise :class:`EngineDeadError` if an engine process has exited (any cause)."""
        import psutil

        if self._dead is None:
            for process in self._processes:
                try:
                    gone = not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
                except psutil.Error:
                    gone = True
                if gone:
                    self._dead = f"the engine process {process.pid} exited"
                    break
        if self._dead is None:
            core = getattr(getattr(self._llm, "llm_engine", None), "engine_core", None)
            if getattr(getattr(core, "resources", None), "engine_dead", False):
                self._dead = "vLLM reports its engine core dead"
        if self._dead is not None:
            raise EngineDeadError(
                f"{self._dead}: nothing more can be judged in this run (killed, or out of memory? "
                f"see `dmesg` and {self.log_path}); what was done is kept, rerun the same command to resume"
            )

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        """Every request's segments, each continuing the same token sequence; when one segment ends the next is queued
        at once (the prefix cache holds its prompt)."""
        if not requests:
            return []
        sequences = [
            _Sequence(
                i,
                self.prompt_ids(r.messages),
                r.constraint,
                r.constraint.first_segment(),
                trail=TokenTrail(wanted=self.logprobs > 0),
            )
            for i, r in enumerate(requests)
        ]
        try:
            self._driver.run(_Job(sequences, progress, cancel))
        except (EngineDeadError, CancelledError):
            raise
        except Exception as exc:
            self.check_alive()
            raise EngineError(f"vLLM generation failed: {exc}") from exc
        return [
            Generation(
                text=seq.text,
                finish_reason=seq.finish_reason,
                prompt_tokens=len(seq.prompt_ids) + seq.prefilled,
                completion_tokens=seq.completion_tokens,
                tokens=seq.trail.result()[0],
                top_logprobs=seq.trail.result()[1],
            )
            for seq in sequences
        ]

    def _submit(self, sequences: list[_Sequence]) -> Iterator[tuple[str, _Sequence]]:
        """Queue each sequence's current segment (driver thread), yielding each request id once it is in the engine."""
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        engine = self._llm.llm_engine
        for seq in sequences:
            prefix = self._prefix_ids(seq.segment.prefix)
            params = SamplingParams(
                temperature=0.0,
                max_tokens=seq.segment.max_tokens,
                logprobs=(self.logprobs or None) if seq.segment.logprobs else None,
                structured_outputs=StructuredOutputsParams(regex=seq.segment.pattern),
                output_kind=RequestOutputKind.FINAL_ONLY,
            )
            request_id = f"suffice-{next(self._request_ids)}"
            prompt = TokensPrompt(prompt_token_ids=seq.prompt_ids + seq.generated_ids + prefix)
            if seq.rank is None:
                seq.rank = next(self._ranks)
            engine.add_request(request_id, prompt, params, priority=seq.rank)
            if prefix:
                # Prefilled, not decoded: part of the text, one stand-in token for it.
                seq.generated_ids.extend(prefix)
                seq.prefilled += len(prefix)
                seq.text += seq.segment.prefix
                seq.trail.stand_in(seq.segment.prefix)
            yield request_id, seq

    def _prefix_ids(self, prefix: str) -> list[int]:
        """A segment prefix's token ids (a handful of constant texts: kept)."""
        if not prefix:
            return []
        ids = self._prefixes.get(prefix)
        if ids is None:
            ids = [int(i) for i in self.text_ids(prefix)]
            self._prefixes[prefix] = ids
        return ids

    def _absorb(self, seq: _Sequence, completion: Any) -> None:
        """Append a finished segment to its sequence (an inner end-of-sequence token is dropped)."""
        token_ids = list(completion.token_ids)
        seq.completion_tokens += len(token_ids)
        kept = len(token_ids)
        while kept and token_ids[kept - 1] in self._eos_ids:
            kept -= 1
        start_text, start_ids = len(seq.text), len(seq.generated_ids)
        seq.generated_ids.extend(token_ids[:kept])
        seq.finish_reason = completion.finish_reason
        scored = seq.segment.logprobs
        seq.trail.add(
            completion.text, scored, _token_logprobs(token_ids, completion.logprobs) if scored else None, kept
        )
        seq.text += completion.text
        if seq.segment.speculative and completion.finish_reason == "stop":
            # Only a whole list is cut: one ended early ("error", "length") ends the request as it is.
            settled = seq.constraint.settled(seq.text, start_text)
            if settled != seq.text:
                # Cut back: the sequence continues from the kept text, re-encoded.
                piece = settled[start_text:]
                seq.generated_ids[start_ids:] = [int(i) for i in self.text_ids(piece)]
                seq.trail.cut_back(piece)
                seq.text = settled

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is not None:
            startup.mark("engine closing")
            with contextlib.suppress(EngineDeadError):
                self.check_alive()  # a death nobody observed yet: shutdown would wait on it
            if getattr(self, "_dead", None) is None:
                if not self.settings.gpu and getattr(self, "log_path", None) is not None:
                    # vLLM's CPU worker ignores the core's exit request (5.9 s per close), so it goes first.
                    # Not with -v: the core would print "Worker proc died unexpectedly".
                    _kill([p for p in self._processes if "Worker" in _name(p)])
                shutdown_llm(llm)
            else:
                _kill(self._processes)  # a dead engine's shutdown can wait on it forever
            del self._llm
            startup.mark("engine closed")


def _name(process: Any) -> str:
    """A process's name, or "" once it is gone."""
    import psutil

    try:
        return str(process.name())
    except psutil.Error:
        return ""


def _kill(processes: list[Any]) -> None:
    """SIGKILL whatever is left of a dead engine's processes (no orphans holding memory)."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
