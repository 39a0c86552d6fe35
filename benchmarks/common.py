"""Shared helpers for the benchmark scripts: items, validity checks, tables."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema

from suffice.grammars.sufficiency import RAGFLOW_SCHEMA, SufficiencyVerdict
from suffice.results import JudgeResult

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SAMPLE = Path(__file__).resolve().parents[1] / "suffice" / "data" / "sample.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"


def load_items(total: int, seed: int = 0) -> list[dict[str, Any]]:
    """A fixed mix: half SQuAD 2.0, 30 % HotpotQA, 20 % MuSiQue (bundled sample if absent)."""
    shares = {"squad2.jsonl": 0.5, "hotpotqa.jsonl": 0.3, "musique.jsonl": 0.2}
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    for name, share in shares.items():
        path = DATA / name
        if not path.exists():
            path = SAMPLE
        records = [json.loads(line) for line in path.open()]
        rng.shuffle(records)
        items.extend(records[: round(total * share)])
    rng.shuffle(items)
    return items[:total]


def verdict_is_valid(result: JudgeResult, record: dict[str, Any]) -> bool:
    """Schema plus the seed's requirements, checked on the parsed verdict."""
    verdict = result.verdict
    if not isinstance(verdict, SufficiencyVerdict):
        return False
    try:
        jsonschema.validate(verdict.to_ragflow(), RAGFLOW_SCHEMA)
    except jsonschema.ValidationError:
        return False
    ids = {c["id"] for c in record["chunks"]}
    return (
        set(verdict.useful_chunk_ids) <= ids
        and len(set(verdict.useful_chunk_ids)) == len(verdict.useful_chunk_ids)
        and set(verdict.coverage) == set(verdict.required_entities)
        and 0 <= verdict.confidence <= 1
        and (not verdict.missing_information) == verdict.is_sufficient
    )


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Markdown table: (key, header, format) per column."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = []
    for row in rows:
        cells = []
        for key, _, fmt in columns:
            value = row.get(key)
            cells.append("n/a" if value is None else format(value, fmt))
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *body])


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
