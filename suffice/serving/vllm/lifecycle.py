"""The in-process vLLM engine's life: its start (the ``LLM`` and its arguments), its liveness (a dead engine process
told within :data:`~suffice.serving.vllm.driver.WATCH_INTERVAL`) and its shutdown (no process left behind)."""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path
from typing import Any

from suffice.exceptions import EngineDeadError, EngineError
from suffice.serving import startup
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import MachineConfig, engine_output, log_tail
from suffice.serving.weights import ModelRef


def llm_kwargs(config: EngineConfig, settings: MachineConfig, ref: ModelRef) -> dict[str, Any]:
    """The arguments of vLLM's ``LLM`` for ``config`` on this machine (``benchmarks/bench_startup.py`` builds a bare
    vLLM engine with the same ones)."""
    kwargs: dict[str, Any] = {
        "model": str(ref.path),
        "tokenizer": str(ref.path),
        "structured_outputs_config": {"backend": config.backend_name},
        "dtype": settings.dtype,
        # Requests are served in their sequence's rank, not their own order (suffice.serving.scheduling).
        "scheduling_policy": "priority",
        **config.vllm_kwargs(),
    }
    if settings.block_size is not None:
        kwargs["block_size"] = settings.block_size
    return kwargs


def start_llm(kwargs: dict[str, Any], ref: ModelRef, verbose: bool) -> tuple[Any, Path | None]:
    """vLLM's ``LLM`` built with ``kwargs``, and the file its output went to (``None``: the terminal, with -v)."""
    with engine_output(verbose) as log:
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError(
                'vLLM is not installed: `pip install "suffice[gpu]"` (GPU) or `"suffice[cpu]"` (CPU)'
            ) from exc
        startup.mark("vllm imported")
        try:
            llm = LLM(**kwargs)
        except Exception as exc:
            tail = log_tail(log)
            detail = f"\nlast lines of the engine log {log}:\n{tail}" if tail else ""
            raise EngineError(f"vLLM could not start on {ref.path}: {exc}{detail}") from exc
        startup.mark("engine built")
    return llm, log


def kv_capacity(llm: Any) -> int | None:
    """The tokens vLLM's KV cache holds (None where vLLM does not say)."""
    cache = getattr(getattr(llm.llm_engine, "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if not isinstance(blocks, int) or not isinstance(size, int) or blocks <= 0 or size <= 0:
        return None
    return blocks * size


def engine_processes() -> list[Any]:
    """The engine's processes (vLLM names them ``VLLM::...``), children of this one."""
    import psutil

    named = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "VLLM" in child.name() or any("VLLM" in part for part in child.cmdline()[:1]):
                named.append(child)
    return named


class Lifecycle:
    """One started ``LLM``: whether its processes live, and how it stops."""

    def __init__(self, llm: Any, log_path: Path | None) -> None:
        self.llm = llm
        self.log_path = log_path
        #: The engine-core and worker processes started for this engine (none when vLLM runs it in this process).
        self.processes = engine_processes()
        #: Why the engine is dead, once it is seen to be.
        self.dead: str | None = None

    def check_alive(self) -> None:
        """Raise :class:`EngineDeadError` if an engine process has exited (any cause)."""
        import psutil

        if self.dead is None:
            for process in self.processes:
                try:
                    gone = not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
                except psutil.Error:
                    gone = True
                if gone:
                    self.dead = f"the engine process {process.pid} exited"
                    break
        if self.dead is None:
            core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            if getattr(getattr(core, "resources", None), "engine_dead", False):
                self.dead = "vLLM reports its engine core dead"
        if self.dead is not None:
            raise EngineDeadError(
                f"{self.dead}: nothing more can be judged in this run (killed, or out of memory? "
                f"see `dmesg` and {self.log_path}); what was done is kept, rerun the same command to resume"
            )

    def stop(self, gpu: bool) -> None:
        """Stop the engine and every process of it."""
        startup.mark("engine closing")
        with contextlib.suppress(EngineDeadError):
            self.check_alive()  # a death nobody observed yet: shutdown would wait on it
        if self.dead is None:
            if not gpu and self.log_path is not None:
                # vLLM's CPU worker ignores the core's exit request (5.9 s per close), so it goes first.
                # Not with -v: the core would print "Worker proc died unexpectedly".
                _kill([p for p in self.processes if "Worker" in _name(p)])
            shutdown_llm(self.llm)
        else:
            _kill(self.processes)  # a dead engine's shutdown can wait on it forever
        self.llm = None
        startup.mark("engine closed")


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
