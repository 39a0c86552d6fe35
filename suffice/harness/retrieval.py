"""Retrievers are the user's: a small protocol, and an adapter for a plain function.

The pipeline asks for every open question of a round in one call, so a retriever
that can batch (a vector index, a search server) may; the function adapter simply
loops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from suffice.exceptions import InputError
from suffice.records.item import Chunk, check_sources, parse_chunk


@dataclass(frozen=True)
class RetrievalRequest:
    """``width`` is how many chunks to return per query; it grows every round."""

    item_id: str
    question: str
    queries: tuple[str, ...]
    round: int
    width: int


RawChunk = Chunk | Mapping[str, object]


@runtime_checkable
class Retriever(Protocol):
    def retrieve(self, requests: Sequence[RetrievalRequest]) -> list[list[RawChunk]]:
        """Scored chunks (with ``source`` ids) for each request, in request order."""
        ...


class FunctionRetriever:
    """Adapts ``fn(query, k) -> chunks`` (or ``fn(query, k, request)``) to :class:`Retriever`."""

    def __init__(self, fn: Callable[..., Iterable[RawChunk]], *, pass_request: bool = False) -> None:
        self.fn = fn
        self.pass_request = pass_request

    def retrieve(self, requests: Sequence[RetrievalRequest]) -> list[list[RawChunk]]:
        return [[chunk for query in r.queries for chunk in self._found(query, r)] for r in requests]

    def _found(self, query: str, request: RetrievalRequest) -> Iterable[RawChunk]:
        return self.fn(query, request.width, request) if self.pass_request else self.fn(query, request.width)


def content_key(chunk: Chunk) -> tuple[str | None, str]:
    """Chunks are the same when source and normalised text are the same."""
    text = " ".join(chunk.text.split())
    return chunk.source, hashlib.sha256(text.encode("utf-8")).hexdigest()


def _free_id(taken: set[str], wanted: str) -> str:
    """``wanted``, or ``wanted`` with the first free suffix (``r2-1`` may itself be the
    id a retriever gave, or the default of an id-less chunk)."""
    candidate, n = wanted, 1
    while candidate in taken:
        candidate, n = f"{wanted}.{n}", n + 1
    return candidate


def merge_chunks(existing: Sequence[Chunk], found: Sequence[RawChunk], round: int) -> tuple[list[Chunk], int]:
    """Existing chunks plus the new ones, de-duplicated by source and content.

    A new chunk keeps its id unless that id is taken, then it becomes ``r<round>-<n>``.
    Returns the merged list and how many chunks were new.  Retrieved chunks are
    checked like input chunks (a :class:`Chunk` too: it is the caller's object), so a
    malformed one raises :class:`InputError` naming it (``chunks[n].text``) before
    anything is merged, instead of failing later inside the prompt.
    """
    if isinstance(found, (str, bytes, Mapping)) or not isinstance(found, Iterable):
        raise InputError("chunks", f"must be a list of chunks, got {type(found).__name__}")
    parsed: list[Chunk] = []
    for n, raw in enumerate(found):
        if isinstance(raw, Chunk):
            data: dict[str, object] = {"id": raw.id, "text": raw.text, "source": raw.source, "score": raw.score}
            data.update(date=raw.date, metadata=raw.metadata_dict)
        elif isinstance(raw, Mapping):
            data = {"id": f"r{round}-{n}", **raw}
        else:
            raise InputError(f"chunks[{n}]", f"must be an object, got {type(raw).__name__}")
        parsed.append(parse_chunk(data, n))
    merged = list(existing)
    seen = {content_key(c) for c in merged}
    # Ids compared as text, as records' are (1 and "1" are one id).
    ids: set[str] = {str(c.id) for c in merged}
    added = 0
    for n, chunk in enumerate(parsed):
        key = content_key(chunk)
        if key in seen or not chunk.text.strip():
            continue
        if str(chunk.id) in ids:
            chunk = replace(chunk, id=_free_id(ids, f"r{round}-{n}"))
        seen.add(key)
        ids.add(str(chunk.id))
        merged.append(chunk)
        added += 1
    check_sources(merged)
    return merged, added
