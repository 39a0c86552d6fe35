"""Shared helpers for the benchmark scripts: items, validity checks, tables."""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import psutil

from suffice.gates.sufficiency.grammar import RAGFLOW_SCHEMA, SufficiencyVerdict
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


class PeakMemory:
    """Peak resident memory of this process and its children (the engine runs in one),
    sampled every 0.2 s from /proc."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _tree_rss() -> int:
        total = 0
        me = os.getpid()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().split()
                if int(pid) != me and not _descends(int(pid), me):
                    continue
                total += int(stat[23]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self._tree_rss())

    def __enter__(self) -> PeakMemory:
        self.peak = self._tree_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_gib(self) -> float:
        return self.peak / 2**30


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(8):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


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


def report(name: str, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]], **extra: Any) -> Path:
    """Print the rows as a table and write them, with the machine and arguments, to ``results/name``."""
    import platform
    import sys

    print(table(rows, columns))
    payload = {"machine": platform.platform(), "python": sys.version.split()[0], "argv": sys.argv[1:], **extra}
    path = write_json(name, {**payload, "rows": list(rows)})
    print(f"\nwritten to {path}")
    return path


def write_json(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``results/name``, or to ``name`` itself when it names a folder, so that
    ``--out results/x.json`` given from the benchmarks' folder means that file."""
    path = Path(name) if Path(name).parent != Path(".") else RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


class TreeMemory:
    """Peak RSS of the largest process in a process tree, and of the whole tree."""

    def __init__(self, root: int) -> None:
        self.root = psutil.Process(root)
        #: Peak RSS of the root process alone (the driver, for a CLI run).
        self.root_peak = 0
        self.largest = 0
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        sizes = []
        for process in processes:
            try:
                sizes.append(process.memory_info().rss)
            except psutil.NoSuchProcess:
                continue
        if sizes:
            self.root_peak = max(self.root_peak, sizes[0])
            self.largest = max(self.largest, max(sizes))
            self.total = max(self.total, sum(sizes))

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
