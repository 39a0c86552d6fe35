"""benchmarks/segment_labels.py and bench_segments.py without an engine: the labeled set is deterministic and its
offsets are segment()'s, the claim matcher follows its overlap rule, and the scores are the arithmetic."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _import(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def labels() -> Any:
    return _import("segment_labels")


@pytest.fixture(scope="module")
def data(labels: Any) -> Path:
    if not all((labels.DATA / name).exists() for name in labels.FILES):
        pytest.skip(f"no labeled data in {labels.DATA}")
    return Path(labels.DATA)


def test_the_set_is_deterministic_balanced_and_its_offsets_are_segments(labels: Any, data: Path) -> None:
    from suffice.gates.recovery.segments import segment

    items = labels.build(9, seed=0, data=data)
    assert items == labels.build(9, seed=0, data=data)
    assert items != labels.build(9, seed=1, data=data)
    assert [i["id"].split(":")[1] for i in items] == ["squad2", "hotpotqa", "musique"] * 3
    # The first items of a larger set are a smaller set's: --items N takes a prefix.
    assert labels.build(12, seed=0, data=data)[:3] == items[:3]
    for item in items:
        labels.check(item)
        marks = item["segment_labels"]
        assert [(s.start, s.end, s.text) for s in segment(item["response"])] == [
            (x["start"], x["end"], x["text"]) for x in marks
        ]
        supported = [x["text"] for x in marks if x["label"] == "supported"]
        unsupported = [x["text"] for x in marks if x["label"] == "unsupported"]
        assert 2 <= len(supported) <= 4 and 1 <= len(unsupported) <= 2
        own = [c["text"] for c in item["chunks"]]
        assert all(any(s in text for text in own) for s in supported)
        assert not any(any(s in text for text in own) for s in unsupported)
        assert item["response"] == " ".join(x["text"] for x in marks)
        assert set(labels.judge_record(item)) == {"id", "question", "chunks", "response"}


def test_long_and_ten_sentence_responses(labels: Any, data: Path) -> None:
    ten = labels.ten_sentence_items(2, seed=0, data=data)
    assert len(ten) == 2 and all(len(i["segment_labels"]) == 10 for i in ten)
    assert all(sum(x["label"] == "unsupported" for x in i["segment_labels"]) == 3 for i in ten)
    (long,) = labels.long_items(1, words=800, seed=0, data=data)
    labels.check(long)
    assert labels.summary([long])["mean_words"] >= 800
    assert long == labels.long_items(1, words=800, seed=0, data=data)[0]


def test_a_sentence_segment_would_run_on_is_dropped(labels: Any) -> None:
    sentences = [
        ("It was fought before the end of World War I.", "supported"),
        ("The treaty was signed in a railway carriage.", "supported"),
        ("Paris has been the capital of France for centuries.", "unsupported"),
        ("The river runs north through the valley to the sea.", "supported"),
    ]
    for seed in range(6):
        response, marks = labels.compose(sentences, random.Random(seed))
        labels.check({"id": "x", "response": response, "segment_labels": marks})
        texts = [x["text"] for x in marks]
        # "... World War I. The ..." is one segment (a single capital initial ends no sentence): only last may it stay.
        assert sentences[0][0] not in texts[:-1]
    assert labels.compose(sentences[:1] + sentences[2:3], random.Random(0)) is None  # fewer than 2 supported


def test_the_claim_matcher_follows_the_overlap_rule(labels: Any) -> None:
    sentences = [
        "Aristotle believed the terrestrial sphere held four elements.",
        "The Normans gave their name to Normandy, a region in France.",
        "Normandy lies in the north of France.",
    ]
    assert labels.content_words("The Normans' name is Normandy's.") == {"normans", "name", "normandy"}
    assert labels.claim_match("four elements, said Aristotle", sentences) == 0
    # 2 of 3 content words (normandy, france) in both the second and third sentence: the first of the best wins.
    assert labels.claim_match("Normandy is in France, Europe", sentences) == 1
    assert labels.claim_match("Normandy north", sentences) == 2
    assert labels.claim_match("Normandy was settled by Vikings in 911", sentences) is None  # 1 of 4 words: < 0.5
    assert labels.claim_match("it is what it was", sentences) is None  # no content word
    marks = [{"start": 0, "end": 1, "text": s, "label": "supported"} for s in sentences]
    verdict = {"unsupported_claims": ["Normandy north", "Vikings settled Normandy in 911"], "supported_claims": []}
    assert labels.baseline_flags(verdict, marks) == [False, False, True]
    assert labels.baseline_flags(None, marks) == [False, False, False]


def test_new_flags_match_segments_by_offsets_then_text(labels: Any) -> None:
    marks = [
        {"start": 0, "end": 5, "text": "A b c", "label": "supported"},
        {"start": 6, "end": 11, "text": "D e f", "label": "unsupported"},
        {"start": 12, "end": 17, "text": "G h i", "label": "unsupported"},
        {"start": 18, "end": 23, "text": "J k l", "label": "supported"},
    ]
    verdict = {
        "segments": [
            {"start": 0, "end": 5, "text": "A b c", "label": "supported"},
            {"start": 6, "end": 11, "text": "D e f", "label": "partial"},
            {"start": 40, "end": 45, "text": "G h i", "label": "unsupported"},  # offsets off: found by its text
            {"start": 50, "end": 55, "text": "X y z", "label": "unsupported"},
        ]
    }
    assert labels.new_flags(verdict, marks) == ([False, True, True, False], 1)
    assert labels.new_flags(None, marks) == ([False] * 4, 4)


def test_scores_are_the_arithmetic(labels: Any) -> None:
    got = labels.scores([True, True, False, False, True], [True, False, True, False, False])
    assert (got["tp"], got["fp"], got["fn"], got["tn"]) == (1, 2, 1, 1)
    assert got["precision"] == pytest.approx(1 / 3)
    assert got["recall"] == pytest.approx(1 / 2)
    assert got["f1"] == pytest.approx(0.4)
    none = labels.scores([False, False], [True, False])
    assert (none["precision"], none["recall"], none["f1"]) == (None, 0.0, 0.0)
    assert labels.scores([False], [False])["f1"] is None
    with pytest.raises(ValueError):
        labels.scores([True], [True, False])


def test_a_leg_row_and_the_ratios(labels: Any) -> None:
    bench = _import("bench_segments")
    item = {
        "id": "r1",
        "response": "One two three. Four five six.",
        "segment_labels": [
            {"start": 0, "end": 14, "text": "One two three.", "label": "supported"},
            {"start": 15, "end": 29, "text": "Four five six.", "label": "unsupported"},
        ],
    }
    base_rows = [
        {"id": "r1", "verdict": {"unsupported_claims": ["four five"]}, "tokens": {"prompt": 100, "completion": 40}}
    ]
    segments = [dict(x, label="unsupported") for x in item["segment_labels"]]
    new_rows = [{"id": "r1", "verdict": {"segments": segments}, "tokens": {"prompt": 150, "completion": 20}}]
    base = bench.leg_row("baseline", "labeled", [item], base_rows, 10.0, 30.0)
    new = bench.leg_row("new", "labeled", [item], new_rows, 20.0, 40.0)
    assert (base["precision"], base["recall"], base["f1"]) == (1.0, 1.0, 1.0)
    assert (new["precision"], new["recall"]) == (0.5, 1.0)
    assert new["segment_labels"] == {"unsupported": 2}
    (ratio,) = bench.ratios([base, new])
    assert ratio["prompt_tokens_ratio"] == 1.5
    assert ratio["completion_tokens_ratio"] == 0.5
    assert ratio["seconds_ratio"] == 2.0 and ratio["verdicts_per_s_ratio"] == 0.5
    assert ratio["f1_gain"] == pytest.approx(2 / 3 - 1)
    with pytest.raises(SystemExit, match="'segments'"):
        bench.require_segments(base_rows)
