"""Where a batch's wall time goes, measured in vLLM's own processes (no change to vLLM or to suffice).

vLLM runs as it does for a user: this process (suffice's driver and vLLM's output processing), an engine
core process (scheduler, grammar bitmask) and a worker process (the forward passes, sampling).  The
benchmark puts ``breakdown_site/`` on the children's ``PYTHONPATH``; its ``sitecustomize`` wraps, as
each module is imported, the functions named below, and every process appends the intervals they ran
(``label, start, end``, on the system's monotonic clock) to a file of its own.  Nothing is wrapped
unless ``SUFFICE_BREAKDOWN_DIR`` is set.

The wall time is then split by a sweep: at each instant, the highest activity running in any process
takes it, in this order (what overlaps a forward pass is hidden behind it, as it costs no time):

====================  ==================================================================================
``prefill``           the worker's forward pass, share of the first-segment prompt tokens it computed
``decode``            the same, share of decoded tokens
``round_trips``       the same, share of tokens a segment boundary costs (a continuation's recomputed
                      prompt tokens, the end-of-sequence token that closes a segment), and suffice's
                      work between segments (absorb, next segment, submit) where nothing else runs
``mask``              the grammar bitmask: xgrammar's fill (core), advancing the matcher (core), its
                      application to the logits (worker)
``sampling``          the worker's sampler (logits to tokens, log-probabilities)
``vllm_python``       vLLM's Python between forward passes: scheduling, adding requests and processing
                      outputs (core), output processing and detokenisation (this process)
``suffice_python``    suffice outside generation (prompts, parsing) and its driver loop
``idle``              the engine core waiting with nothing to run (no request, or every request
                      waiting for its grammar to compile)
``ipc``               none of the above: messages between the processes, serialisation, waits
====================  ==================================================================================

A forward pass often holds both prompt and decoded tokens (vLLM adds prompt chunks to a decode step), and
its time is split by what each kind costs at the margin: every pass of the run is fitted, by least squares,
as ``fixed + a x prompt tokens + b x decoded tokens`` (written to the JSON as ``step_model``), each kind of
token gets its ``a`` or ``b`` share and the fixed cost goes to decode (to prefill in a pass that decodes
nothing).  Without a fit (a coefficient below zero, too few passes) the split is by token counts.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import itertools
import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ENV = "SUFFICE_BREAKDOWN_DIR"
#: An experiment, not vLLM's behaviour: a reader of vLLM's shared-memory queues (the engine core waiting for the
#: worker's forward pass, the worker waiting for the next step) blocks on the writer's notification instead of
#: spinning on ``sched_yield`` for a second after each message.
BLOCKING_WAIT = "SUFFICE_BREAKDOWN_BLOCKING_WAIT"
SITE = Path(__file__).resolve().parent / "breakdown_site"

#: The rows of the published table, in the sweep's order (first wins), with what each holds.
ROWS: tuple[tuple[str, str], ...] = (
    ("prefill", "forward passes: first-segment prompt tokens (those the prefix cache does not serve)"),
    ("decode", "forward passes: decoded tokens"),
    (
        "round_trips",
        "between constrained segments: recomputed prompt tokens, the closing end-of-sequence "
        "token, suffice's absorb/next/submit",
    ),
    ("mask", "grammar bitmask: fill, matcher, application to the logits"),
    ("sampling", "sampler: logits to tokens, log-probabilities"),
    ("vllm_python", "vLLM between forward passes: scheduling, adding requests, output processing"),
    ("suffice_python", "suffice: prompts, parsing, its driver loop"),
    ("idle", "engine core with nothing to run (no request, or waiting for a grammar)"),
    ("ipc", "none of these: messages between processes, serialisation, waits"),
)
_RANK = {name: rank for rank, (name, _) in enumerate(ROWS)}
#: Labels recorded in the processes, and the row each is swept into (forward passes are split apart).
_LABELS = {
    "forward": "prefill",
    "mask": "mask",
    "sampling": "sampling",
    "vllm_python": "vllm_python",
    "round_trips": "round_trips",
    "suffice_python": "suffice_python",
    "idle": "idle",
}
#: A forward pass's tokens by kind, and the row each kind's share goes to.
_TOKEN_ROWS = {
    "prefill": "prefill",
    "decode": "decode",
    "continuation_prefill": "round_trips",
    "segment_end_decode": "round_trips",
}
#: Within one process, nested intervals: the inner one's label wins where it is higher in this order.
_NESTED = ("forward", "mask", "sampling", "round_trips", "suffice_python", "vllm_python", "idle")


# ---- recording, in every process -------------------------------------------------------------------------


class Recorder:
    """Appends ``label start end meta`` lines to ``<dir>/<pid>.tsv`` (one write each: a killed process loses
    nothing written)."""

    def __init__(self, folder: Path) -> None:
        self._file = (folder / f"{os.getpid()}.tsv").open("a", buffering=1)
        self._lock = threading.Lock()

    def add(self, label: str, start: float, end: float, meta: object = None) -> None:
        line = f"{label}\t{start:.6f}\t{end:.6f}\t{json.dumps(meta) if meta is not None else ''}\n"
        with self._lock:
            self._file.write(line)

    @contextlib.contextmanager
    def span(self, label: str, meta: object = None) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.add(label, began, time.monotonic(), meta)


_recorder: Recorder | None = None


def recorder() -> Recorder | None:
    """This process's recorder, when the breakdown is on (``SUFFICE_BREAKDOWN_DIR``)."""
    global _recorder
    if _recorder is None and os.environ.get(ENV):
        _recorder = Recorder(Path(os.environ[ENV]))
    return _recorder


def _wrap(
    owner: Any, name: str, label: str | Callable[..., str | None], meta: Callable[..., object] | None = None
) -> None:
    """Record each call of ``owner.name`` under ``label`` (or the label a function of the call gives)."""
    function = owner.__dict__[name]
    if getattr(function, "_breakdown", False):
        return

    @functools.wraps(function)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        rec = recorder()
        if rec is None:
            return function(*args, **kwargs)
        began = time.monotonic()
        result = function(*args, **kwargs)
        chosen = label(args, result) if callable(label) else label
        if chosen is not None:
            rec.add(chosen, began, time.monotonic(), meta(args, result) if meta is not None else None)
        return result

    recorded._breakdown = True  # type: ignore[attr-defined]
    setattr(owner, name, recorded)


def _forward_meta(args: tuple[Any, ...], _result: Any) -> list[tuple[str, int, bool]]:
    """The tokens a forward pass computed: (request id, tokens, still reading its prompt)."""
    output = args[1]
    prefill = {new.req_id for new in output.scheduled_new_reqs}
    cached = output.scheduled_cached_reqs
    for request_id, outputs in zip(cached.req_ids, cached.num_output_tokens, strict=False):
        if outputs == 0:
            prefill.add(request_id)  # a chunked prompt, still being read
    return [(r, n, r in prefill) for r, n in output.num_scheduled_tokens.items()]


def _patch_module(module: ModuleType) -> None:
    """Wrap what ``module`` defines (the module docstring's list)."""
    name = module.__name__
    if name == "vllm.v1.worker.gpu_model_runner":
        runner = module.GPUModelRunner
        _wrap(runner, "execute_model", "forward", _forward_meta)
        _wrap(runner, "sample_tokens", "sampling")
        plain = module.apply_grammar_bitmask

        @functools.wraps(plain)
        def apply(*args: Any, **kwargs: Any) -> Any:
            rec = recorder()
            if rec is None:
                return plain(*args, **kwargs)
            with rec.span("mask"):
                return plain(*args, **kwargs)

        setattr(module, "apply_grammar_bitmask", apply)  # noqa: B010 - a module's global, replaced
    elif name == "vllm.v1.core.sched.scheduler":
        scheduler = module.Scheduler
        _wrap(scheduler, "schedule", "vllm_python")
        _wrap(scheduler, "update_from_output", "vllm_python")
        _wrap(scheduler, "get_grammar_bitmask", "mask")
    elif name == "vllm.v1.structured_output.backend_xgrammar":
        _wrap(module.XgrammarGrammar, "accept_tokens", "mask")
    elif name == "vllm.v1.engine.core":
        # A step that ran no model (every request waiting for its grammar) is idle; so is a wait for work.
        _wrap(module.EngineCore, "step", lambda _args, result: None if result[1] else "idle")
        _wrap(module.EngineCore, "add_request", "vllm_python")
        original = module.EngineCoreProc.__dict__["_process_input_queue"]
        if getattr(original, "_breakdown", False):
            return

        def process_input_queue(core: Any) -> Any:
            rec = recorder()
            idle = not core.has_work()
            began = time.monotonic()
            result = original(core)
            if rec is not None:
                rec.add("idle" if idle else "vllm_python", began, time.monotonic())
            return result

        process_input_queue._breakdown = True  # type: ignore[attr-defined]
        module.EngineCoreProc._process_input_queue = process_input_queue
    elif name == "vllm.v1.engine.output_processor":
        _wrap(module.OutputProcessor, "process_outputs", "vllm_python")
    elif name == "vllm.distributed.device_communicators.shm_broadcast" and os.environ.get(BLOCKING_WAIT):
        condition = module.SpinCondition
        init = condition.__init__

        @functools.wraps(init)
        def blocking(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            self.busy_loop_s = 0  # wait on the writer's notification instead of spinning

        condition.__init__ = blocking


_TARGETS = {
    "vllm.distributed.device_communicators.shm_broadcast",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.structured_output.backend_xgrammar",
    "vllm.v1.engine.core",
    "vllm.v1.engine.output_processor",
}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches each target module once it has been executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in _TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _patch_module(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def use_site() -> None:
    """Put ``breakdown_site/`` on the ``PYTHONPATH`` of the processes started from now on."""
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(SITE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), *paths) if p)


def install() -> None:
    """Wrap vLLM in this process: the targets imported already at once, the others as they are imported."""
    if not (os.environ.get(ENV) or os.environ.get(BLOCKING_WAIT)):
        return
    for name in _TARGETS:
        if name in sys.modules:
            _patch_module(sys.modules[name])
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


# ---- this process: the session that measures ------------------------------------------------------------


@dataclass
class Breakdown:
    """Records one run's intervals in every process and sweeps them into :data:`ROWS`."""

    folder: Path
    seconds: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0
    #: CPU seconds of each engine process (name: seconds) over the measured call.
    cpu: dict[str, float] = field(default_factory=dict)
    #: Decode-only forward passes: sequences -> (passes, mean seconds).
    decode_steps: dict[int, tuple[int, float]] = field(default_factory=dict)
    #: The rows' parts: round trips' recomputed prompt tokens, closing tokens and Python apart.
    details: dict[str, float] = field(default_factory=dict)
    #: CPU seconds other processes on this machine took during the measured call (a shared machine).
    others_cpu: float = 0.0
    #: A forward pass's cost, fitted to this run's passes (:func:`_fit`), or ``None``.
    step_model: dict[str, float] | None = None

    @classmethod
    def start(cls, folder: Path) -> Breakdown:
        """Turn recording on for this process and the engine processes it starts from now on."""
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.tsv"):
            old.unlink()
        os.environ[ENV] = str(folder)
        use_site()
        install()
        return cls(folder)

    def install_suffice(self, engine: Any) -> None:
        """Record one :class:`~suffice.serving.vllm.engine.VLLMEngine`'s driver (its work between segments)."""
        from suffice.grammars.constraint import Constraint

        rec = recorder()
        assert rec is not None
        driver = engine._driver
        _wrap(Constraint, "next_segment", "round_trips")
        for name in ("_absorb", "_credit_read"):
            bound = getattr(driver, name)
            label = "round_trips" if name == "_absorb" else "suffice_python"
            setattr(driver, name, _span(rec, label, bound))
        submit = driver._submit

        def recorded_submit(sequences: list[Any]) -> Iterator[tuple[str, Any]]:
            continued = any(seq.text for seq in sequences)
            generator = submit(sequences)
            while True:
                began = time.monotonic()
                try:
                    request_id, seq = next(generator)
                except StopIteration:
                    return
                meta = {"request": request_id, "sequence": id(seq), "continued": continued}
                rec.add("round_trips" if continued else "suffice_python", began, time.monotonic(), meta)
                yield request_id, seq

        driver._submit = recorded_submit
        generate = engine.generate

        def recorded_generate(*args: Any, **kwargs: Any) -> Any:
            rec.add("generate", time.monotonic(), time.monotonic())
            try:
                return generate(*args, **kwargs)
            finally:
                rec.add("generated", time.monotonic(), time.monotonic())

        engine.generate = recorded_generate

    def measure(self, call: Callable[[], Any], processes: Sequence[Any] = ()) -> Any:
        """Run ``call`` (a ``judge_batch``) and sweep what every process recorded meanwhile."""
        rec = recorder()
        assert rec is not None
        import psutil

        ours = [psutil.Process(), *processes]
        cpu_before = {p.pid: _cpu_seconds(p) for p in ours}
        busy_before = _machine_busy()
        began = time.monotonic()
        result = call()
        ended = time.monotonic()
        busy = _machine_busy() - busy_before
        self.cpu = {f"{_name(p)} ({p.pid})": _cpu_seconds(p) - cpu_before[p.pid] for p in ours}
        self.others_cpu = max(busy - sum(self.cpu.values()), 0.0)
        time.sleep(0.2)  # the children's last lines
        self._sweep(began, ended)
        return result

    # ---- the sweep ----

    def _intervals(
        self, began: float, ended: float
    ) -> tuple[list[tuple[float, float, str, Any]], list[tuple[float, float]]]:
        intervals: list[tuple[float, float, str, Any]] = []
        caller: list[float] = []
        for path in self.folder.glob("*.tsv"):
            for line in path.read_text().splitlines():
                label, start, end, meta = line.split("\t", 3)
                s, e = float(start), float(end)
                if label in ("generate", "generated"):
                    if began <= s <= ended:
                        caller.append(s)
                    continue
                if e < began or s > ended:
                    continue
                intervals.append((max(s, began), min(e, ended), label, json.loads(meta) if meta else None))
        caller.sort()
        generating = list(zip(caller[::2], caller[1::2], strict=False))
        return intervals, generating

    def _sweep(self, began: float, ended: float) -> None:
        intervals, generating = self._intervals(began, ended)
        # Outside generation, the caller's thread is suffice's own Python.
        edges = [began, *[t for pair in generating for t in pair], ended]
        for start, end in zip(edges[::2], edges[1::2], strict=False):
            intervals.append((start, end, "suffice_python", None))
        submits = [m for _, _, label, m in intervals if m and isinstance(m, dict) and "request" in m]
        continued = {m["request"] for m in submits if m["continued"]}
        last: dict[int, str] = {}
        for m in submits:
            last[m["sequence"]] = m["request"]  # in submission order within one file
        final = set(last.values())
        pieces = self._split_forwards(intervals, continued, final)
        self.seconds = dict.fromkeys(_RANK, 0.0)
        self.details = {}
        self.wall = ended - began
        # Elementary sweep over every boundary: each slice goes to the highest-ranked piece covering it.
        points = sorted({began, ended, *[p[0] for p in pieces], *[p[1] for p in pieces]})
        starts = sorted(pieces, key=lambda p: p[0])
        active: list[tuple[float, float, str, float, str]] = []
        index = 0
        for left, right in itertools.pairwise(points):
            while index < len(starts) and starts[index][0] <= left:
                active.append(starts[index])
                index += 1
            active = [p for p in active if p[1] > left]
            best = min(active, key=lambda p: (_RANK[p[2]], -p[3])) if active else (0, 0, "ipc", 0, "ipc")
            self.seconds[best[2]] += right - left
            self.details[best[4]] = self.details.get(best[4], 0.0) + right - left

    def _split_forwards(
        self, intervals: list[tuple[float, float, str, Any]], continued: set[str], final: set[str]
    ) -> list[tuple[float, float, str, float, str]]:
        """Each interval as (start, end, row, weight, detail); a forward pass becomes one piece per row, its span cut in
        proportion to its tokens (rows stay distinct in the sweep)."""
        pieces: list[tuple[float, float, str, float, str]] = []
        forwards = sorted((i for i in intervals if i[2] == "forward"), key=lambda i: i[0])
        last_decode: dict[str, int] = {}
        for number, (_, _, _, meta) in enumerate(forwards):
            for internal, _, prefilling in meta or []:
                if not prefilling:
                    last_decode[_external(internal)] = number
        closing = {(n, rid) for rid, n in last_decode.items() if rid not in final}
        tokens: dict[str, int] = defaultdict(int)
        steps: dict[int, list[float]] = defaultdict(list)
        passes: list[tuple[float, float, dict[str, int]]] = []
        for number, (start, end, _, meta) in enumerate(forwards):
            counts: dict[str, int] = defaultdict(int)
            for internal, n, prefilling in meta or []:
                rid = _external(internal)
                if prefilling:
                    token_kind = "continuation_prefill" if rid in continued else "prefill"
                elif (number, rid) in closing:
                    token_kind = "segment_end_decode"
                else:
                    token_kind = "decode"
                counts[token_kind] += n
                tokens[token_kind] += n
            if meta and not counts["prefill"] + counts["continuation_prefill"]:
                steps[len(meta)].append(end - start)
            if counts:
                passes.append((start, end, counts))
        self.step_model = _fit(passes)
        for start, end, counts in passes:
            cut = start
            for kind, share in _shares(counts, self.step_model).items():
                width = (end - start) * share
                pieces.append((cut, cut + width, _TOKEN_ROWS[kind], 1.0, kind))
                cut += width
        self.tokens = dict(tokens)
        self.decode_steps = {n: (len(v), sum(v) / len(v)) for n, v in sorted(steps.items())}
        for start, end, label, _ in intervals:
            if label != "forward":
                detail = "round_trip_python" if label == "round_trips" else _LABELS[label]
                pieces.append((start, end, _LABELS[label], 1.0 / (1 + _NESTED.index(label)), detail))
        return pieces

    def rows(self) -> dict[str, float]:
        """Seconds per row of :data:`ROWS`; they sum to :attr:`wall`."""
        return {name: self.seconds.get(name, 0.0) for name, _ in ROWS}


def _prompt_and_decoded(counts: dict[str, int]) -> tuple[int, int]:
    return counts.get("prefill", 0) + counts.get("continuation_prefill", 0), counts.get("decode", 0) + counts.get(
        "segment_end_decode", 0
    )


def _fit(passes: list[tuple[float, float, dict[str, int]]]) -> dict[str, float] | None:
    """A forward pass's cost as ``fixed + per_prompt_token x prompt tokens + per_decoded_token x decoded tokens``,
    fitted to every pass by least squares; ``None`` when a coefficient comes out negative (too few kinds of pass)."""
    import numpy as np

    if len(passes) < 8:
        return None
    rows = np.array([[1.0, *_prompt_and_decoded(counts)] for _, _, counts in passes])
    times = np.array([end - start for start, end, _ in passes])
    coefficients = np.linalg.lstsq(rows, times, rcond=None)[0]
    if (coefficients < 0).any():
        return None
    fixed, prompt, decoded = (float(c) for c in coefficients)
    return {"fixed_s": fixed, "per_prompt_token_s": prompt, "per_decoded_token_s": decoded}


def _shares(counts: dict[str, int], model: dict[str, float] | None) -> dict[str, float]:
    """How one pass's time divides among its kinds of token: each kind's marginal cost under ``model`` (the fixed
    cost to decode when the pass decodes anything, else to prefill), or in proportion to tokens without a model."""
    if model is None:
        total = sum(counts.values())
        return {kind: n / total for kind, n in counts.items() if n}
    cost: dict[str, float] = {
        kind: n * (model["per_prompt_token_s"] if "prefill" in kind else model["per_decoded_token_s"])
        for kind, n in counts.items()
        if n
    }
    _, decoded = _prompt_and_decoded(counts)
    owner = "decode" if counts.get("decode") else "segment_end_decode" if decoded else "prefill"
    if owner not in cost:
        owner = next(iter(cost))
    cost[owner] += model["fixed_s"]
    seconds = sum(cost.values()) or 1.0
    return {kind: c / seconds for kind, c in cost.items()}


def _external(internal: str) -> str:
    """vLLM's internal request id is ours with a suffix (``suffice-12-ab12cd34``)."""
    head, _, tail = internal.rpartition("-")
    return head if head.startswith("suffice-") and tail and not tail.isdigit() else internal


def _span(rec: Recorder, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        with rec.span(label):
            return function(*args, **kwargs)

    return recorded


def _machine_busy() -> float:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(process: Any) -> float:
    try:
        times = process.cpu_times()
    except Exception:  # gone
        return 0.0
    return float(times.user + times.system)


def _name(process: Any) -> str:
    try:
        return str(process.name())
    except Exception:
        return "?"
