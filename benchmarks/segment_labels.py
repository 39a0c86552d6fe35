"""A labeled per-sentence set for the recovery gate's per-segment verdict (issue 49), built from ../shared/data.

Deterministic: the same ``--seed`` and sizes always give the same records, byte for byte.

For each chosen record with ``sufficient: true`` (the three files of ../shared/data in equal shares, each file's
sufficient records shuffled with ``random.Random(f"{seed}:{file}")``), a response of

- 2-4 sentences copied verbatim from the record's own chunks, labeled ``supported``: from its gold chunks
  (``useful_chunk_ids``) first, then, where those hold too few (a SQuAD gold chunk is one sentence), from its
  other chunks; a sentence copied from a chunk the judge is shown is supported by it whichever chunk it is;
- 1-2 sentences copied verbatim from another record of the same file, labeled ``unsupported``: from a chunk whose
  source title (the SQuAD article, the HotpotQA / MuSiQue paragraph title) is none of the record's own, and whose
  text is in none of the record's chunks,

shuffled with the record's own ``random.Random`` and joined with single spaces.  Sentences are cut with
:func:`suffice.gates.recovery.segments.segment` (HotpotQA and MuSiQue chunks open with their title on a line of its
own, which is left out).  A sentence is a candidate only if ``segment`` gives it back whole, alone, as a
``sentence``, it opens with an uppercase letter and closes with ``.``, ``!`` or ``?``, holds no line break, leaves no
quote or bracket open and has 6-60 words.  After joining, ``segment(response)`` must give exactly the chosen
sentences: the first sentence it splits or merges with its neighbour (``... World War I. The ...``) is dropped and
the response built again, until none is; a record left with fewer than 2 supported or 1 unsupported sentences is
skipped.  Every output record is checked again (:func:`check`).

Each output line is a recovery record: ``{"id", "question", "chunks", "response", "segment_labels": [{"start",
"end", "text", "label"}], "origin"}``; ``response[start:end] == text`` and ``segment(response)`` gives exactly
those spans, in order.

``long_items`` builds responses of about ``--words`` words (default 3,000) the same way, for timing a response
checked in full against one cut at ``max_response_tokens``: a MuSiQue or HotpotQA record's own sentences (shuffled)
up to three quarters of the words, the rest from other records'.  ``ten_sentence_items``: 7 supported and 3
unsupported sentences each, for the decoded tokens of a 10-sentence response.

    .venv/bin/python benchmarks/segment_labels.py                      # the 240-item set
    .venv/bin/python benchmarks/segment_labels.py --n 24 --out /tmp/s.jsonl
    .venv/bin/python benchmarks/segment_labels.py --long 3 --out /tmp/long.jsonl

Scoring a verdict against the labels (:func:`scores`: precision, recall and F1 of flagging the ``unsupported``
sentences, every sentence of every item counted once):

- the per-segment verdict flags a sentence when the segment at its offsets (else of its text) is labeled
  ``unsupported`` or ``partial`` (:func:`new_flags`);
- today's verdict names unsupported claims in its own words (``unsupported_claims``, at most 3 of 64 characters),
  so a claim flags the one sentence holding the largest share of the claim's content words (lowercased words of 2+
  characters, stopwords left out), if that share is at least half (:data:`CLAIM_OVERLAP`; ties: the first
  sentence) (:func:`claim_match`, :func:`baseline_flags`).  A claim that paraphrases two sentences flags one.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any


def _segmenter() -> Any:
    """``suffice.gates.recovery.segments.segment``; loaded from its file alone when the package does not import
    (the module needs only pydantic, and a working tree half-way through a change to the gate should still build
    the set)."""
    try:
        from suffice.gates.recovery.segments import segment as found
    except Exception:  # ImportError, or a SyntaxError in a file being edited
        import importlib.util
        import sys

        path = Path(__file__).resolve().parents[1] / "suffice" / "gates" / "recovery" / "segments.py"
        spec = importlib.util.spec_from_file_location("_suffice_segments", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # pydantic resolves the module's annotations through it
        spec.loader.exec_module(module)
        found = module.segment
    return found


segment = _segmenter()

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FILES = ("squad2.jsonl", "hotpotqa.jsonl", "musique.jsonl")
#: Files whose records have enough sentences for a long or ten-sentence response.
LONG_FILES = ("musique.jsonl", "hotpotqa.jsonl")
LABELS = ("supported", "unsupported")
_WORD = re.compile(r"\w+")

Record = dict[str, Any]
Sentence = tuple[str, str]  # (text, label)


@cache
def _records(name: str, data: str) -> tuple[Record, ...]:
    with (Path(data) / name).open() as handle:
        return tuple(json.loads(line) for line in handle)


def sufficient_records(name: str, data: Path = DATA) -> list[Record]:
    """The file's records labeled sufficient, in file order."""
    return [r for r in _records(name, str(data)) if r.get("sufficient") is True]


def title(record: Record, chunk: Record) -> str:
    """What a chunk is about: the SQuAD article (``meta.title``), else the chunk's source (a paragraph title)."""
    meta = record.get("meta") or {}
    if "squad" in str(record.get("origin", "")) and meta.get("title"):
        return str(meta["title"])
    return str(chunk.get("source", "")).split(" (paragraph")[0]


def _body(chunk: Record) -> str:
    """The chunk's text without a first line that is only its title (HotpotQA, MuSiQue)."""
    text = str(chunk["text"])
    first, _, rest = text.partition("\n")
    return rest if rest and first.strip() == str(chunk.get("source", "")).strip() else text


def is_candidate(text: str) -> bool:
    """Whether ``text`` can stand as one labeled sentence (module docstring)."""
    words = len(_WORD.findall(text))
    if not (6 <= words <= 60) or "\n" in text or not text[0].isupper() or text[-1] not in ".!?":
        return False
    # A quote or bracket left open would hold the sentences after it in one segment.
    if text.count('"') % 2 or any(text.count(a) != text.count(b) for a, b in ("()", "[]", "“”")):
        return False
    parts = segment(text)
    return len(parts) == 1 and parts[0].kind == "sentence" and parts[0].text == text


def chunk_sentences(chunk: Record) -> list[str]:
    """The candidate sentences of one chunk, in order."""
    return [s.text for s in segment(_body(chunk)) if s.kind == "sentence" and is_candidate(s.text)]


def own_sentences(record: Record) -> list[str]:
    """The record's candidate sentences: its gold chunks' first (in id order), then its other chunks'."""
    gold = set(record.get("useful_chunk_ids") or [])
    ordered = [c for c in record["chunks"] if c["id"] in gold] + [c for c in record["chunks"] if c["id"] not in gold]
    seen: set[str] = set()
    out = []
    for chunk in ordered:
        for text in chunk_sentences(chunk):
            if text not in seen:
                seen.add(text)
                out.append(text)
    return out


def foreign_sentences(record: Record, pool: Sequence[Record], rng: random.Random, want: int) -> list[str]:
    """``want`` candidate sentences from other records of ``pool`` about none of ``record``'s titles."""
    titles = {title(record, c) for c in record["chunks"]}
    texts = [str(c["text"]) for c in record["chunks"]]
    found: list[str] = []
    for _ in range(200):
        if len(found) >= want:
            break
        other = pool[rng.randrange(len(pool))]
        if other["id"] == record["id"]:
            continue
        chunks = [c for c in other["chunks"] if title(other, c) not in titles]
        if not chunks:
            continue
        options = chunk_sentences(chunks[rng.randrange(len(chunks))])
        options = [s for s in options if s not in found and not any(s in t for t in texts)]
        if options:
            found.append(options[rng.randrange(len(options))])
    return found


def compose(sentences: Sequence[Sentence], rng: random.Random) -> tuple[str, list[dict[str, Any]]] | None:
    """Shuffle and join ``sentences``; drop those ``segment`` would split or merge and try again.  ``None`` when
    fewer than 2 supported or 1 unsupported are left."""
    kept = list(sentences)
    rng.shuffle(kept)
    while True:
        if sum(label == "supported" for _, label in kept) < 2 or not any(label == "unsupported" for _, label in kept):
            return None
        response, spans = join(kept)
        found = {(s.start, s.end) for s in segment(response)}
        bad = next((i for i, (start, end) in enumerate(spans) if (start, end) not in found), None)
        if bad is None:
            labels = [
                {"start": start, "end": end, "text": text, "label": label}
                for (start, end), (text, label) in zip(spans, kept, strict=True)
            ]
            return response, labels
        # The first sentence not given back whole is the one that runs on (or is cut): without it, its
        # neighbours may come back whole.
        del kept[bad]


def join(sentences: Sequence[Sentence]) -> tuple[str, list[tuple[int, int]]]:
    """The sentences joined with single spaces, and each one's (start, end) in the result."""
    spans = []
    at = 0
    for text, _ in sentences:
        spans.append((at, at + len(text)))
        at += len(text) + 1
    return " ".join(text for text, _ in sentences), spans


def check(item: Record) -> None:
    """Raise AssertionError unless ``segment(response)`` gives exactly the labeled sentences, in order."""
    response = item["response"]
    labels = item["segment_labels"]
    got = [(s.start, s.end, s.text) for s in segment(response)]
    want = [(x["start"], x["end"], x["text"]) for x in labels]
    assert got == want, f"{item['id']}: segment(response) does not give the labeled sentences"
    for x in labels:
        assert response[x["start"] : x["end"]] == x["text"], f"{item['id']}: offsets do not point at the text"
        assert x["label"] in LABELS


def _item(record: Record, name: str, response: str, labels: list[dict[str, Any]], suffix: str = "") -> Record:
    item = {
        "id": f"seg:{name.removesuffix('.jsonl')}:{record['id']}{suffix}",
        "question": record["question"],
        "chunks": record["chunks"],
        "response": response,
        "segment_labels": labels,
        "origin": record.get("origin"),
    }
    check(item)
    return item


def build_one(record: Record, name: str, pool: Sequence[Record], seed: int) -> Record | None:
    """One labeled item from ``record`` (2-4 supported, 1-2 unsupported sentences), or ``None``."""
    rng = random.Random(f"{seed}:{name}:{record['id']}")
    supported, unsupported = rng.randint(2, 4), rng.randint(1, 2)
    own = own_sentences(record)[:supported]
    foreign = foreign_sentences(record, pool, rng, unsupported)
    composed = compose([(s, "supported") for s in own] + [(s, "unsupported") for s in foreign], rng)
    return None if composed is None else _item(record, name, *composed)


def build(n: int = 240, seed: int = 0, data: Path = DATA, files: Sequence[str] = FILES) -> list[Record]:
    """``n`` labeled items, in equal shares over ``files`` (the first files take the remainder), interleaved."""
    per_file = [n // len(files) + (i < n % len(files)) for i in range(len(files))]
    columns: list[list[Record]] = []
    for name, want in zip(files, per_file, strict=True):
        pool = sufficient_records(name, data)
        order = list(pool)
        random.Random(f"{seed}:{name}").shuffle(order)
        items: list[Record] = []
        for record in order:
            if len(items) >= want:
                break
            item = build_one(record, name, pool, seed)
            if item is not None:
                items.append(item)
        if len(items) < want:
            raise ValueError(f"{name}: only {len(items)} usable sufficient records, {want} wanted")
        columns.append(items)
    # Interleaved, so that --items N of the whole set is balanced too.
    return [column[i] for i in range(max(per_file)) for column in columns if i < len(column)]


def _words(texts: Iterable[str]) -> int:
    return sum(len(_WORD.findall(t)) for t in texts)


def long_items(
    n: int = 3, words: int = 3000, seed: int = 0, data: Path = DATA, supported_share: float = 0.75
) -> list[Record]:
    """``n`` responses of about ``words`` words (module docstring), from the records with the most own words."""
    out: list[Record] = []
    candidates: list[tuple[str, Record, list[Record]]] = []
    for name in LONG_FILES:
        pool = sufficient_records(name, data)
        candidates.extend((name, r, pool) for r in pool)
    # The records richest in sentences first (ties by id: deterministic), one per file in turn.
    candidates.sort(key=lambda c: (-_words(own_sentences(c[1])), c[1]["id"]))
    for name, record, pool in candidates:
        if len(out) >= n:
            break
        rng = random.Random(f"{seed}:long:{name}:{record['id']}")
        own = own_sentences(record)
        rng.shuffle(own)
        chosen: list[Sentence] = []
        for text in own:
            if _words(t for t, _ in chosen) >= words * supported_share:
                break
            chosen.append((text, "supported"))
        missing = words - _words(t for t, _ in chosen)
        foreign: list[str] = []
        while missing > 0:
            more = foreign_sentences(record, pool, rng, 8)
            more = [s for s in more if s not in foreign]
            if not more:
                break
            for text in more:
                if missing <= 0:
                    break
                foreign.append(text)
                missing -= _words([text])
        composed = compose(chosen + [(s, "unsupported") for s in foreign], rng)
        if composed is not None:
            out.append(_item(record, name, *composed, suffix=":long"))
    return out


def ten_sentence_items(n: int = 3, seed: int = 0, data: Path = DATA, supported: int = 7) -> list[Record]:
    """``n`` responses of exactly 10 sentences (``supported`` of them supported), from HotpotQA and MuSiQue."""
    out: list[Record] = []
    pools = {name: sufficient_records(name, data) for name in LONG_FILES}
    orders = {}
    for name, pool in pools.items():
        orders[name] = list(pool)
        random.Random(f"{seed}:ten:{name}").shuffle(orders[name])
    turn = 0
    while len(out) < n and any(orders.values()):
        name = LONG_FILES[turn % len(LONG_FILES)]
        turn += 1
        if not orders[name]:
            continue
        record = orders[name].pop(0)
        rng = random.Random(f"{seed}:ten:{name}:{record['id']}")
        own = own_sentences(record)[:supported]
        foreign = foreign_sentences(record, pools[name], rng, 10 - supported)
        if len(own) < supported or len(foreign) < 10 - supported:
            continue
        composed = compose([(s, "supported") for s in own] + [(s, "unsupported") for s in foreign], rng)
        if composed is not None and len(composed[1]) == 10:
            out.append(_item(record, name, *composed, suffix=":ten"))
    return out


def judge_record(item: Record) -> Record:
    """The item as ``suffice judge --gate recovery`` reads it (the labels left out)."""
    return {k: item[k] for k in ("id", "question", "chunks", "response")}


# --- scoring a verdict against the labels ------------------------------------------------------------------------

#: Words that say nothing about a claim's content (left out of the overlap rule).
_STOPWORDS = (
    "a an the and or but nor of in on at to for from by with as into onto about than then that this these those "
    "it its is are was were be been being has have had do does did not no so such which who whom whose what when "
    "where why how he she they them his her their we our you your i me my there here also only very can could "
    "will would may might shall should must one"
)
STOPWORDS = frozenset(_STOPWORDS.split())
#: The overlap rule: a claim matches a sentence holding at least this share of the claim's content words.
CLAIM_OVERLAP = 0.5
#: The new verdict's labels that flag a segment as not (fully) supported.
FLAGGING = frozenset({"unsupported", "partial"})


def content_words(text: str) -> set[str]:
    """Lowercased words of two characters or more, stopwords left out (``Aristotle's`` gives ``aristotle``)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS}


def claim_match(claim: str, sentences: Sequence[str]) -> int | None:
    """The sentence a claim paraphrases: the one holding the largest share of the claim's content words, if that
    share is at least :data:`CLAIM_OVERLAP` (ties: the first); ``None`` for none, or a claim of no content word."""
    words = content_words(claim)
    if not words:
        return None
    shares = [len(words & content_words(s)) / len(words) for s in sentences]
    best = max(range(len(shares)), key=lambda i: (shares[i], -i), default=None)
    return best if best is not None and shares[best] >= CLAIM_OVERLAP else None


def baseline_flags(verdict: Record | None, labels: Sequence[Record]) -> list[bool]:
    """Per labeled sentence, whether today's verdict flags it: one of its ``unsupported_claims`` matches it
    (:func:`claim_match`).  No verdict (an error row) flags nothing."""
    flags = [False] * len(labels)
    sentences = [x["text"] for x in labels]
    for claim in (verdict or {}).get("unsupported_claims") or []:
        found = claim_match(str(claim), sentences)
        if found is not None:
            flags[found] = True
    return flags


def new_flags(verdict: Record | None, labels: Sequence[Record]) -> tuple[list[bool], int]:
    """Per labeled sentence, whether the per-segment verdict labels it ``unsupported`` or ``partial``; and how many
    labeled sentences no segment of the verdict matches (by offsets, else by text; counted as not flagged)."""
    segments = list((verdict or {}).get("segments") or [])
    by_span = {(s.get("start"), s.get("end")): s for s in segments}
    unused = list(segments)
    flags = []
    unmatched = 0
    for x in labels:
        found = by_span.get((x["start"], x["end"]))
        if found is None or found.get("text", x["text"]) != x["text"]:
            found = next((s for s in unused if s.get("text") == x["text"]), None)
        if found is None:
            unmatched += 1
            flags.append(False)
            continue
        if found in unused:
            unused.remove(found)
        flags.append(found.get("label") in FLAGGING)
    return flags, unmatched


def scores(flags: Sequence[bool], truth: Sequence[bool]) -> dict[str, Any]:
    """Precision, recall and F1 of ``flags`` at finding the sentences ``truth`` marks unsupported (micro: every
    sentence counted once); ``None`` where a ratio has nothing to divide by."""
    pairs = list(zip(flags, truth, strict=True))
    tp = sum(f and t for f, t in pairs)
    fp = sum(f and not t for f, t in pairs)
    fn = sum(t and not f for f, t in pairs)
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else (0.0 if tp + fp + fn else None)
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": len(pairs) - tp - fp - fn,
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }


def summary(items: Sequence[Record]) -> dict[str, Any]:
    labels = [x["label"] for item in items for x in item["segment_labels"]]
    return {
        "items": len(items),
        "sentences": len(labels),
        "supported": labels.count("supported"),
        "unsupported": labels.count("unsupported"),
        "mean_words": _words(i["response"] for i in items) / len(items) if items else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=240, help="labeled items (default 240, in equal shares per file)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long", type=int, default=0, metavar="N", help="build N long responses instead")
    parser.add_argument("--words", type=int, default=3000, help="--long: words a response (default 3000)")
    parser.add_argument("--ten", type=int, default=0, metavar="N", help="build N ten-sentence responses instead")
    parser.add_argument("--out", default="/tmp/segment_labels.jsonl", help="JSONL to write")
    args = parser.parse_args()
    if args.long:
        items = long_items(args.long, args.words, args.seed)
    elif args.ten:
        items = ten_sentence_items(args.ten, args.seed)
    else:
        items = build(args.n, args.seed)
    with open(args.out, "w") as handle:
        for item in items:
            handle.write(json.dumps(item) + "\n")
    print(json.dumps(summary(items)))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
