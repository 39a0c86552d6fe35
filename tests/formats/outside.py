"""Formats written outside suffice, registered by entry points only (``conftest.py`` installs them): the proof
that adding a format is this one module and one entry point each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from suffice.exceptions import ConfigError
from suffice.formats.verdicts import RowShape, VerdictFormat
from suffice.gates.base import Gate
from suffice.records.lines import SourceLine, read_lines


class Routed(BaseModel):
    """The decision that routes, and where it sends the item."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    positive: bool
    route: str


class RoutedFormat:
    """A verdict format: only what a caller acts on, asked of the gate's core (no role of its own)."""

    name = "routed"
    help = "only the decision that routes and where it sends the item"
    shape = "Routed"
    typed = False

    def refuses(self, gate: Gate | type[Gate]) -> str | None:
        return None

    def fields(self, gate: Gate, verdict: BaseModel) -> dict[str, Any]:
        return {"verdict": {"positive": gate.is_positive(verdict), "route": gate.route(verdict).route}}

    def row(self, verdicts: tuple[type[BaseModel], ...]) -> RowShape:
        return RowShape(Routed, "the decision that routes, and where to")


ROUTED = RoutedFormat()


class JsonArray:
    """A file format: one JSON array of records in; one of rows out, written from the journal when the run ends."""

    name = "json-array"
    suffixes = (".jarr",)
    unit = "item"
    appendable = False

    def count(self, path: Path) -> int:
        return len(_array(path))

    def records(self, path: Path, caps: tuple[int, int]) -> Iterator[SourceLine]:
        for position, record in enumerate(_array(path), 1):
            yield SourceLine(position, record)

    def refuses(self, verdicts: VerdictFormat, detail: str) -> ConfigError | None:
        return None

    def finish(self, journal: Path, output: Path, gate: Gate) -> None:
        output.write_text(json.dumps([source.record for source in read_lines(journal)]), encoding="utf-8")

    def resume(self, output: Path, journal: Path) -> None:
        journal.write_text("".join(json.dumps(row) + "\n" for row in _array(output)), encoding="utf-8")


def _array(path: Path) -> list[Any]:
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, list):
        raise ConfigError("input", str(path), "is not a JSON array")
    return value


JSON_ARRAY = JsonArray()
