"""Other schemas' field names mapped to suffice's record fields.

Why a mapping: traces come from other tools with other names.  RAGAS-style records
(``user_input``, ``retrieved_contexts`` as a list of strings, ``response``,
``reference``) are recognised as they are; any other names are mapped with
``--field question=query --field chunks=passages``.  A list of strings as ``chunks``
becomes chunks with ids ``0..n-1``.  A mapped or RAGAS record without an id gets its
position and a digest of its content (``"row-<n>-<8 hex>"``), so resuming works as long as
the input keeps its order, and a different record at a position is judged again; give
ids to be free of that (records in suffice's own shape still need an id).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from suffice.exceptions import ConfigError
from suffice.records.item import carry_repeats

#: Suffice's record fields a mapping can fill.
FIELDS = ("id", "question", "chunks", "response", "rubric")
#: RAGAS's names (``reference`` is the ground truth, carried but not judged).
RAGAS = {"question": "user_input", "chunks": "retrieved_contexts", "response": "response"}


@dataclass(frozen=True)
class FieldMap:
    """Suffice field -> the input's field name (only the renamed ones)."""

    names: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, pairs: Sequence[str]) -> FieldMap:
        """``["question=query", "chunks=passages"]``; errors name the option and value."""
        names: dict[str, str] = {}
        for pair in pairs:
            ours, sep, theirs = pair.partition("=")
            ours, theirs = ours.strip(), theirs.strip()
            if not sep or not ours or not theirs:
                raise ConfigError("field", pair, "must be SUFFICE_FIELD=INPUT_FIELD, like question=query")
            if ours not in FIELDS:
                raise ConfigError("field", pair, f"{ours!r} is not a record field ({', '.join(FIELDS)})")
            if ours in names:
                raise ConfigError("field", pair, f"{ours!r} is mapped twice")
            names[ours] = theirs
        return cls(names)

    def __str__(self) -> str:
        """As an output's settings record it: ``ours=theirs`` pairs, sorted, comma-joined."""
        return ",".join(f"{ours}={theirs}" for ours, theirs in sorted(self.names.items()))

    def apply(self, record: object, position: int | None) -> object:
        """The record with suffice's names (anything not a JSON object passes through,
        to get its own error line); ``position``: the id a mapped record without one
        gets (``None``: none, where positions mean nothing, as in a Ray Dataset)."""
        if not isinstance(record, dict):
            return record
        names = dict(self.names)
        if "question" not in record and "question" not in names and RAGAS["question"] in record:
            for ours, theirs in RAGAS.items():
                names.setdefault(ours, theirs)
        if names:
            out = {k: v for k, v in record.items() if k not in names.values() or k in names}
            for ours, theirs in names.items():
                if theirs in record:
                    out[ours] = record[theirs]
                else:
                    out.pop(ours, None)
            # A key the input repeated keeps its mark under suffice's name.
            out = carry_repeats(record, out, {theirs: ours for ours, theirs in names.items()})
        else:
            out = record
        out = _chunks_of_strings(out)
        # A record without an id (a Parquet column's null, a RAGAS row, a test's literal) is named by its position and
        # content: the same id wherever it is read, a file, a pytest helper, a resumed run.
        if out.get("id") is None and position is not None:
            out = carry_repeats(out, {**out, "id": f"row-{position}-{_digest(out)}"})  # a copy: the caller's stays
        return out


def _chunks_of_strings(record: dict[str, Any]) -> dict[str, Any]:
    """Strings in ``chunks`` become chunks with their positions as ids; anything else
    in the list is left as it is, so a null among strings (common in a Parquet
    ``list<string>`` column) gets the error naming it, not its neighbour."""
    chunks = record.get("chunks")
    if isinstance(chunks, list) and any(isinstance(c, str) for c in chunks):
        chunks = [{"id": i, "text": c} if isinstance(c, str) else c for i, c in enumerate(chunks)]
        return carry_repeats(record, {**record, "chunks": chunks})
    return record


def _digest(record: dict[str, Any]) -> str:
    """Eight hex digits of what is judged in the record (question, chunks, response,
    rubric; not the other columns, which a re-export may change, nor missing ones,
    which Parquet reads as nulls).  Why in the id: with the position alone, another
    record at that position (an edited line, a second shard judged into the same
    output) would get the old row's verdict; with the digest the old row is stale
    and the record is judged (:func:`suffice.batch.answered.record_key`)."""
    judged = {k: record[k] for k in FIELDS if k != "id" and record.get(k) is not None}
    text = json.dumps(judged, sort_keys=True, ensure_ascii=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:8]
