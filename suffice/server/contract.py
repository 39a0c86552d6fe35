"""What the OpenAPI description says each served gate takes and answers.

Each gate's route has a request body and query parameters of its own (the options it takes per
request) and a typed response: :func:`response_model`, whose rows are the gate's
:func:`~suffice.rows.row_types.result_row_model` with ``index``.  All of it is built from the registry,
so a gate from another package is described with no code naming it.  The route answers with the
rows as they are (they are not validated again on the way out): ``tests/server`` checks real
answers against these models.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from functools import cache
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from suffice.config import JudgeConfig
from suffice.formats.verdicts import verdict_format, verdict_format_names
from suffice.gates import gate_class
from suffice.gates.base import Gate
from suffice.rows.row_types import name_part, result_row_model
from suffice.settings import json_schema, per_request

#: Where the named request schemas live in the document.
REF = "#/components/schemas/"
_CHUNK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A retrieved chunk: its text, and optionally its id, source and retrieval score.",
    "properties": {
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "text": {"type": "string"},
        "source": {"type": "string"},
        "score": {"type": "number"},
    },
    "required": ["text"],
    "additionalProperties": True,
}
_ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One record in the JSONL format of `suffice judge`: id, question, chunks "
    "(strings, whose positions are their ids, or {id, text, source, score}), and response for "
    "a post-generation gate. RAGAS names (user_input, retrieved_contexts) are read as they are.",
    "properties": {
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "question": {"type": "string"},
        "chunks": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": f"{REF}Chunk"}]}},
        "response": {"type": "string"},
    },
    "additionalProperties": True,
}
_EXAMPLE = {"id": "q1", "question": "Who wrote Hamlet?", "chunks": ["Hamlet is a play by Shakespeare."]}


def settable(gate: str, judge: type[JudgeConfig] = JudgeConfig) -> tuple[str, ...]:
    """What a request may set on ``gate``: the gate's per-request options and the judge settings ``judge`` tags
    ``per_request`` (``auto_margin``, the token budgets), by name."""
    options = gate_class(gate).options_model
    return tuple(sorted({d.name for cls in (options, judge) for d in per_request(cls)}))


def per_request_options(gate: str, judge: type[JudgeConfig] = JudgeConfig) -> dict[str, Any]:
    """The JSON Schema of each option a request may set on ``gate``, by name, from its declaration (a gate option
    or a judge setting: :func:`suffice.settings.json_schema`)."""
    settings = {d.name: json_schema(d) for cls in (gate_class(gate).options_model, judge) for d in per_request(cls)}
    return {key: settings[key] for key in sorted(settings)}


def request_options_schema(gate: str, judge: type[JudgeConfig] = JudgeConfig) -> dict[str, Any]:
    """The JSON Schema of the options a request may set on ``gate`` (``<Gate>Options`` in the OpenAPI
    description; ``suffice schema --request``)."""
    return {
        "type": "object",
        "description": f"The {gate} gate's options a request may set, for that request only",
        "properties": per_request_options(gate, judge),
        "additionalProperties": False,
    }


def request_schemas(gates: Sequence[str], judge: type[JudgeConfig] = JudgeConfig) -> dict[str, Any]:
    """The named schemas the judge routes' bodies are made of, for ``components.schemas``: ``Item``,
    ``ItemList`` and ``Chunk``, and per gate ``<Gate>Options`` (the options it takes per request),
    ``<Gate>Items`` (the items with those options) and ``<Gate>Request`` (one item, a list of items, or
    ``<Gate>Items``)."""
    schemas: dict[str, Any] = {
        "Chunk": _CHUNK_SCHEMA,
        "Item": _ITEM_SCHEMA,
        "ItemList": {"type": "array", "items": {"$ref": f"{REF}Item"}, "minItems": 1, "description": "Items"},
    }
    for gate in gates:
        name = name_part(gate)
        schemas[f"{name}Options"] = request_options_schema(gate, judge)
        items = {"$ref": f"{REF}ItemList"}
        schemas[f"{name}Items"] = {
            "type": "object",
            "description": f"The items, with options of the {gate} gate's own for this request",
            "required": ["items"],
            "properties": {"items": items, "options": {"$ref": f"{REF}{name}Options"}},
        }
        needs = (
            " This gate checks the response: an item without one is an error row."
            if gate_class(gate).needs_response
            else ""
        )
        schemas[f"{name}Request"] = {
            "description": f"What the {gate} gate's route takes: one item, a list of items, or the items with "
            f"options.{needs}",
            "anyOf": [{"$ref": f"{REF}Item"}, items, {"$ref": f"{REF}{name}Items"}],
        }
    return schemas


def request_body(gate: str) -> dict[str, Any]:
    """The OpenAPI request body of ``gate``'s route: a reference to ``<Gate>Request`` (:func:`request_schemas`)."""
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"{REF}{name_part(gate)}Request"}, "example": _EXAMPLE}},
    }


def formats_of(gate: Gate | type[Gate]) -> tuple[str, ...]:
    """The verdict formats ``gate``'s verdicts can be written in."""
    return tuple(name for name in verdict_format_names() if verdict_format(name).refuses(gate) is None)


def format_parameter() -> Any:
    """The type of ``?format=``: one of the verdict formats' names (the OpenAPI enum, and FastAPI's check)."""
    return cast(Any, Literal)[verdict_format_names()]


def query_parameters(gate: str, judge: type[JudgeConfig] = JudgeConfig) -> list[dict[str, Any]]:
    """The options a request may set on ``gate``, as OpenAPI query parameters."""
    return [
        {"name": key, "in": "query", "required": False, "schema": schema, "description": schema.get("description", "")}
        for key, schema in per_request_options(gate, judge).items()
    ]


def response_model(gate: str, detail: str) -> type[BaseModel]:
    """The body of a 200 from ``gate``'s route on a server judging at ``detail``: one row per item, in
    order, each a verdict (in the format the request asked for) or that item's error."""
    return _response_model(gate, detail, formats_of(gate_class(gate)))


@cache
def _response_model(gate: str, detail: str, formats: tuple[str, ...]) -> type[BaseModel]:
    # ``?format=`` picks the verdict's shape: a row of any format the gate's verdicts can be written in (formats of
    # one shape share a model).
    rows = dict.fromkeys(result_row_model(gate, detail, name, "index") for name in formats)
    row: Any = functools.reduce(operator.or_, rows)
    model: type[BaseModel] = create_model(
        f"{name_part(gate)}Response",
        __config__=ConfigDict(extra="forbid", frozen=True),
        __doc__=f"The {gate} gate's answer: one result per item, in order.",
        request_id=(str, Field(description="the request's id: also its X-Request-ID header and audit run_id")),
        gate=(cast(Any, Literal)[gate], Field(description="the gate that judged the items")),
        results=(list[row], Field(description="one row per item, in order (`index`: its position)")),
    )
    return model
