"""The toolkit a gate's constraint is built from: regular-expression algebra with byte
bounds, the constraint and its segments, a constraint read from a pydantic model of the output, the
decision-only form, and routes."""

from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.from_model import ChunkLabel, model_rx
from suffice.grammars.regex import (
    JSON_BOOL,
    UNIT_INTERVAL,
    Rx,
    alt,
    json_list,
    json_members,
    json_object,
    json_string,
    lit,
    opt,
    repeat,
    seq,
)
from suffice.grammars.routes import Route, Routing

__all__ = [
    "JSON_BOOL",
    "UNIT_INTERVAL",
    "ChunkLabel",
    "Constraint",
    "Route",
    "Routing",
    "Rx",
    "Segment",
    "alt",
    "json_list",
    "json_members",
    "json_object",
    "json_string",
    "lit",
    "model_rx",
    "opt",
    "repeat",
    "seq",
]
