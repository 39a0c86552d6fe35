"""No hub download and no usage report from what suffice loads, enforced where it loads: never on import.

Importing suffice leaves the host's process as it found it (its environment above all: an application may fetch
its own embedder from a hub mirror with ``HF_HUB_OFFLINE=0``; tests/test_import_side_effects.py).  suffice only loads
local folders, and a run that tried the network would hang in an air-gapped room, so where suffice itself loads:

- transformers is always called with ``local_files_only=True`` (the transformers engine, the GGUF converter, the
  openai engine's local tokenizer);
- :func:`offline` sets :data:`OFFLINE_ENV` while an engine, a model or a tokenizer is loaded, or a Ray instance
  started, and puts the process's own values back after.  Arguments alone cannot do it: vLLM's ``LLM`` takes no
  offline argument, and the processes it starts (its engine core) and those ``ray.init`` starts (a local
  instance's, whose actors open the engines) inherit a copy of the environment at their start; huggingface_hub,
  transformers and vLLM read their variables once, when first imported, which in suffice's own processes (the
  ``suffice`` command, a Ray actor, a vLLM engine core) is inside the window; vLLM decides on its usage report at
  its engine's start; Ray reads its usage-stats switch in the processes ``ray.init`` starts (its first report is a
  minute after start, with a prompt that asks about it).

In an application that imported huggingface_hub itself before opening a judge, its settings stand for its own
calls: suffice's loads are still local (``local_files_only``, a local folder for vLLM), as the strace proofs
(tests/test_no_network.py) show for suffice's own processes.

Haystack's telemetry switch is :mod:`suffice.integrations.haystack`'s, which sets it only while it imports Haystack.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
}

_lock = threading.Lock()
#: Windows open now (engines may be opened from several threads, and a model converted inside an engine's start),
#: and the process's own values, put back when the last closes.
_open = 0
_saved: dict[str, str | None] = {}


def restore(saved: Mapping[str, str | None]) -> None:
    """Put each variable back as ``saved`` has it (``None``: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment for the block, then the process's own back."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        restore(saved)


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """:data:`OFFLINE_ENV` while suffice loads a model, a tokenizer or an engine, or starts Ray (see the module's
    docstring); the process's own values back when the last such window closes."""
    global _open
    with _lock:
        if _open == 0:
            _saved.clear()
            _saved.update({name: os.environ.get(name) for name in OFFLINE_ENV})
            os.environ.update(OFFLINE_ENV)
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0:
                restore(_saved)


def force_offline() -> None:
    """:data:`OFFLINE_ENV` for the rest of the process: for a program of its own (a benchmark), never a library."""
    os.environ.update(OFFLINE_ENV)
