"""Settings declared once: a dataclass field made with :func:`setting` carries its type, bounds, help text and tags
(which engines take it, whether it runs only in this process, whether it changes verdicts), and everything else is
derived from it: the checks (:func:`check`), each command's flags (:func:`add_flags`, :func:`from_args`), which
engine takes what, the settings a resume must match, the JSON Schema of those a request may set (:func:`json_schema`,
for the OpenAPI description and ``suffice schema --request``), and the table in ``docs/settings.md`` (:func:`table`).

vLLM's ``EngineArgs`` is the model: its flags come from its config's fields.  Here the checks and the docs do too.
"""

from __future__ import annotations

import argparse
import builtins
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.exceptions import ConfigError

#: The dataclass field metadata key holding a field's :class:`Spec`.
KEY = "suffice.setting"


@dataclass(frozen=True)
class Spec:
    """What is said about one setting besides its name, type and default."""

    help: str
    #: Its command-line flag; ``None``: ``--`` and its name with dashes; ``""``: no flag (Python only).
    flag: str | None = None
    #: Short spellings of its flag (``-v``); its variable and TOML key come from the flag itself.
    also: tuple[str, ...] = ()
    #: The argparse destination of its flag (default: its name).
    dest: str | None = None
    #: The name errors give it (default: its name).
    label: str | None = None
    #: The flag switches it off (``--compile`` sets ``enforce_eager`` to false).
    negate: bool = False
    metavar: str | None = None
    #: The values it may take; a function giving them where a registry decides (read when asked, not at import).
    choices: tuple[Any, ...] | Callable[[], tuple[Any, ...]] | None = None
    #: Its flag may be given without a value, which then sets this (``--save`` alone: where the gate keeps it).
    const: Any = None
    #: An argument, not a flag (``suffice judge INPUT``): no variable, no TOML key.
    positional: bool = False
    #: Its flag must be given (``judge -o``): what a run is about, so no variable or TOML key sets it.
    required: bool = False
    #: Bounds: at least ``minimum``, more than ``above``, at most ``maximum``.
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    #: A ``float`` that must hold a whole number (GiB).
    whole: bool = False
    #: Words after the bounds in an error (`` tokens``).
    unit: str = ""
    #: The engines that take it (``None``: all); set for another it is refused, with ``instead`` saying what to do.
    engines: tuple[str, ...] | None = None
    instead: str = ""
    #: ``cpu`` or ``gpu``: only that vLLM build takes it (checked when the engine starts).
    build: str | None = None
    #: It sets what runs in this process: refused where another process judges (``judge --server``).
    in_process: bool = False
    #: It can change a verdict: recorded beside a batch output (under ``record``, default its name) when it
    #: differs from its default (``record_default``: at its default too), and a resume must match it.
    verdict: bool = False
    record: str | None = None
    record_default: bool = False
    #: The keyword of vLLM's ``LLM`` it is passed to, when not ``None``.
    vllm: str | None = None
    #: A client of ``suffice serve`` may set it for one request (a query parameter or the body's ``options``).
    per_request: bool = False
    #: What its flag, variable and TOML key read where the setting holds another type (``tuple[str, ...]`` for
    #: ``--field``, held as a ``FieldMap``), and the function making that value the setting's.
    reads: Any = None
    convert: Callable[[Any], Any] | None = None
    #: Its JSON Schema where its type alone does not say it (a text or a mapping: a gate's ``threshold``).
    schema: Mapping[str, Any] | None = None


def setting(default: Any, help: str, **tags: Any) -> Any:
    """A dataclass field declared as a setting (see :class:`Spec` for ``tags``)."""
    return dataclasses.field(default=default, metadata={KEY: Spec(help=help, **tags)})


@dataclass(frozen=True)
class Declared:
    """One declared setting of a class: its field and its :class:`Spec`."""

    name: str
    type: type
    optional: bool
    default: Any
    spec: Spec
    #: A tuple (``tuple[str, ...]``): its flag may be repeated, each adding one.
    repeated: bool = False
    #: What its flag reads (``type`` unless the spec says ``reads``).
    reads: builtins.type = str

    @property
    def flag(self) -> str | None:
        if self.spec.flag == "" or self.spec.positional:
            return None
        return self.spec.flag or "--" + self.name.replace("_", "-")

    @property
    def on_command_line(self) -> bool:
        """It has a flag or is an argument."""
        return self.spec.positional or self.flag is not None

    @property
    def from_environment(self) -> bool:
        """A ``SUFFICE_*`` variable and a TOML key may set it (where its command reads them): a flag that is not
        required."""
        return self.flag is not None and not self.spec.required

    @property
    def dest(self) -> str:
        return self.spec.dest or self.name

    @property
    def label(self) -> str:
        return self.spec.label or self.name

    @property
    def choices(self) -> tuple[Any, ...] | None:
        chosen = self.spec.choices
        return tuple(chosen()) if callable(chosen) else chosen

    @property
    def spellings(self) -> tuple[str, ...]:
        """Its flag's spellings for argparse: the short ones, then the flag."""
        assert self.flag is not None
        return (*self.spec.also, self.flag)

    @property
    def flag_default(self) -> Any:
        """Its flag's default: a repeated flag's is a list."""
        if self.repeated and self.spec.convert is not None:
            return []
        return list(self.default) if self.repeated and self.default is not None else self.default

    def is_default(self, value: Any) -> bool:
        return bool(value == self.default) if value is not None else self.default is None

    def bounds(self) -> str:
        """The bounds in words, or ``""``."""
        s = self.spec
        low = (
            f"more than {s.above:g}"
            if s.above is not None
            else f"at least {s.minimum:g}"
            if s.minimum is not None
            else ""
        )
        if s.whole:
            return f"a whole number{', ' + low if low else ''}{s.unit}"
        if s.minimum is not None and s.maximum is not None:
            return f"between {s.minimum:g} and {s.maximum:g}{s.unit}"
        if low and s.maximum is not None:
            return f"{low} and at most {s.maximum:g}{s.unit}"
        if s.maximum is not None:
            return f"at most {s.maximum:g}{s.unit}"
        return f"{low}{s.unit}" if low else ""

    def checked(self, value: Any) -> Any:
        """``value`` as this setting holds it, or a :class:`ConfigError` naming it."""
        if value is not None and self.spec.convert is not None:  # what it makes checks itself
            return value if isinstance(value, self.type) else self.spec.convert(value)
        if self.repeated and value is not None:
            if isinstance(value, str) or not isinstance(value, list | tuple):
                raise ConfigError(self.label, value, f"must be a list of {self.type.__name__}")
            one = dataclasses.replace(self, repeated=False, optional=False, type=self.reads)
            return tuple(one.checked(item) for item in value)
        if value is None:
            if self.optional:
                return None
            raise ConfigError(self.label, None, "must be given")
        if self.type is Path:
            return value if isinstance(value, Path) else Path(value)
        if self.type is bool:
            if not isinstance(value, bool):
                raise ConfigError(self.label, value, "must be true or false")
            return value
        if self.type in (int, float):
            number = (int, float) if self.type is float else (int,)
            if isinstance(value, bool) or not isinstance(value, number):
                raise ConfigError(
                    self.label, value, "must be a whole number" if self.type is int else "must be a number"
                )
            if self.type is float and not math.isfinite(value) and self.spec.maximum is None:
                raise ConfigError(self.label, value, "must be a finite number")
            self._check_bounds(value)
            if self.type is float:
                value = float(value)  # 1 and 1.0 alike where a setting is recorded (repr)
        elif not isinstance(value, self.type):
            raise ConfigError(self.label, value, f"must be a {self.type.__name__}")
        choices = self.choices
        if choices is not None and value not in choices:
            raise ConfigError(self.label, value, f"must be one of {', '.join(map(str, choices))}")
        return value

    def parsed(self, value: Any) -> Any:
        """``value`` as :meth:`checked` holds it, read from text where it is text (a query parameter: ``0.2``,
        ``true``); a :class:`ConfigError` names it."""
        if isinstance(value, str) and self.type in (int, float, bool):
            text = value.strip()
            if self.type is bool:
                if text.lower() not in ("true", "false"):
                    raise ConfigError(self.label, value, "must be true or false")
                value = text.lower() == "true"
            else:
                try:
                    value = self.type(text)
                except ValueError:
                    kind = "a whole number" if self.type is int else "a number"
                    raise ConfigError(self.label, value, f"must be {kind}") from None
        return self.checked(value)

    def _check_bounds(self, value: float) -> None:
        s = self.spec
        inside = (
            (s.minimum is None or value >= s.minimum)
            and (s.above is None or value > s.above)
            and (s.maximum is None or value <= s.maximum)
            and (not s.whole or float(value).is_integer())
        )
        if not inside:  # NaN is outside every bound
            raise ConfigError(self.label, value, f"must be {self.bounds()}")


def _base(annotation: Any) -> tuple[type, bool, bool]:
    """The type a field holds (of each item, for a tuple), whether it may be ``None`` and whether it is a tuple."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        kind, _, repeated = _base(args[0])
        return kind, len(args) < len(typing.get_args(annotation)), repeated
    if typing.get_origin(annotation) is tuple:
        return typing.get_args(annotation)[0], False, True
    return annotation, False, False


_DECLARED: dict[type, tuple[Declared, ...]] = {}


def declared(cls: type) -> tuple[Declared, ...]:
    """The settings declared on dataclass ``cls`` (and its bases), in field order."""
    if cls in _DECLARED:
        return _DECLARED[cls]
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(KEY)
        if spec is None:
            continue
        kind, optional, repeated = _base(hints[f.name])
        reads, _, repeated = _base(spec.reads) if spec.reads is not None else (kind, optional, repeated)
        found.append(Declared(f.name, kind, optional, f.default, spec, repeated, reads))
    _DECLARED[cls] = tuple(found)
    return _DECLARED[cls]


def check(obj: Any) -> None:
    """Check (and convert: paths) every declared setting of dataclass instance ``obj``, in field order; the first
    that is wrong raises :class:`ConfigError` naming it."""
    for d in declared(type(obj)):
        value = getattr(obj, d.name)
        held = d.checked(value)
        if held is not value:
            object.__setattr__(obj, d.name, held)


def check_engine(obj: Any, engine: str) -> None:
    """Refuse a setting that ``engine`` does not take, set to anything but its default."""
    for d in declared(type(obj)):
        value = getattr(obj, d.name)
        if d.spec.engines is not None and engine not in d.spec.engines and not d.is_default(value):
            shown = value if isinstance(value, bool) else str(value)
            raise ConfigError(d.label, shown, f"not used by the {engine} engine: {d.spec.instead}")


def tagged(cls: type, **tags: Any) -> tuple[Declared, ...]:
    """The settings of ``cls`` whose :class:`Spec` has every tag given (``in_process=True``, ``build="cpu"``)."""
    return tuple(d for d in declared(cls) if all(getattr(d.spec, tag) == want for tag, want in tags.items()))


def add_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    flags: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None,
) -> None:
    """A flag (or an argument) for every declared setting of ``cls`` that has one (of those named ``only``, in their
    order); ``flags`` renames some (name -> flag)."""
    flags = flags or {}
    settings = {d.name: d for d in declared(cls)}
    for d in settings.values() if only is None else (settings[name] for name in only):
        text = d.spec.help.replace("%", "%%")  # argparse formats help with %
        kind: Any = d.reads if d.reads in (int, float, Path) else None
        if d.spec.positional:
            parser.add_argument(d.dest, type=kind, choices=d.choices, metavar=d.spec.metavar, help=text)
            continue
        flag = flags.get(d.name, d.flag)
        if flag is None:
            continue
        spellings = tuple(flag if spelling == d.flag else spelling for spelling in d.spellings)
        if d.reads is bool:
            parser.add_argument(*spellings, dest=d.dest, action="store_true", help=text)
            continue
        optional_value: dict[str, Any] = {"nargs": "?", "const": d.spec.const} if d.spec.const is not None else {}
        if d.repeated:
            optional_value = {"action": "append"}
        if d.spec.required:
            optional_value["required"] = True
        parser.add_argument(
            *spellings,
            dest=d.dest,
            type=kind,
            choices=d.choices,
            default=d.flag_default,
            metavar=d.spec.metavar,
            help=text,
            **optional_value,
        )


def from_args(cls: type, args: argparse.Namespace, **values: Any) -> Any:
    """An instance of ``cls`` from the flags :func:`add_flags` added (``values`` instead of some); its checks raise
    :class:`ConfigError` naming the setting at fault."""
    given: dict[str, Any] = {}
    for d in declared(cls):
        if not d.on_command_line or not hasattr(args, d.dest):
            continue
        value = getattr(args, d.dest)
        given[d.name] = (not value) if d.spec.negate else value
    return cls(**{**given, **values})


def values_of(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The values of ``cls``'s settings that ``args`` holds (by their flags' destinations), checked, by name; the
    first that is wrong raises :class:`ConfigError` naming it."""
    return {
        d.name: d.checked((not value) if d.spec.negate else value)
        for d in declared(cls)
        if d.on_command_line and hasattr(args, d.dest)
        for value in (getattr(args, d.dest),)
    }


#: JSON Schema's name of each type a setting may hold.
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "string"}


def json_schema(d: Declared) -> dict[str, Any]:
    """The JSON Schema of setting ``d``: its type, default, bounds or values, and its help as the description (for
    the OpenAPI description of a request and ``suffice schema --request``)."""
    s = d.spec
    schema: dict[str, Any] = dict(s.schema) if s.schema is not None else {"type": _JSON_TYPES[d.reads]}
    if d.choices is not None:
        schema["enum"] = list(d.choices)
    for key, bound in (("minimum", s.minimum), ("exclusiveMinimum", s.above), ("maximum", s.maximum)):
        if bound is not None:
            schema[key] = int(bound) if d.type is int else bound
    if d.repeated:
        schema = {"type": "array", "items": schema}
    if d.optional:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return {**schema, "default": d.default, "description": s.help}


def per_request(cls: type) -> tuple[Declared, ...]:
    """The settings of ``cls`` a request to ``suffice serve`` may set (tagged ``per_request``)."""
    return tagged(cls, per_request=True)


def in_process_flags(cls: type) -> tuple[tuple[str, str], ...]:
    """(argparse destination, flag) of every setting of ``cls`` tagged ``in_process`` that has a flag."""
    return tuple((d.dest, d.flag) for d in tagged(cls, in_process=True) if d.flag is not None)


def recorded(obj: Any, engine: str, settings: dict[str, str]) -> dict[str, str]:
    """``settings`` (what an engine records beside an output) with every setting tagged ``verdict`` that ``engine``
    takes, set to other than its default (or tagged ``record_default``) and not recorded yet, as a string."""
    for d in tagged(type(obj), verdict=True):
        value = getattr(obj, d.name)
        key = d.spec.record or d.name
        taken = d.spec.engines is None or engine in d.spec.engines
        if taken and key not in settings and (d.spec.record_default or not d.is_default(value)):
            settings[key] = str(value)
    return settings


#: What every environment variable of a setting starts with (``SUFFICE_MAX_MODEL_LEN`` for ``--max-model-len``).
ENV_PREFIX = "SUFFICE_"


def key_of(flag: str) -> str:
    """The TOML key of a flag (``--max-model-len``: ``max_model_len``); its variable is :data:`ENV_PREFIX` and the
    key in capitals."""
    return flag.removeprefix("--").replace("-", "_")


def table(cls: type, flags: Mapping[str, str] | None = None, environment: bool = True) -> str:
    """The settings of ``cls`` as a Markdown table: flag, variable and key, type, default, bounds, engines, tags;
    ``environment``: its commands read ``SUFFICE_*`` variables and a TOML file (else flags only)."""
    flags = flags or {}
    lines = [
        "| setting | flag / variable / TOML key | type | default | allowed | engines | tags | what it does |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in declared(cls):
        flag = flags.get(d.name, d.flag)
        choices = d.choices
        allowed = ", ".join(map(str, choices)) if choices else d.bounds()
        if callable(d.spec.choices):  # a registry's names: what is installed here, not what the code says
            allowed = f"a name `{d.spec.choices.__name__}()` gives"
        tags = [
            tag
            for tag, on in (
                ("in-process", d.spec.in_process),
                ("verdict", d.spec.verdict),
                ("per request", d.spec.per_request),
                (f"{d.spec.build} build", d.spec.build is not None),
            )
            if on
        ]
        if d.spec.positional:
            where = f"argument `{d.spec.metavar or d.name.upper()}`"
        elif not flag:
            where = "(Python only)"
        elif environment and not d.spec.required:
            where = f"`{flag}` `{ENV_PREFIX}{key_of(flag).upper()}` `{key_of(flag)}`"
        else:
            where = f"`{flag}`" + (" (required)" if d.spec.required else "")
        if d.spec.per_request:
            where += f"; per request: `?{d.name}=`"
        cells = [
            f"`{d.name}`",
            where,
            ("list of " if d.repeated else "")
            + d.reads.__name__
            + (" or none" if d.optional and not (d.spec.positional or d.spec.required) else ""),
            "required"
            if d.spec.positional or d.spec.required
            else "none"
            if d.flag_default is None
            else f"`{d.flag_default}`",
            allowed,
            ", ".join(d.spec.engines) if d.spec.engines else "all",
            ", ".join(tags),
            d.spec.help.replace("|", "\\|"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
