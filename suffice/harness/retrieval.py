"""Retrievers are the user's: a small protocol, and an adapter for a plain function.

The pipeline asks for every open question of a round in one call, so a retriever
that can batch (a vector index, a search server) may; the function adapter simply
loops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from suffice.records import Chunk, ChunkId, clean_text, parse_chunk


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
        out: list[list[RawChunk]] = []
        for request in requests:
            found: list[RawChunk] = []
            for query in request.queries:
                args = (query, request.width, request) if self.pass_request else (query, request.width)
                found.extend(self.fn(*args))
            out.append(found)
        return out


def content_key(chunk: Chunk) -> tuple[str | None, str]:
    """Chunks are the same when source and normalised text are the same."""
    text = " ".join(chunk.text.split())
    return chunk.source, hashlib.sha256(text.encode("utf-8")).hexdigest()


def merge_chunks(existing: Sequence[Chunk], found: Sequence[RawChunk], round: int) -> tuple[list[Chunk], int]:
    """Existing chunks plus the new ones, de-duplicated by source and content.

    A new chunk keeps its id unless that id is taken, then it becomes ``r<round>-<n>``.
    Returns the merged list and how many chunks were new.
    """
    merged = list(existing)
    seen = {content_key(c) for c in merged}
    ids: set[ChunkId] = {c.id for c in merged}
    added = 0
    for n, raw in enumerate(found):
        if isinstance(raw, Chunk):
            chunk = Chunk(raw.id, clean_text(raw.text), raw.source, raw.score)
        else:
            data = dict(raw)
            data.setdefault("id", f"r{round}-{n}")
            chunk = parse_chunk(data, n)
        key = content_key(chunk)
        if key in seen or not chunk.text.strip():
            continue
        if chunk.id in ids:
            chunk = Chunk(f"r{round}-{n}", chunk.text, chunk.source, chunk.score)
        seen.add(key)
        ids.add(chunk.id)
        merged.append(chunk)
        added += 1
    return merged, added
