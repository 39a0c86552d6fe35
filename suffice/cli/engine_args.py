"""The command-line options that make an engine, shared by ``judge``, ``calibrate`` and
``serve``: one flag for every setting :class:`~suffice.serving.engine_config.EngineConfig`
declares with one (:mod:`suffice.settings`); its checks decide what goes with what."""

from __future__ import annotations

import argparse

from suffice.serving.engine_config import EngineConfig
from suffice.settings import add_flags, declared, from_args, key_of


def add_engine_args(
    p: argparse.ArgumentParser, key_option: str = "--api-key-file", config: type[EngineConfig] = EngineConfig
) -> None:
    """``key_option`` names the openai engine's key file option (``serve`` keeps
    ``--api-key-file`` for its own clients' key)."""
    add_flags(p, config, flags={"api_key_file": key_option})


def engine_config_from_args(args: argparse.Namespace, config: type[EngineConfig] = EngineConfig) -> EngineConfig:
    """Raises :class:`~suffice.exceptions.ConfigError` naming the option at fault."""
    built: EngineConfig = from_args(config, args)
    return built


def engine_keys(key_option: str = "--api-key-file", config: type[EngineConfig] = EngineConfig) -> dict[str, str]:
    """The settings' keys (``compile``) by the names their errors give them (``enforce_eager``), where they differ."""
    flags = {"api_key_file": key_option}
    keys = {d.label: key_of(flags.get(d.name, d.flag or "")) for d in declared(config) if d.flag}
    return {label: key for label, key in keys.items() if label != key}
