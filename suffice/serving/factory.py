"""Engines are made here: ``EngineConfig.kind`` → the engine class, imported on demand.

Why lazily: each engine module imports its own heavy library (vLLM, transformers,
an HTTP client), and only the one asked for should be loaded; vLLM stays imported in
one module.  Code outside ``serving/`` never branches on the engine's kind: it asks
this factory for an engine, or for the settings an engine would record.
"""

from __future__ import annotations

import importlib

from suffice.serving.base import Engine
from suffice.serving.engine_config import ENGINES, EngineConfig
from suffice.serving.extras import ENGINE_MODULES, missing_extra, require

#: kind → (module, class).  Completeness tests check every kind in ENGINES is here.
ENGINE_CLASSES: dict[str, tuple[str, str]] = {
    "vllm": ("suffice.serving.vllm.engine", "VLLMEngine"),
    "transformers": ("suffice.serving.transformers_engine", "TransformersEngine"),
    "openai": ("suffice.serving.openai.engine", "OpenAIEngine"),
}
assert set(ENGINE_CLASSES) == set(ENGINES), "every engine kind has a class"


def engine_class(kind: str) -> type[Engine]:
    """The class of engine ``kind``; where what it needs is not installed, a
    :class:`~suffice.exceptions.MissingExtraError` naming the extra, before its module is imported or its model
    looked for."""
    require(ENGINE_MODULES[kind], f"the {kind} engine")
    module, name = ENGINE_CLASSES[kind]
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        said = missing_extra(exc)
        if said is None:
            raise
        raise said from exc
    cls: type[Engine] = getattr(imported, name)
    return cls


def make_engine(config: EngineConfig) -> Engine:
    """A started engine (for vLLM this takes seconds to minutes)."""
    return engine_class(config.kind)(config)


def engine_settings(config: EngineConfig) -> dict[str, str]:
    """What an engine built from ``config`` would record with its results, known before
    it starts (model, weights, engine, backend, context window)."""
    return engine_class(config.kind).settings_of(config)
