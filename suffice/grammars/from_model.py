"""A constraint read from a pydantic model of what the model writes: its fields, in order, as compact JSON.

A gate declaring ``output_model`` gets its constraint and its parse from this (:class:`suffice.Gate`), so the
model's output is written once, as a class.  Every field must be bounded, because the constraint bounds every
output's bytes: a ``list`` or ``str`` needs ``max_length``; an ``int`` needs ``ge`` and ``le`` (or is a
:data:`ChunkLabel`); a ``float`` is a probability (``ge=0``, ``le=1``, two decimals).  ``bool``, ``Literal``,
``X | None`` and nested models take their JSON forms.
"""

from __future__ import annotations

import json
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, NonNegativeInt

from suffice.grammars.regex import JSON_BOOL, UNIT_INTERVAL, Rx, alt, json_list, json_object, json_string, lit


class _Label:
    """The marker of :data:`ChunkLabel` in a field's metadata."""

    def __repr__(self) -> str:
        return "ChunkLabel"


_LABEL = _Label()

#: A field naming one of the chunks the prompt shows, by its label ``0..n-1`` (``FittedPrompt.chunk_ids[label]``
#: is the caller's id): the constraint allows only the labels shown.
ChunkLabel = Annotated[NonNegativeInt, _LABEL]

#: The most values an ``int`` field's range may hold (each is written out in the pattern).
MAX_INT_VALUES = 1000


def model_rx(model: type[BaseModel], labels: int) -> Rx:
    """The compact JSON objects ``model`` describes, for a prompt showing ``labels`` chunks; a :class:`TypeError`
    names a field the constraint cannot bound."""
    rx = _object(model, labels)
    if rx is None:
        raise TypeError(f"{model.__name__} has no value when no chunk is shown: allow None where it names one")
    return rx


def _object(model: type[BaseModel], labels: int) -> Rx | None:
    fields = []
    for name, info in model.model_fields.items():
        rx = _rx(info.annotation, list(info.metadata), labels, f"{model.__name__}.{name}")
        if rx is None:
            return None
        fields.append((info.alias or name, rx))
    return json_object(fields)


def _bound(metadata: list[Any], attribute: str, default: Any = None) -> Any:
    """The last bound named ``attribute`` (``min_length``, ``max_length``, ``ge``, ``le``) in a field's metadata."""
    found = [getattr(m, attribute) for m in metadata if getattr(m, attribute, None) is not None]
    return found[-1] if found else default


def _rx(annotation: Any, metadata: list[Any], labels: int, where: str) -> Rx | None:
    """The pattern of one value (``None``: no value is possible, a label with no chunk shown)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *more = get_args(annotation)
        flat = [m for extra in more for m in (extra.metadata if hasattr(extra, "metadata") else [extra])]
        return _rx(inner, [*metadata, *flat], labels, where)
    if any(m is _LABEL for m in metadata):
        return alt(*[lit(str(i)) for i in range(labels)]) if labels else None
    if origin in (Union, types.UnionType):
        parts = [_rx(arg, [], labels, where) for arg in get_args(annotation)]
        possible = [p for p in parts if p is not None]
        return alt(*possible) if possible else None
    if annotation is type(None):
        return lit("null")
    if origin is Literal:
        return alt(*[lit(json.dumps(value)) for value in get_args(annotation)])
    if origin is list or annotation is str:
        limit = _bound(metadata, "max_length")
        if limit is None:
            kind = "list" if origin is list else "str"
            raise TypeError(f"{where}: a {kind} needs max_length (the constraint bounds every output)")
    if annotation is str:
        return json_string(_bound(metadata, "min_length", 0), limit)
    if origin is list:
        item, least = _rx(get_args(annotation)[0], [], labels, where), _bound(metadata, "min_length", 0)
        if item is None:
            return None if least else lit("[]")
        return json_list(item, least, limit)
    if annotation is bool:
        return JSON_BOOL
    if annotation is int:
        lo, hi = _bound(metadata, "ge"), _bound(metadata, "le")
        if lo is None or hi is None or hi - lo >= MAX_INT_VALUES:
            raise TypeError(f"{where}: an int needs ge and le at most {MAX_INT_VALUES} apart, or ChunkLabel")
        return alt(*[lit(str(i)) for i in range(lo, hi + 1)])
    if annotation is float:
        if (_bound(metadata, "ge"), _bound(metadata, "le")) != (0, 1):
            raise TypeError(f"{where}: a float must be a probability (ge=0, le=1)")
        return UNIT_INTERVAL
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _object(annotation, labels)
    raise TypeError(f"{where}: {annotation!r} has no bounded JSON form for a constraint")
