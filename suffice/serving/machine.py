"""An engine's machine config (:class:`MachineConfig`): cores, KV cache, dtype, log level read off the machine (the
environment variables vLLM reads).

vLLM's CPU thread binding "auto" pins every thread to core 0 of a 2-core machine (64 prompts: 7.1-8.7 s against
5.0-6.2 s on both), so cores come from the affinity mask and the KV cache from available memory, both within cgroup
limits.  On a GPU only the dtype and log level apply.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from suffice.exceptions import ConfigError, OutputWriteError
from suffice.files import open_output
from suffice.serving.cgroups import cgroup_limits
from suffice.serving.engine_config import EngineConfig
from suffice.settings import tagged

#: Share of the memory available at start-up given to the KV cache, and its bounds.
KV_SHARE = 0.2
KV_MIN_GIB = 1
KV_MAX_GIB = 8
CPU_BLOCK_SIZE = 32


#: CPU flags that mean native bfloat16 arithmetic.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class MachineConfig:
    """What the machine gives the engine (cores, KV cache, dtype), each with where it came from: an engine's machine
    config, read off the hardware and the engine's settings."""

    cores: tuple[int, ...]
    kv_cache_gib: float
    available_gib: float | None
    cores_from: str
    kv_from: str
    #: The dtype the engine computes in: ``auto`` (the weights' own), ``float32`` or ``bfloat16``.
    dtype: str = "auto"
    dtype_from: str = "the weights"
    #: KV block size (tokens); ``None`` leaves vLLM's default.
    block_size: int | None = None
    #: vLLM runs on a GPU: the CPU settings (cores, KV cache) are not applied.
    gpu: bool = False

    def describe(self) -> str:
        if self.gpu:
            return f"engine on a GPU; dtype {self.dtype} ({self.dtype_from})"
        return (
            f"engine threads bound to cores {core_ranges(list(self.cores))} ({self.cores_from}); "
            f"KV cache {self.kv_cache_gib:g} GiB ({self.kv_from}); dtype {self.dtype} ({self.dtype_from})"
        )


def gpu_build() -> bool:
    """Whether vLLM runs on a GPU here (torch sees a CUDA device); read when an engine starts, never on import."""
    try:
        import torch
    except ImportError:  # no vLLM either: starting the engine says what to install
        return False
    return bool(torch.cuda.is_available())


def check_build(config: EngineConfig, *, gpu: bool) -> None:
    """Refuse settings the installed vLLM build cannot use (known only on the machine that starts the engine)."""
    # Settings for vLLM's CPU build, and for its GPU build (given above 1 for tensor_parallel_size): tagged so.
    for name in (d.name for d in tagged(type(config), build="cpu" if gpu else "gpu")):
        value = getattr(config, name)
        if value is None or (name == "tensor_parallel_size" and value == 1):
            continue
        raise ConfigError(
            name,
            value,
            "a setting for vLLM's CPU build, and vLLM runs on a GPU here "
            "(size its memory with gpu_memory_utilization instead)"
            if gpu
            else 'needs vLLM\'s GPU build on a machine with a GPU (`pip install "suffice[gpu]"`); '
            "vLLM runs on the CPU here",
        )


def _proc_line(path: str, prefix: str) -> str | None:
    """The first line of ``path`` that starts with ``prefix`` (``None`` where there is none or it cannot be read)."""
    with contextlib.suppress(OSError), open(path) as handle:
        return next((line for line in handle if line.startswith(prefix)), None)
    return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where it cannot be read)."""
    line = _proc_line("/proc/cpuinfo", "flags")
    return set(line.split(":", 1)[1].split()) if line else set()


def native_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX-512 BF16 or AMX), from its flags."""
    flags = cpu_flags()
    return any(flag in flags for flag in BF16_FLAGS)


def gpu_bf16() -> bool:
    """Whether the GPU torch sees computes in bfloat16 (compute capability 8.0 and up); read only on a GPU."""
    try:
        import torch

        return bool(torch.cuda.is_bf16_supported())
    except (ImportError, AssertionError, RuntimeError):  # no torch, or no usable device after all
        return False


def compute_dtype(gpu: bool, requested: str | None = None) -> tuple[str, str]:
    """The dtype the engine computes in, and why.  ``requested`` always wins.  Otherwise bfloat16 where the
    hardware has it (a GPU with bfloat16, a CPU with ``avx512_bf16`` or ``amx_bf16``), else float32 on a CPU and
    the weights' own on an older GPU.

    bfloat16 was 1.25-1.44x faster than float32 on a CPU with native support (48 items, benchmarks/README.md) and
    is a GPU's own; emulated on a CPU without it, it took twice float32's time.  Its decision probabilities move
    with the batch a request shares (the sums run in another order) within the tolerance that
    ``tests/serving/test_dtype_engine.py`` states, where float32 repeats to the last digits: ``--dtype float32``
    when that matters more than speed.
    """
    if requested is not None:
        native = gpu or native_bf16()
        return requested, "--dtype" if native or requested == "float32" else "--dtype; emulated on this CPU: slow"
    if gpu:
        if gpu_bf16():
            return "bfloat16", "a GPU with bfloat16; --dtype float32 for reproducible probabilities"
        return "auto", "the weights' own: this GPU has no bfloat16"
    if native_bf16():
        return "bfloat16", "native bfloat16 on this CPU; --dtype float32 for reproducible probabilities"
    return "float32", "no native bfloat16 on this CPU (emulated it is slower)"


def host_available_gib() -> float | None:
    """``MemAvailable`` from ``/proc/meminfo`` (Linux), else ``None``."""
    line = _proc_line("/proc/meminfo", "MemAvailable:")
    return int(line.split()[1]) / 1024**2 if line else None


def available_memory_gib() -> float | None:
    """What this process may still use: the host's available memory, or less under a cgroup limit."""
    host = host_available_gib()
    free = cgroup_limits().memory_free
    if free is None:
        return host
    return free / 1024**3 if host is None else min(host, free / 1024**3)


def quota_cores(allowed: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    """The affinity mask, or its first cores where a CPU quota allows fewer (whole CPUs: a throttled OpenMP thread
    stalls the others at every barrier)."""
    cpus = cgroup_limits().cpus
    whole = max(1, int(cpus)) if cpus is not None else len(allowed)
    if whole >= len(allowed):
        return allowed, "the process's affinity mask"
    return allowed[:whole], f"{whole} of {len(allowed)} cores in the affinity mask: the cgroup's CPU quota is {cpus:g}"


def parse_cores(spec: str) -> tuple[int, ...]:
    """``"0-3,6"`` → ``(0, 1, 2, 3, 6)``; errors name the ``cores`` parameter."""
    cores: set[int] = set()
    try:
        for part in spec.split(","):
            lo, _, hi = part.strip().partition("-")
            first, last = int(lo), int(hi or lo)
            if first < 0 or last < first:
                raise ValueError(part)
            cores.update(range(first, last + 1))
    except ValueError as exc:
        raise ConfigError("cores", spec, "must be a list of cores like 0-3,6") from exc
    return tuple(sorted(cores))


def core_ranges(cores: list[int]) -> str:
    # A run of consecutive cores keeps one difference between core and position.
    runs = [[core for _, core in run] for _, run in itertools.groupby(enumerate(cores), lambda p: p[1] - p[0])]
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def machine_config(config: EngineConfig, *, gpu: bool = False) -> MachineConfig:
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    if config.cores is not None:
        cores = parse_cores(config.cores)
        outside = sorted(set(cores) - set(allowed))
        if outside:
            raise ConfigError("cores", config.cores, f"cores {outside} are outside this process's affinity {allowed}")
        cores_from = "--cores"
    else:
        cores, cores_from = quota_cores(allowed)
    available = available_memory_gib()
    if config.kv_cache_gib is not None:
        kv, kv_from = config.kv_cache_gib, "--kv-cache-gib"
    elif available is None:
        kv, kv_from = 2.0, "memory unknown: default"
    else:
        kv = float(int(min(max(available * KV_SHARE, KV_MIN_GIB), KV_MAX_GIB)))
        kv_from = f"{KV_SHARE:.0%} of {available:.1f} GiB available"
    dtype, dtype_from = compute_dtype(gpu, config.dtype)
    # A continuation recomputes its prompt's last partial KV block: 32 (not vLLM's CPU 128) is the least CPU prefers.
    block_size = None if gpu else CPU_BLOCK_SIZE
    return MachineConfig(cores, kv, available, cores_from, kv_from, dtype, dtype_from, block_size, gpu)


def apply_machine_config(settings: MachineConfig, *, verbose: bool = False) -> None:
    """Set the environment vLLM reads at start-up (its engine process inherits it)."""
    if not settings.gpu:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(int(settings.kv_cache_gib), 1))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = core_ranges(list(settings.cores))
    os.environ["VLLM_LOGGING_LEVEL"] = "INFO" if verbose else "ERROR"
    # vLLM learns its own address by connecting a UDP socket to 8.8.8.8 (get_ip) unless told it: a run tries no
    # address off this machine.  One the user set is kept (a machine whose loopback vLLM must not use).
    os.environ.setdefault("VLLM_HOST_IP", host_ip())
    # A head segment compiles in 3-8 s (vLLM's limit: 5 s).  Its outlines disk cache stays off: a copy per request.
    os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", "120")
    if not verbose:
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"
        os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"


def host_ip() -> str:
    """The address vLLM gives itself: the node's in a Ray worker (Ray knows it already), else loopback (one engine
    on one machine talks only to its own processes)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return str(ray.util.get_node_ip_address())
    return "127.0.0.1"


def engine_log_path() -> Path | None:
    """The hidden engine output's file: the cache's ``logs`` folder, else a temporary ``suffice-logs``, else ``None``
    (with a warning; a read-only root filesystem is no reason for the engine to fail)."""
    from suffice.serving.weights import cache_root

    name = f"engine-{os.getpid()}.log"
    failures = []
    for folder in (cache_root() / "logs", Path(tempfile.gettempdir()) / "suffice-logs"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # The temporary folder is shared: a neighbour's link planted at this name is refused, not followed.
            open_output(folder / name, "append", private=True).close()
        except (OutputWriteError, OSError) as exc:
            failures.append(f"{folder}: {exc.reason if isinstance(exc, OutputWriteError) else exc.strerror or exc}")
            continue
        return folder / name
    warnings.warn(
        f"the engine's log cannot be written ({'; '.join(failures)}): its output is shown here instead "
        "(set SUFFICE_CACHE to a writable folder to hide it)",
        stacklevel=3,
    )
    return None


@contextlib.contextmanager
def engine_output(verbose: bool) -> Iterator[Path | None]:
    """While the engine starts, send descriptors 1 and 2 to a log file, which its engine process inherits for life
    (~335 lines for a 50-item demo); ours are restored at once.  With ``verbose`` nothing is redirected."""
    path = None if verbose else engine_log_path()
    if path is None:
        yield None
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with open_output(path, "append", private=True) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


def log_tail(path: Path | None, lines: int = 15) -> str:
    """The last lines of an engine log, for an error message."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
