"""The command-line options that make an engine, shared by ``judge``, ``calibrate`` and
``serve``; they become an :class:`~suffice.serving.engine_config.EngineConfig`, whose
checks decide what goes with what."""

from __future__ import annotations

import argparse
from pathlib import Path

from suffice.config import BACKENDS, ENGINES
from suffice.serving.engine_config import EngineConfig


def add_engine_args(p: argparse.ArgumentParser, key_option: str = "--api-key-file") -> None:
    """``key_option`` names the openai engine's key file option (``serve`` keeps
    ``--api-key-file`` for its own clients' key)."""
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="vllm",
        help="vllm (in-process), transformers (where vLLM cannot run) or openai (an existing vLLM server)",
    )
    p.add_argument("--model", type=Path, default=None, help="local Hugging Face model folder (default: embedded)")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="structured-output backend (vllm engine)")
    p.add_argument("--max-model-len", type=int, default=None, help="context window (default: the model's)")
    p.add_argument("--compile", action="store_true", help="let vLLM compile the model (slower start, faster decode)")
    p.add_argument(
        "--cores", default=None, help="CPU build only: cores for the engine's threads, e.g. 0-3 (default: all allowed)"
    )
    p.add_argument(
        "--kv-cache-gib",
        type=int,
        default=None,
        help="CPU build only: KV cache in GiB (default: 20%% of available memory)",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="vllm engine: compute dtype (default: bfloat16 where the CPU or GPU has it natively, else float32; "
        "float32 repeats decision probabilities to the last digits)",
    )
    p.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=None,
        metavar="N",
        help="GPU build only: split the model across N GPUs (default 1)",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        metavar="F",
        help="GPU build only: share of each GPU's memory vLLM may take, in (0, 1] (default: vLLM's)",
    )
    p.add_argument("--base-url", default=None, help="openai engine: the server, e.g. http://127.0.0.1:8001")
    p.add_argument(
        key_option,
        dest="engine_key_file",
        type=Path,
        default=None,
        help="file holding the key of the server judged through: the openai engine's (with judge --server: the "
        "service's bearer token)",
    )
    p.add_argument(
        "--tokenizer", type=Path, default=None, help="openai engine: local tokenizer folder (default: the server's)"
    )
    p.add_argument("--served-model", default=None, help="openai engine: model name on the server (default: its only)")
    p.add_argument("--max-concurrency", type=int, default=None, help="openai engine: requests in flight (default 32)")
    p.add_argument(
        "--proxy",
        default=None,
        metavar="URL",
        help="openai engine: reach the server through this proxy (HTTP_PROXY, HTTPS_PROXY and ALL_PROXY are ignored)",
    )
    p.add_argument(
        "--allow-insecure-http",
        action="store_true",
        help="openai engine (and judge --server): allow a plain http:// address on another machine with a key (the key "
        "and prompts go unencrypted)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show the engine's own log and its settings")


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """Raises :class:`~suffice.exceptions.ConfigError` naming the option at fault."""
    return EngineConfig(
        kind=args.engine,
        backend=args.backend,
        model=args.model,
        max_model_len=args.max_model_len,
        enforce_eager=not args.compile,
        cores=args.cores,
        kv_cache_gib=args.kv_cache_gib,
        dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        verbose=args.verbose,
        base_url=args.base_url,
        api_key_file=args.engine_key_file,
        tokenizer=args.tokenizer,
        served_model=args.served_model,
        max_concurrency=args.max_concurrency,
        proxy=args.proxy,
        allow_insecure_http=args.allow_insecure_http,
    )
