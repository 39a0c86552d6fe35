"""How to build an engine: one typed configuration, checked once before anything starts; errors name the parameter,
and a setting the chosen engine cannot use is refused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.exceptions import ConfigError
from suffice.network import check_url, refuse_plain_http
from suffice.settings import check, check_engine, setting, tagged
from suffice.settings import recorded as record_verdict_settings

#: In-process vLLM; transformers + Outlines where vLLM cannot run; an OpenAI-compatible vLLM server.
ENGINES = ("vllm", "transformers", "openai")
BACKENDS = ("outlines", "xgrammar", "guidance")
#: Chosen by measurement (README, "Structured-output backends").
DEFAULT_BACKEND = "xgrammar"

DEFAULT_CONCURRENCY = 32
#: openai: the longest ``request_timeout`` taken, in seconds (a day).
MAX_REQUEST_TIMEOUT = 86_400.0

#: What an in-process vLLM engine may compute in (``EngineConfig.dtype``).
DTYPES = ("float32", "bfloat16")

#: Schemes a proxy may have (httpx's; ``socks5`` needs ``socksio``).
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")

_SERVER = "only the openai engine talks to a server"


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings, each declared once (:mod:`suffice.settings`): its flag, checks, the engines that take
    it and whether a resume must match it come from its field.  ``None`` means "the default for this engine"."""

    kind: str = setting(
        "vllm",
        "vllm (in-process), transformers (where vLLM cannot run) or openai (an existing vLLM server)",
        flag="--engine",
        dest="engine",
        label="engine",
        choices=ENGINES,
        in_process=True,
        verdict=True,
        record="engine",
    )
    backend: str | None = setting(
        None,
        f"structured-output backend (vllm engine; default {DEFAULT_BACKEND})",
        choices=BACKENDS,
        engines=("vllm",),
        instead="the transformers engine always uses Outlines; a server's backend is set where it starts",
        in_process=True,
        verdict=True,
    )
    model: Path | None = setting(
        None,
        "local Hugging Face model folder (default: embedded SmolLM2-135M-Instruct)",
        engines=("vllm", "transformers"),
        instead="a server serves its own model: name it with served_model",
        in_process=True,
        verdict=True,
    )
    max_model_len: int | None = setting(
        None,
        "context window: prompt plus output must fit in this many tokens (default: the model's)",
        minimum=1024,
        unit=" tokens",
        in_process=True,
        verdict=True,
        vllm="max_model_len",
    )
    enforce_eager: bool = setting(
        True,
        "let vLLM compile the model (slower start, faster decode)",
        flag="--compile",
        dest="compile",
        negate=True,
        engines=("vllm",),
        instead="vLLM only",
        in_process=True,
        vllm="enforce_eager",
    )
    prefix_caching: bool = setting(
        True,
        "vLLM's prefix cache (prompts sharing a start are read once)",
        flag="",
        engines=("vllm",),
        instead="vLLM only",
        vllm="enable_prefix_caching",
    )
    cores: str | None = setting(
        None,
        "CPU build only: cores for the engine's threads, e.g. 0-3 (default: all allowed)",
        engines=("vllm",),
        instead="only an in-process vLLM engine binds threads",
        build="cpu",
        in_process=True,
    )
    kv_cache_gib: float | None = setting(
        None,
        "CPU build only: KV cache in GiB (default: 20% of available memory)",
        whole=True,
        minimum=1,
        unit=" (GiB)",
        engines=("vllm",),
        instead="only an in-process vLLM engine has a KV cache to size",
        build="cpu",
        in_process=True,
    )
    dtype: str | None = setting(
        None,
        "vllm engine: compute dtype (default: bfloat16 where the CPU or GPU has it natively, else float32; "
        "float32 repeats decision probabilities to the last digits)",
        choices=DTYPES,
        engines=("vllm",),
        instead="only the in-process vLLM engine's compute dtype is chosen here",
        in_process=True,
        verdict=True,
    )
    tensor_parallel_size: int | None = setting(
        None,
        "GPU build only: split the model across N GPUs (default 1)",
        metavar="N",
        minimum=1,
        unit=" (GPUs)",
        engines=("vllm",),
        instead="only an in-process vLLM engine splits a model across GPUs; a server's is set where it starts",
        build="gpu",
        in_process=True,
        # Tensor parallelism can change bf16 sums, so a verdict.
        verdict=True,
        vllm="tensor_parallel_size",
    )
    gpu_memory_utilization: float | None = setting(
        None,
        "GPU build only: share of each GPU's memory vLLM may take, in (0, 1] (default: vLLM's)",
        metavar="F",
        above=0,
        maximum=1,
        unit=" (a share)",
        engines=("vllm",),
        instead="only an in-process vLLM engine reserves GPU memory; a server's is set where it starts",
        build="gpu",
        in_process=True,
        vllm="gpu_memory_utilization",
    )
    base_url: str | None = setting(
        None,
        "openai engine: the server, e.g. http://127.0.0.1:8001 (/v1 is added)",
        engines=("openai",),
        instead=_SERVER,
        in_process=True,
        verdict=True,
        record="weights",
    )
    api_key_file: Path | None = setting(
        None,
        "file holding the key of the server judged through: the openai engine's (with judge --server: the "
        "service's bearer token)",
        flag="--api-key-file",
        dest="engine_key_file",
        engines=("openai",),
        instead=_SERVER,
    )
    tokenizer: Path | None = setting(
        None,
        "openai engine: local tokenizer folder (default: the server's /tokenize)",
        engines=("openai",),
        instead="the in-process engines use the model folder's tokenizer",
        in_process=True,
    )
    served_model: str | None = setting(
        None,
        "openai engine: model name on the server (default: its only)",
        engines=("openai",),
        instead="the in-process engines take a local folder (model)",
        in_process=True,
        verdict=True,
        record="model",
    )
    max_concurrency: int | None = setting(
        None,
        f"openai engine: requests in flight, across all callers of one engine (default {DEFAULT_CONCURRENCY})",
        minimum=1,
        maximum=1024,
        engines=("openai",),
        instead="the in-process engines batch every request they are given",
        in_process=True,
    )
    request_timeout: float = setting(
        300.0,
        "openai engine: seconds one HTTP call may take before it is retried",
        flag="",
        # A bound, not "no limit": the socket layer cannot wait 1e10 s (OverflowError).
        above=0,
        maximum=MAX_REQUEST_TIMEOUT,
        unit=" seconds (a day)",
    )
    retries: int = setting(
        3,
        "openai engine: retries of a call that failed in a way a retry can fix (connection, 5xx, 429)",
        flag="",
        minimum=0,
        maximum=10,
    )
    proxy: str | None = setting(
        None,
        "openai engine: reach the server through this proxy (HTTP_PROXY, HTTPS_PROXY and ALL_PROXY are ignored: a "
        "proxy set for other tools would get the key and every prompt)",
        metavar="URL",
        engines=("openai",),
        instead=_SERVER,
        in_process=True,
    )
    allow_insecure_http: bool = setting(
        False,
        "openai engine (and judge --server): allow a plain http:// address on another machine with a key (the key "
        "and prompts go unencrypted)",
        engines=("openai",),
        instead="openai only",
    )
    seed: int = setting(0, "vLLM's sampling seed", flag="", vllm="seed")
    top_logprobs: int = setting(
        8,
        "top log-probabilities per generated token (for decision probabilities); 0 turns them off",
        flag="",
        minimum=0,
        maximum=20,
    )
    verbose: bool = setting(False, "show the engine's own log and its settings", also=("-v",))

    def __post_init__(self) -> None:
        check(self)  # types, choices and bounds, in field order (the engine first)
        check_engine(self, self.kind)
        if self.kind == "openai":
            if self.base_url is None:
                raise ConfigError("base_url", None, "the openai engine needs the server's address")
            parts = check_url("base_url", self.base_url, ("http", "https"), "give the server's key with --api-key-file")
            if not self.allow_insecure_http:
                refuse_plain_http(
                    "base_url",
                    self.base_url,
                    parts,
                    "the key and every prompt",
                    "--allow-insecure-http (allow_insecure_http=True)",
                )
            if self.proxy is not None:
                check_url("proxy", self.proxy, PROXY_SCHEMES, "use a proxy that needs none")

    @property
    def concurrency(self) -> int:
        """openai: requests in flight at once."""
        return self.max_concurrency or DEFAULT_CONCURRENCY

    @property
    def backend_name(self) -> str:
        """The backend that enforces constraints, as recorded with results."""
        if self.kind == "vllm":
            return self.backend or DEFAULT_BACKEND
        if self.kind == "transformers":
            return "outlines-transformers"
        return "server"

    def recorded(self, settings: dict[str, str]) -> dict[str, str]:
        """An engine's :meth:`~suffice.serving.base.Engine.settings_of` with every setting that can change a verdict
        and is not recorded yet added, where it is set (so a new one is recorded without a line here)."""
        return record_verdict_settings(self, self.kind, settings)

    def vllm_kwargs(self) -> dict[str, Any]:
        """The keywords of vLLM's ``LLM`` taken from these settings as they are (those set)."""
        return {
            d.spec.vllm: getattr(self, d.name)
            for d in tagged(type(self))
            if d.spec.vllm is not None and getattr(self, d.name) is not None
        }
