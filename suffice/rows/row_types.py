"""The typed result rows of a gate: the models behind ``suffice schema`` and the service's OpenAPI.

A row is what :func:`suffice.rows.shaping.result_row` writes: a verdict or that record's error, with the
model, backend, prompt version, tokens and retries.  Its verdict is typed by the gate class's
``verdict_model`` (or the decision-only :class:`~suffice.grammars.decision_verdict.DecisionVerdict`), read
from the registry, so a gate installed from another package gets typed rows with no code naming it.

``suffice judge`` writes each row with ``line`` (the input line it answers); ``suffice serve``
answers with ``index`` (the item's position in the request) in its place.  Rows in the seed's
shape carry the verdict as the seed prompt defines it, which no verdict model describes: each
verdict format says what its rows hold (:class:`~suffice.formats.verdicts.RowShape`).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, RootModel, create_model

from suffice.exceptions import ConfigError
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT, RowShape, verdict_format
from suffice.gates.registry import check_detail, gate_class
from suffice.gates.roles import decision_of
from suffice.grammars.decision_verdict import DecisionVerdict
from suffice.results import CacheHit, Cascade, ErrorInfo, TokenCounts

#: Where a row says which input it answers: ``line`` in a ``suffice judge`` output, ``index`` in a response.
POSITIONS: dict[str, str] = {
    "line": "the input line (or Parquet row) this row answers, from 1",
    "index": "the item's position in the request, from 0",
}
#: The JSON Schema dialect pydantic writes.
DIALECT = "https://json-schema.org/draft/2020-12/schema"

_CLOSED = ConfigDict(extra="forbid", frozen=True)
#: Rows a format leaves open: a gate may add keys beside the verdict (the sufficiency gate's ``model_is_sufficient``).
_OPEN = ConfigDict(extra="allow", frozen=True)


def name_part(gate: str) -> str:
    """``my-gate`` -> ``MyGate``: a gate's name as a part of a model's (and an OpenAPI component's) name."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", gate) if part)


def verdict_types(gate: str, detail: str | None = None) -> tuple[type[BaseModel], ...]:
    """The verdict models a row of ``gate`` can hold at ``detail`` (``None`` or ``auto``: at either): the gate
    class's ``verdict_model`` for full verdicts, :class:`DecisionVerdict` for decision-only ones
    (for a gate that names its decision, ``decision_key``)."""
    if detail is not None:
        check_detail(detail)
    cls = gate_class(gate)
    full = () if detail == "decision" else (cls.verdict_model,)
    decision = (DecisionVerdict,) if detail != "full" and decision_of(cls) is not None else ()
    return full + decision


def _fields(gate: str, verdict: Any, error: Any, position: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A row's fields, in the order a row writes them."""
    fields: dict[str, Any] = {
        "id": (str | None, Field(description="the record's id (null when its line could not be read)")),
        "gate": (cast(Any, Literal)[gate], Field(description="the gate that judged it")),
        "verdict": verdict,
        "error": error,
        "model": (str, Field(description="the model that judged it")),
        "backend": (str, Field(description="the structured-output backend (or the engine's kind)")),
        "prompt_version": (str, Field(description="the gate's prompt version")),
        "tokens": (TokenCounts, Field(description="prompt tokens sent and tokens generated")),
        "retries": (int, Field(ge=0, description="generations repeated after one failed validation")),
        "cached": (
            CacheHit | None,
            Field(default=None, description="present when the verdict cache returned the row: when first judged"),
        ),
        "cascade": (
            Cascade | None,
            Field(default=None, description="present under detail auto: whether the verdict is decision-only or full"),
        ),
        **(extra or {}),
    }
    fields[position] = (int, Field(ge=1 if position == "line" else 0, description=POSITIONS[position]))
    return fields


def _suffix(position: str) -> str:
    if position not in POSITIONS:
        raise ConfigError("position", position, f"must be one of {', '.join(POSITIONS)}")
    return "Row" if position == "line" else "Result"


@cache
def _error_row(gate: str, position: str) -> type[BaseModel]:
    """The row of a record ``gate`` could not judge (one model whatever the detail and format)."""
    model: type[BaseModel] = create_model(
        f"{name_part(gate)}Error{_suffix(position)}",
        __config__=_CLOSED,
        __doc__=f"A record the {gate} gate could not judge: its error, naming the field at fault.",
        **_fields(
            gate, (None, Field(description="null: not judged")), (ErrorInfo, Field(description="why not")), position
        ),
    )
    return model


def result_row_model(
    gate: str, detail: str | None = None, fmt: str = DEFAULT_VERDICT_FORMAT, position: str = "line"
) -> type[RootModel[Any]]:
    """The pydantic model of one result row of ``gate``: a verdict row or an error row.

    ``detail``: ``full``, ``decision`` or ``auto`` (``None`` or ``auto``: a row of either); ``fmt``: the verdict format
    (formats of one shape, ``seed`` and ``ragflow``, give one model); ``position``: ``line`` (``suffice judge``'s
    rows) or ``index`` (``suffice serve``'s).  The same arguments give the same class.  Errors are
    :class:`~suffice.exceptions.ConfigError` naming the ``gate``, ``detail``, ``format`` or ``position``.
    """
    shape = verdict_format(fmt)
    refused = shape.refuses(gate_class(gate))
    if refused is not None:
        raise ConfigError("format", fmt, refused)
    return _row_model(gate, detail, shape.shape, position, fmt)


#: Row models by gate, detail, shape and position: formats of one shape share one class (one OpenAPI component).
_MODELS: dict[tuple[str, str | None, str, str], type[RootModel[Any]]] = {}


def _row_model(gate: str, detail: str | None, shape: str, position: str, fmt: str) -> type[RootModel[Any]]:
    key = (gate, detail, shape, position)
    if key not in _MODELS:
        _MODELS[key] = _new_row_model(
            gate, detail, shape, position, verdict_format(fmt).row(verdict_types(gate, detail))
        )
    return _MODELS[key]


def _new_row_model(gate: str, detail: str | None, shape: str, position: str, part: RowShape) -> type[RootModel[Any]]:
    suffix = _suffix(position)
    name = name_part(gate) + (detail or "").capitalize() + shape
    verdict_row = create_model(
        f"{name}Verdict{suffix}",
        __config__=_OPEN if part.open else _CLOSED,
        __doc__=f"A record the {gate} gate judged: its verdict.",
        **_fields(
            gate,
            (part.verdict, Field(description=part.description)),
            (None, Field(description="null: judged")),
            position,
            dict(part.extra),
        ),
    )
    one_of: Any = verdict_row | _error_row(gate, position)
    row: type[RootModel[Any]] = type(
        f"{name}{suffix}",
        (RootModel[one_of],),
        {"__module__": __name__, "__doc__": f"One result of the {gate} gate: a verdict, or that record's error."},
    )
    return row


def result_row_schema(
    gate: str, detail: str | None = None, fmt: str = DEFAULT_VERDICT_FORMAT, position: str = "line"
) -> dict[str, Any]:
    """The JSON Schema of one result row of ``gate`` (see :func:`result_row_model` for the arguments)."""
    return {"$schema": DIALECT, **result_row_model(gate, detail, fmt, position).model_json_schema(mode="serialization")}
