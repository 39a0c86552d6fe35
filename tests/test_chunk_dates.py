"""A chunk's ``date`` (ISO 8601) and free ``metadata`` are checked field by field and
reach every gate's prompt as fenced attributes of the chunk."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import InputError
from suffice.gates import gate_class, gate_names, roles
from suffice.prompts.fitting import fit_prompt
from suffice.records.item import METADATA_MAX_KEYS, parse_record
from tests.fakes import ScriptedEngine


def record(**chunk: Any) -> dict[str, Any]:
    return {"id": "r", "question": "What changed in 2024?", "chunks": [{"id": 0, "text": "Rates rose.", **chunk}]}


def test_date_and_metadata_are_read() -> None:
    item = parse_record(record(date="2024-03-01", metadata={"author": "ECB", "page": 3, "final": True}))
    chunk = item.chunks[0]
    assert chunk.date == "2024-03-01"
    assert chunk.metadata_dict == {"author": "ECB", "page": 3, "final": True}
    assert parse_record(record(date="2024-03-01T12:30:00+00:00")).chunks[0].date == "2024-03-01T12:30:00+00:00"
    hash(chunk)  # still hashable


@pytest.mark.parametrize(
    ("chunk", "field"),
    [
        ({"date": "yesterday"}, "chunks[0].date"),
        ({"date": "2024-13-01"}, "chunks[0].date"),
        ({"date": 20240301}, "chunks[0].date"),
        ({"metadata": "author=ECB"}, "chunks[0].metadata"),
        ({"metadata": {"tags": ["a", "b"]}}, "chunks[0].metadata.tags"),
        ({"metadata": {"nested": {"a": 1}}}, "chunks[0].metadata.nested"),
        ({"metadata": {"long": "x" * 257}}, "chunks[0].metadata.long"),
        ({"metadata": {f"k{i}": i for i in range(METADATA_MAX_KEYS + 1)}}, "chunks[0].metadata"),
    ],
)
def test_a_bad_date_or_metadata_names_its_field(chunk: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        parse_record(record(**chunk))
    assert err.value.field == field


def _options(name: str) -> dict[str, Any]:
    return {"rubric": "legal-review"} if name == "adequacy" else {}


@pytest.mark.parametrize("name", gate_names())
def test_every_gate_shows_the_date_and_metadata_fenced(name: str) -> None:
    cls = gate_class(name)
    gate = cls.from_options(cls.options_model(**_options(name)))
    raw = record(date="2024-03-01", metadata={"publisher": 'The "Times"', "page": 3})
    if gate.needs_response:
        raw["response"] = "Rates rose [0]."
    item = roles.parse_item(gate, raw)
    engine = ScriptedEngine(lambda r: "")
    # Fitted as the judge fits it: a gate that judges the response segment by segment (recovery) shows its segments.
    fitted = fit_prompt(
        engine,
        gate.template,
        item,
        JudgeConfig(),
        functools.partial(roles.item_constraint, gate, item),
        gate.system_context(item),
        gate.user_context(item),
        None,
        roles.response_segments(gate, item),
    )
    user = fitted.messages[-1]["content"]
    if gate.needs_response and roles.response_segments(gate, item) is not None:
        assert "<<segment 0 " in user
    opener = next(line for line in user.splitlines() if line.startswith("<<chunk 0 "))
    assert re.search(r' date="2024-03-01"', opener)
    shown = json.loads(opener.split(" metadata=", 1)[1].removesuffix(">>"))
    assert shown == {"publisher": 'The "Times"', "page": 3}
