"""How to build an engine: one typed configuration, checked once before anything starts; errors name the parameter,
and a setting the chosen engine cannot use is refused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suffice.exceptions import ConfigError
from suffice.network import check_url, refuse_plain_http

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

#: Settings only some engines take: (field, engines that take it, what to do instead).  Which suit vLLM's build is
#: checked when it starts (:func:`suffice.serving.machine.check_build`).
_ONLY_FOR: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("backend", ("vllm",), "the transformers engine always uses Outlines; a server's backend is set where it starts"),
    ("model", ("vllm", "transformers"), "a server serves its own model: name it with served_model"),
    ("kv_cache_gib", ("vllm",), "only an in-process vLLM engine has a KV cache to size"),
    ("cores", ("vllm",), "only an in-process vLLM engine binds threads"),
    ("dtype", ("vllm",), "only the in-process vLLM engine's compute dtype is chosen here"),
    (
        "tensor_parallel_size",
        ("vllm",),
        "only an in-process vLLM engine splits a model across GPUs; a server's is set where it starts",
    ),
    (
        "gpu_memory_utilization",
        ("vllm",),
        "only an in-process vLLM engine reserves GPU memory; a server's is set where it starts",
    ),
    ("base_url", ("openai",), "only the openai engine talks to a server"),
    ("api_key_file", ("openai",), "only the openai engine talks to a server"),
    ("tokenizer", ("openai",), "the in-process engines use the model folder's tokenizer"),
    ("served_model", ("openai",), "the in-process engines take a local folder (model)"),
    ("max_concurrency", ("openai",), "the in-process engines batch every request they are given"),
    ("proxy", ("openai",), "only the openai engine talks to a server"),
)
#: Schemes a proxy may have (httpx's; ``socks5`` needs ``socksio``).
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings.  ``None`` means "the default for this engine"."""

    kind: str = "vllm"
    #: vLLM only: the structured-output backend (default :data:`DEFAULT_BACKEND`).
    backend: str | None = None
    #: A local Hugging Face folder; ``None``: the embedded SmolLM2-135M-Instruct.
    model: Path | None = None
    #: Prompt plus output must fit in this many tokens (default: the model's own).
    max_model_len: int | None = None
    enforce_eager: bool = True
    prefix_caching: bool = True
    #: vLLM on CPU: KV cache in GiB; ``None``: a share of the memory available at start-up.
    kv_cache_gib: float | None = None
    #: vLLM on CPU: cores for the engine's threads, like ``"0-3"``; ``None``: the affinity mask.
    cores: str | None = None
    #: vLLM: ``float32`` or ``bfloat16``; ``None``: bfloat16 where the CPU (``avx512_bf16``, ``amx_bf16``) or GPU
    #: has it, else float32 on a CPU and the weights' own on a GPU.
    dtype: str | None = None
    #: vLLM on a GPU: GPUs one model is split across; ``None``: vLLM's default (1).
    tensor_parallel_size: int | None = None
    #: vLLM on a GPU: share of each GPU's memory the engine may take, in (0, 1]; ``None``: vLLM's default.
    gpu_memory_utilization: float | None = None
    #: Show the engine's own log lines and the settings read off the machine.
    verbose: bool = False
    seed: int = 0
    #: Top log-probabilities per generated token (for decision probabilities); 0 turns them off.
    top_logprobs: int = 8
    #: openai: the server's address, like ``http://127.0.0.1:8001`` (``/v1`` is added).
    base_url: str | None = None
    #: openai: a file holding the server's API key (sent as a bearer token).
    api_key_file: Path | None = None
    #: openai: a local tokenizer folder; ``None``: the server's ``/tokenize`` route.
    tokenizer: Path | None = None
    #: openai: the model name on the server; ``None``: the server's only model.
    served_model: str | None = None
    #: openai: requests in flight at once (across all callers of one engine); ``None``: 32.
    max_concurrency: int | None = None
    #: openai: seconds one HTTP call may take before it is retried.
    request_timeout: float = 300.0
    #: openai: retries of a call that failed in a way a retry can fix (connection, 5xx, 429).
    retries: int = 3
    #: openai: the proxy to reach the server through, like ``http://proxy:3128``; ``None``: none.  Never taken from
    #: HTTP_PROXY, HTTPS_PROXY or ALL_PROXY: a proxy set for other tools would get the key and every prompt.
    proxy: str | None = None
    #: openai: allow plain ``http://`` to a host other than this machine (the key and the prompts travel unencrypted).
    allow_insecure_http: bool = False

    def __post_init__(self) -> None:
        for name in ("model", "api_key_file", "tokenizer"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        if self.kind not in ENGINES:
            raise ConfigError("engine", self.kind, f"must be one of {', '.join(ENGINES)}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ConfigError("backend", self.backend, f"must be one of {', '.join(BACKENDS)}")
        for name, engines, instead in _ONLY_FOR:
            value = getattr(self, name)
            if value is not None and self.kind not in engines:
                raise ConfigError(name, str(value), f"not used by the {self.kind} engine: {instead}")
        if self.kind != "vllm":
            for name in ("enforce_eager", "prefix_caching"):
                if not getattr(self, name):
                    raise ConfigError(name, False, f"not used by the {self.kind} engine (vLLM only)")
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
        elif self.allow_insecure_http:
            raise ConfigError("allow_insecure_http", True, f"not used by the {self.kind} engine (openai only)")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ConfigError("dtype", self.dtype, f"must be one of {', '.join(DTYPES)}")
        if self.max_model_len is not None and self.max_model_len < 1024:
            raise ConfigError("max_model_len", self.max_model_len, "must be at least 1024 tokens")
        if self.kv_cache_gib is not None and not (self.kv_cache_gib >= 1 and float(self.kv_cache_gib).is_integer()):
            raise ConfigError("kv_cache_gib", self.kv_cache_gib, "must be a whole number of GiB, at least 1")
        if self.tensor_parallel_size is not None and not self.tensor_parallel_size >= 1:
            raise ConfigError("tensor_parallel_size", self.tensor_parallel_size, "must be at least 1 (GPUs)")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(
                "gpu_memory_utilization", self.gpu_memory_utilization, "must be more than 0 and at most 1 (a share)"
            )
        if not 0 <= self.top_logprobs <= 20:
            raise ConfigError("top_logprobs", self.top_logprobs, "must be between 0 and 20")
        if self.max_concurrency is not None and not 1 <= self.max_concurrency <= 1024:
            raise ConfigError("max_concurrency", self.max_concurrency, "must be between 1 and 1024")
        if not 0 < self.request_timeout <= MAX_REQUEST_TIMEOUT:
            # A bound, not "no limit": the socket layer cannot wait 1e10 s (OverflowError).
            raise ConfigError(
                "request_timeout",
                self.request_timeout,
                f"must be more than 0 and at most {MAX_REQUEST_TIMEOUT:g} seconds (a day)",
            )
        if not 0 <= self.retries <= 10:
            raise ConfigError("retries", self.retries, "must be between 0 and 10")

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
