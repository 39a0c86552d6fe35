"""Verdict formats: the shape a row's verdict is written in (``suffice judge --format``, ``?format=`` of
``suffice serve``, ``suffice schema --format``).

A format is an object with the attributes and methods of :class:`VerdictFormat`, registered under the entry-point
group ``suffice.verdict_formats`` (the entry point's name is the format's), suffice's own as any other package's
(:class:`~suffice.gates.registry.Registry`).  Gates know nothing of formats: a format asks a gate for what it needs
through a role the gate may offer (``seed``: :class:`~suffice.formats.verdicts.seed.SeedVerdicts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from suffice.gates.base import Gate
from suffice.gates.registry import Registry

#: The format of a row when none is asked for.
DEFAULT_VERDICT_FORMAT = "suffice"


@dataclass(frozen=True)
class RowShape:
    """What a format puts in a row's typed model (:mod:`suffice.rows.row_types`): the verdict's type, described, the
    fields beside it, and whether a row may hold keys no field names."""

    verdict: Any
    description: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    open: bool = False


@runtime_checkable
class VerdictFormat(Protocol):
    """A verdict format: its name and one line of help, how it writes a verdict, and the typed row it makes."""

    #: What ``--format`` and ``?format=`` say.
    name: str
    #: One line for ``--help`` and the OpenAPI description.
    help: str
    #: Formats of one shape share one typed row (``seed`` and ``ragflow``): the shape's part of the rows' names.
    shape: str
    #: Whether a row's verdict is the gate's verdict model as it is (what a Parquet output's typed columns hold).
    typed: bool

    def refuses(self, gate: Gate | type[Gate]) -> str | None:
        """Why ``gate``'s verdicts cannot be written in this format (``None``: they can)."""

    def fields(self, gate: Gate, verdict: BaseModel) -> dict[str, Any]:
        """The row's verdict fields (``verdict`` and any beside it) for ``verdict``, which ``gate`` gave."""

    def row(self, verdicts: tuple[type[BaseModel], ...]) -> RowShape:
        """The typed part of a row whose verdict is one of ``verdicts`` (the gate's models at the row's detail)."""


VERDICT_FORMATS: Registry[VerdictFormat] = Registry(
    "verdict format",
    "suffice.verdict_formats",
    lambda fmt: isinstance(fmt, VerdictFormat),
    "format",
    DEFAULT_VERDICT_FORMAT,
)


def verdict_format(name: str, option: str = "format") -> VerdictFormat:
    """The verdict format ``name``; a :class:`~suffice.exceptions.ConfigError` names ``option`` otherwise."""
    return VERDICT_FORMATS.get(name, option)


def verdict_format_names() -> tuple[str, ...]:
    """Every verdict format's name, suffice's own first (its default first of all)."""
    return VERDICT_FORMATS.names()


def export(gate: Gate, verdict: BaseModel, fmt: str) -> dict[str, Any]:
    """The row's verdict fields of ``verdict`` in format ``fmt`` (what :func:`suffice.rows.shaping.result_row` adds)."""
    return verdict_format(fmt).fields(gate, verdict)
