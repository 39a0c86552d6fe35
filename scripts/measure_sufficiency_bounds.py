"""How many required entities and useful chunks the labeled data calls for (issue 30)."""

import json
import re
import sys
from pathlib import Path

QWORDS = {
    "What",
    "Which",
    "Who",
    "Whom",
    "Whose",
    "When",
    "Where",
    "Why",
    "How",
    "In",
    "On",
    "At",
    "The",
    "A",
    "An",
    "Is",
    "Are",
    "Was",
    "Were",
    "Did",
    "Do",
    "Does",
    "Of",
    "For",
    "By",
    "From",
    "To",
    "And",
    "As",
    "This",
    "That",
    "These",
    "Those",
    "It",
    "He",
    "She",
    "They",
    "His",
    "Her",
    "Its",
    "Their",
}
SPAN = re.compile(
    r'"[^"]+"|\u201c[^\u201d]+\u201d|\b\d[\d,.]*\b|\b[A-Z][\w\'\-.&]*(?:\s+(?:of|the|de|and|for|in|on|la|le|von|van|&)?\s*[A-Z][\w\'\-.&]*)*'
)


def entities(q: str) -> int:
    spans = []
    for m in SPAN.finditer(q):
        s = m.group(0).strip()
        words = s.split()
        while words and words[0] in QWORDS:
            words = words[1:]
        if words:
            spans.append(" ".join(words))
    return len(set(spans)) + 1  # + the fact asked for


def pct(xs: list[int], p: float) -> int:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


allE: list[int] = []
allU: list[int] = []
for f in sys.argv[1:]:
    E: list[int] = []
    U: list[int] = []
    for line in Path(f).open():
        r = json.loads(line)
        E.append(entities(r["question"]))
        if r.get("useful_chunk_ids") is not None:
            U.append(len(r["useful_chunk_ids"]))
    allE += E
    allU += U
    for name, xs in (("entities", E), ("useful", U)):
        print(
            f"{Path(f).stem:9} {name:8} n={len(xs)} p50={pct(xs, 50)} p90={pct(xs, 90)} p95={pct(xs, 95)} p99={pct(xs, 99)} max={max(xs)}"
        )
for name, xs in (("entities", allE), ("useful", allU)):
    for k in range(1, max(xs) + 1):
        share = sum(x <= k for x in xs) / len(xs)
        print(f"all {name} <= {k}: {share:.4f}")
