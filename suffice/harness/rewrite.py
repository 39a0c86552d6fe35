"""Query rewriting with the same engine: one batched call, a bounded JSON array out.

The adequacy seed's retrieval expansion ("rewrite the query using a separate
query-rewriting prompt").  If a rewrite fails to parse, the original queries are
kept: rewriting may improve recall but must never lose a round.  If the engine
call itself fails, the pipeline isolates the failing question (see
:mod:`suffice.serving.isolation`) and sends it alone to review.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from suffice.grammars.constraint import Constraint
from suffice.grammars.regex import json_list, json_string
from suffice.prompts.templates import TEMPLATE_ROOT, load_prompt
from suffice.serving.base import Engine, GenerationRequest

MAX_QUERIES = 3
QUERY_CHARS = 64


@lru_cache(maxsize=1)
def rewrite_constraint() -> Constraint:
    return Constraint.from_rx(json_list(json_string(1, QUERY_CHARS), 1, MAX_QUERIES), key="rewrite")


@dataclass(frozen=True)
class RewriteRequest:
    question: str
    gaps: tuple[str, ...]
    tried: tuple[str, ...]


class QueryRewriter:
    def __init__(self, engine: Engine, prompt_version: str = "v1") -> None:
        self.engine = engine
        self.template = load_prompt(TEMPLATE_ROOT / "rewrite", "rewrite", prompt_version)

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[list[str]]:
        system = {"max_queries": MAX_QUERIES, "query_chars": QUERY_CHARS}
        batch = [
            GenerationRequest(
                self.template.render(system, {"question": r.question[:2000], "gaps": r.gaps, "tried": r.tried}),
                rewrite_constraint(),
            )
            for r in requests
        ]
        out = []
        for request, generation in zip(requests, self.engine.generate(batch), strict=True):
            try:
                queries = [q for q in json.loads(generation.text) if isinstance(q, str) and q.strip()]
            except json.JSONDecodeError:
                queries = []
            out.append(
                _fresh(queries, request)
                or _fresh(list(request.gaps), request)
                or list(request.gaps or request.tried or (request.question,))
            )
        return out


def _fresh(queries: Sequence[str], request: RewriteRequest) -> list[str]:
    """``queries`` without repeats and without those already tried (compared without
    case and spacing), so the retries search the gap, not ``a`` again."""
    tried = {" ".join(q.lower().split()) for q in request.tried}
    fresh: dict[str, str] = {}
    for query in queries:
        fresh.setdefault(" ".join(query.lower().split()), query)
    return [query for key, query in fresh.items() if key and key not in tried]
