"""``suffice``: the verdict as the gate's verdict model writes it, typed by that model."""

from __future__ import annotations

import functools
import operator
from typing import Any

from pydantic import BaseModel

from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT, RowShape
from suffice.gates.base import Gate


class NativeFormat:
    name = DEFAULT_VERDICT_FORMAT
    help = "suffice's own verdict, typed by the gate's verdict model"
    shape = ""
    typed = True

    def refuses(self, gate: Gate | type[Gate]) -> str | None:
        return None

    def fields(self, gate: Gate, verdict: BaseModel) -> dict[str, Any]:
        return {"verdict": verdict.model_dump(mode="json")}

    def row(self, verdicts: tuple[type[BaseModel], ...]) -> RowShape:
        return RowShape(functools.reduce(operator.or_, verdicts), "the verdict")


NATIVE = NativeFormat()
