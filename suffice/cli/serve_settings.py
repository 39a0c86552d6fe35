"""Where ``suffice serve``, ``judge`` and ``calibrate`` take their settings from: their flags, ``SUFFICE_*``
environment variables and a TOML file, a flag winning over the environment and the environment over the file.

Every flag is a setting under one key: its long name with underscores for dashes (``--max-items``
is ``max_items`` in the file and ``SUFFICE_MAX_ITEMS`` in the environment), so whatever a flag
sets, a container sets without one.  A file names its settings at the top level; its relative paths
are read from the file's folder.  In the environment a list is comma-separated and a switch is
``true`` or ``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``).

Each flag's action notes that it was given, so a flag given is told from one left out even when it
repeats the default.  A required flag (``judge -o``) and a positional argument are not settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.exceptions import ConfigError
from suffice.prompts.templates import FENCE_SECRET_ENV
from suffice.settings import ENV_PREFIX, key_of

#: The flag and the variable naming the TOML file.
CONFIG_FLAG = "--config"
CONFIG_VARIABLE = "SUFFICE_CONFIG"
#: Variables of suffice's own that are not serve settings (read where they are used).
OTHER_VARIABLES = frozenset({CONFIG_VARIABLE, "SUFFICE_CACHE", FENCE_SECRET_ENV})

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_KINDS = {int: "a whole number", float: "a number", Path: "a path"}

_log = logging.getLogger("suffice.cli")

#: The namespace attribute holding the destinations of the flags given.
_GIVEN = "_settings_given"
_RECORDING: dict[type, type] = {}


def _recording(cls: type) -> type:
    """``cls`` (an argparse action) noting in the namespace that its flag was given."""
    if cls not in _RECORDING:

        def __call__(self: Any, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
            given = getattr(namespace, _GIVEN, None)
            if given is None:
                given = set()
                setattr(namespace, _GIVEN, given)
            given.add(self.dest)
            cls.__call__(self, parser, namespace, values, option_string)

        _RECORDING[cls] = type(cls.__name__, (cls,), {"__call__": __call__})
    return _RECORDING[cls]


@dataclass(frozen=True)
class Setting:
    """One flag as a setting: its key, the namespace attribute it sets and how its value is read."""

    key: str
    dest: str
    default: Any
    #: ``switch`` (a ``store_true`` flag), ``list`` (a repeatable one) or ``value``.
    shape: str
    convert: Callable[[str], Any] | None
    choices: tuple[Any, ...] | None

    @property
    def variable(self) -> str:
        return ENV_PREFIX + self.key.upper()

    def kind(self) -> str:
        """What a value must be, in words."""
        if self.shape == "switch":
            return "true or false"
        one = _KINDS.get(self.convert, "a string") if self.convert else "a string"  # type: ignore[call-overload]
        return f"a list of {one.removeprefix('a ')}s" if self.shape == "list" else one


class SettingSources:
    """Where a command's settings come from: each flag's setting, also read from the environment and a TOML file.

    Built once every flag is added (``command`` names it in errors): it marks the flags so that those given are
    known, and adds ``--config``.
    """

    def __init__(
        self, parser: argparse.ArgumentParser, command: str = "serve", example: str = "max_items = 64"
    ) -> None:
        self.command = command
        self.settings: dict[str, Setting] = {}
        for action in parser._actions:
            longs = [option for option in action.option_strings if option.startswith("--")]
            if not longs or isinstance(action, argparse._HelpAction | argparse._VersionAction) or action.required:
                continue
            key = key_of(longs[0])
            if isinstance(action, argparse._StoreTrueAction):
                shape = "switch"
            elif isinstance(action, argparse._AppendAction):
                shape = "list"
            else:
                shape = "value"
            convert = action.type if callable(action.type) else None
            choices = tuple(action.choices) if action.choices is not None else None
            self.settings[key] = Setting(key, action.dest, action.default, shape, convert, choices)
            action.__class__ = _recording(type(action))
        parser.add_argument(
            CONFIG_FLAG,
            type=Path,
            default=None,
            metavar="PATH",
            help=f"a TOML file of settings, keyed by the flags' names ({example}); also {CONFIG_VARIABLE}. "
            f"A flag wins over a {ENV_PREFIX}* variable ({ENV_PREFIX}{example.split()[0].upper()}), a variable over "
            "the file",
        )

    def resolve(self, given: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Fill ``given`` (parsed by the parser this was built on) from the environment and the file where no
        flag set it, in that order; where each setting came from, by key (for error messages).

        Raises :class:`ConfigError` naming the variable, or the key and the file.
        """
        environ = os.environ if environ is None else environ
        origins: dict[str, str] = {}
        from_file: dict[str, Any] = {}
        path = getattr(given, "config", None)
        if path is None and environ.get(CONFIG_VARIABLE):
            path = Path(environ[CONFIG_VARIABLE])
        if path is not None:
            from_file = self._read_file(path)
        from_env = self._read_environment(environ)
        flags: set[str] = getattr(given, _GIVEN, set())
        for key, setting in self.settings.items():
            if setting.dest in flags:
                origins[key] = "its flag"
            elif key in from_env:
                setattr(given, setting.dest, from_env[key])
                origins[key] = setting.variable
            elif key in from_file:
                setattr(given, setting.dest, from_file[key])
                origins[key] = f"{key} in {path}"
        return origins

    def _read_file(self, path: Path) -> dict[str, Any]:
        try:
            with path.open("rb") as stream:
                table = tomllib.load(stream)
        except OSError as exc:
            raise ConfigError("config", str(path), f"cannot be read: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("config", str(path), f"is not valid TOML: {exc}") from exc
        values: dict[str, Any] = {}
        for key, value in table.items():
            setting = self.settings.get(key)
            if setting is None:
                raise ConfigError(
                    key,
                    value,
                    f"in {path}: not a setting of suffice {self.command} (each flag is one: max_items for --max-items)",
                )
            values[key] = self._from_toml(setting, value, f"in {path}", path.parent)
        return values

    def _read_environment(self, environ: Mapping[str, str]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for variable, text in environ.items():
            if not variable.startswith(ENV_PREFIX) or variable in OTHER_VARIABLES:
                continue
            key = variable.removeprefix(ENV_PREFIX).lower()
            setting = self.settings.get(key)
            if setting is None:
                # Not refused: other tools of a deployment may use the prefix too.
                _log.warning("%s is not a setting of suffice %s: ignored", variable, self.command)
                continue
            values[key] = self._from_text(setting, text)
        return values

    def _from_text(self, setting: Setting, text: str) -> Any:
        """A variable's value as its flag's would be."""

        def bad(reason: str) -> ConfigError:
            return ConfigError(setting.variable, text, reason)

        if setting.shape == "switch":
            word = text.strip().lower()
            if word not in _TRUE | _FALSE:
                raise bad("must be true or false (1/0, yes/no, on/off)")
            return word in _TRUE
        parts = [part.strip() for part in text.split(",") if part.strip()] if setting.shape == "list" else [text]
        values = [self._checked(setting, part, bad) for part in parts]
        return values if setting.shape == "list" else values[0]

    def _from_toml(self, setting: Setting, value: Any, where: str, folder: Path) -> Any:
        """A file's value as its flag's would be (relative paths from ``folder``)."""

        def bad(reason: str) -> ConfigError:
            return ConfigError(setting.key, value, f"{where}: {reason}")

        if setting.shape == "switch":
            if not isinstance(value, bool):
                raise bad("must be true or false")
            return value
        if setting.shape == "list":
            if not isinstance(value, list):
                raise bad(f"must be {setting.kind()}")
            return [self._toml_one(setting, item, bad, folder) for item in value]
        return self._toml_one(setting, value, bad, folder)

    def _toml_one(self, setting: Setting, value: Any, bad: Callable[[str], ConfigError], folder: Path) -> Any:
        if setting.convert in (int, float) and isinstance(value, bool):
            raise bad(f"must be {setting.kind()}")
        if setting.convert is int and isinstance(value, int):
            return self._checked(setting, value, bad)
        if setting.convert is float and isinstance(value, int | float):
            return self._checked(setting, float(value), bad)
        if setting.dest.startswith("gate_option_") and isinstance(value, int | float | bool | dict):
            return value  # a gate's own option (recovery's threshold as a table): its typed model reads it
        if not isinstance(value, str):
            raise bad(f"must be {setting.kind()}")
        if setting.convert is Path:
            return folder / Path(value).expanduser()
        return self._checked(setting, value, bad)

    @staticmethod
    def _checked(setting: Setting, value: Any, bad: Callable[[str], ConfigError]) -> Any:
        if isinstance(value, str) and setting.convert is not None:
            try:
                value = setting.convert(value)
            except (TypeError, ValueError):
                raise bad(f"must be {setting.kind()}") from None
        if setting.choices is not None and value not in setting.choices:
            raise bad(f"must be one of {', '.join(map(str, setting.choices))}")
        return value


def with_origin(exc: ConfigError, origins: Mapping[str, str], names: Mapping[str, str]) -> ConfigError:
    """``exc`` naming where its setting came from: the variable, or the key and the file; ``names``: the settings'
    keys by the names errors give them, where they differ."""
    origin = origins.get(names.get(exc.parameter, exc.parameter))
    if origin is None or origin == "its flag":
        return exc
    prefix = f"{exc.parameter}={exc.value!r}: "
    reason = str(exc).removeprefix(prefix)
    if origin.startswith(ENV_PREFIX):
        return ConfigError(origin, exc.value, reason)
    return ConfigError(exc.parameter, exc.value, f"{reason} (set as {origin})")
