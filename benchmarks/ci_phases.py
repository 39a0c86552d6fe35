"""CI's wall time by phase, from what ``pytest --ci-phases PATH`` recorded (tests/phases.py).

    python -m pytest -q --ci-phases out/phases.json ...      # any selection; `make test` writes one
    python benchmarks/ci_phases.py out/phases.json            # one run: phases, engine starts, tests over 20 s
    python benchmarks/ci_phases.py before.json after.json     # two runs side by side, with ratios
    python benchmarks/ci_phases.py fast.json+engine.json       # one run made of parts run one after the other
    python benchmarks/ci_phases.py --durations full.log       # an older run's `pytest --durations=N` log

Phases (their seconds add up to the sum of every test's setup, call and teardown):

* **engine starts in shared fixtures**: setups of session- and module-scoped fixtures during which a vLLM engine
  process appeared (the start, and whatever the fixture did after it);
* **other shared fixtures of engine tests**: the batches judged once and shared by a module's tests, and the like;
* **engine tests that start their own engine**: every test phase (outside those fixtures) in which an engine
  process appeared: a ``suffice`` subprocess, a Ray actor, a fault test's restarts;
* **other engine tests**: the rest of the tests marked ``engine``;
* **fast tests**: everything not marked ``engine``.

Engine starts are counted as engine processes (``VLLM::EngineCore``) that appeared under the pytest process: the
count does not depend on the machine's load, which these shared machines make noisy; compare seconds as ratios.
Prints a table and writes JSON to benchmarks/results/ci_phases.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
#: A test whose setup, call and teardown together pass this many seconds is listed by name.
SLOW_S = 20.0

PHASES = (
    "engine starts in shared fixtures",
    "other shared fixtures of engine tests",
    "engine tests that start their own engine",
    "other engine tests",
    "fast tests",
)


def load(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if record.get("format") != 1:
        raise SystemExit(f"{path}: not a --ci-phases record (format {record.get('format')!r})")
    return record


def load_run(spec: Path) -> dict[str, Any]:
    """One run's record; ``A+B`` joins the records of parts run one after the other (``make test`` runs the fast
    tests on two workers, then the engine tests on one), each part's times shifted past the parts before it."""
    parts = [load(Path(part)) for part in str(spec).split("+")]
    joined: dict[str, Any] = {
        "format": 1,
        "wall_s": 0.0,
        "parts_wall_s": [part["wall_s"] for part in parts],
        "tests": [],
        "fixtures": [],
        "engine_starts": [],
    }
    for part in parts:
        shift = joined["wall_s"]
        joined["tests"] += part["tests"]
        joined["fixtures"] += [{**f, "began_s": round(f["began_s"] + shift, 1)} for f in part["fixtures"]]
        joined["engine_starts"] += [{**e, "at_s": round(e["at_s"] + shift, 1)} for e in part["engine_starts"]]
        joined["wall_s"] = round(shift + part["wall_s"], 2)
    return joined


def _in_window(start: dict[str, Any], fixture: dict[str, Any]) -> bool:
    return fixture["began_s"] <= start["at_s"] <= fixture["began_s"] + fixture["seconds"] + 1.0


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """The phases' seconds, the engine starts by where they happened, and the slow tests."""
    tests = {t["nodeid"]: t for t in record["tests"]}
    starts = record["engine_starts"]
    fixture_starts: list[tuple[dict[str, Any], int]] = []
    claimed: set[int] = set()
    for fixture in record["fixtures"]:
        inside = [s["pid"] for s in starts if s["pid"] not in claimed and _in_window(s, fixture)]
        claimed.update(inside)
        fixture_starts.append((fixture, len(inside)))
    seconds = dict.fromkeys(PHASES, 0.0)
    for fixture, count in fixture_starts:
        test = tests.get(fixture["test"], {})
        if not test.get("engine", False):
            continue  # a fast test's fixture counts with the fast tests' setups below
        phase = PHASES[0] if count else PHASES[1]
        seconds[phase] += fixture["seconds"]
    fixture_seconds = Counter[str]()
    for fixture, _ in fixture_starts:
        fixture_seconds[fixture["test"]] += fixture["seconds"] if tests.get(fixture["test"], {}).get("engine") else 0
    own: Counter[tuple[str, str]] = Counter()
    for start in starts:
        if start["pid"] not in claimed and start["test"]:
            own[(start["test"], start["phase"])] += 1
    for nodeid, test in tests.items():
        total = sum(test.get(phase, 0.0) for phase in ("setup", "call", "teardown"))
        if not test.get("engine", False):
            seconds[PHASES[4]] += total
            continue
        rest = total - fixture_seconds[nodeid]
        starting = sum(test.get(phase, 0.0) for phase in ("setup", "call", "teardown") if own[(nodeid, phase)])
        starting = min(starting, max(rest, 0.0))
        seconds[PHASES[2]] += starting
        seconds[PHASES[3]] += max(rest - starting, 0.0)
    by_fixture = Counter[str]()
    for fixture, count in fixture_starts:
        if count:
            name = fixture["name"] + (f"[{fixture['param']}]" if fixture["param"] is not None else "")
            by_fixture[f"fixture {name} ({fixture['test'].split('::')[0]})"] += count
    for (nodeid, phase), count in own.items():
        by_fixture[f"{phase} of {nodeid}"] += count
    slow = sorted(
        (
            (round(sum(t.get(p, 0.0) for p in ("setup", "call", "teardown")), 1), n)
            for n, t in tests.items()
            if sum(t.get(p, 0.0) for p in ("setup", "call", "teardown")) > SLOW_S
        ),
        reverse=True,
    )
    start_fixtures = [f["seconds"] for f, count in fixture_starts if count == 1]
    return {
        "wall_s": record["wall_s"],
        # A part on several workers sums more test seconds than its wall: each part's wall says what it took.
        "parts_wall_s": record.get("parts_wall_s", [record["wall_s"]]),
        "tests": len(tests),
        "engine_tests": sum(1 for t in tests.values() if t.get("engine")),
        "phases_s": {k: round(v, 1) for k, v in seconds.items()},
        "engine_starts": len(starts),
        "engine_starts_by_where": dict(by_fixture.most_common()),
        "median_fixture_start_s": round(statistics.median(start_fixtures), 1) if start_fixtures else None,
        "tests_over_20_s": [{"seconds": s, "test": n} for s, n in slow],
    }


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)")
_WALL = re.compile(r" in (\d+(?:\.\d+)?)s(?: \(|$)")


def engine_tests(root: Path) -> set[str]:
    """The node ids of the tests marked ``engine`` in the tree at ``root`` (collected, not run)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "engine", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def from_durations(log: Path, engine: set[str]) -> dict[str, Any]:
    """What a plain ``pytest --durations=N`` log tells (an older run, recorded without ``--ci-phases``): setups of
    engine tests over :data:`SLOW_S` (shared fixtures: engine starts and shared batches), the rest of the engine
    tests listed, the fast tests listed, and the wall time the listed durations leave unexplained."""
    listed: dict[str, dict[str, float]] = {}
    wall = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if found := _DURATION.match(line):
            listed.setdefault(found[3], {})[found[2]] = float(found[1])
        elif ("passed" in line or "failed" in line) and (found_wall := _WALL.search(line)):
            wall = float(found_wall[1])
    phases = {"engine-test setups over 20 s (engine starts, shared batches)": 0.0, "other engine time listed": 0.0}
    phases["fast tests listed"] = 0.0
    for nodeid, times in listed.items():
        if nodeid in engine:
            setup = times.get("setup", 0.0)
            shared = setup if setup > SLOW_S else 0.0
            phases["engine-test setups over 20 s (engine starts, shared batches)"] += shared
            phases["other engine time listed"] += sum(times.values()) - shared
        else:
            phases["fast tests listed"] += sum(times.values())
    if wall is not None:
        phases["not listed (shorter durations)"] = wall - sum(phases.values())
    slow = sorted(((round(sum(t.values()), 1), n) for n, t in listed.items() if sum(t.values()) > SLOW_S), reverse=True)
    return {
        "wall_s": wall,
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "tests_over_20_s": [{"seconds": s, "test": n, "engine": n in engine} for s, n in slow],
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "records", nargs="+", type=Path, help="one --ci-phases record, or two: before and after (A+B: parts of one run)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "ci_phases.json")
    parser.add_argument(
        "--durations",
        action="store_true",
        help="the records are plain `pytest --durations=N` logs of older runs; engine tests are told by collecting "
        "this tree (--root)",
    )
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    if args.durations:
        engine = engine_tests(args.root)
        logs = {str(path): from_durations(path, engine) for path in args.records}
        for name, summary in logs.items():
            rows = [["phase", "seconds"], *[[k, f"{v:.0f}"] for k, v in summary["phases_s"].items()]]
            rows.append(["wall", f"{summary['wall_s']:.0f}" if summary["wall_s"] is not None else "?"])
            print(f"{name}:\n{_table(rows)}\ntests over {SLOW_S:.0f} s listed:")
            for slow in summary["tests_over_20_s"]:
                print(f"  {slow['seconds']:7.1f} s  {'engine' if slow['engine'] else 'fast  '}  {slow['test']}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"durations_logs": logs}, indent=1) + "\n", encoding="utf-8")
        print(f"\nwritten {args.out}")
        return 0
    if len(args.records) > 2:
        parser.error("give one record, or two (before, after)")
    summaries = [summarize(load_run(path)) for path in args.records]
    names = ["before", "after"] if len(summaries) == 2 else ["run"]
    rows = [["phase", *[f"{n} (s)" for n in names], *(["after/before"] if len(summaries) == 2 else [])]]
    keys = [*PHASES, "sum of tests", "wall"]
    for key in keys:
        values = []
        for s in summaries:
            if key == "wall":
                values.append(s["wall_s"])
            elif key == "sum of tests":
                values.append(sum(s["phases_s"].values()))
            else:
                values.append(s["phases_s"][key])
        row = [key, *[f"{v:.0f}" for v in values]]
        if len(values) == 2:
            row.append(f"{values[1] / values[0]:.2f}" if values[0] else "-")
        rows.append(row)
    parts = max(len(s["parts_wall_s"]) for s in summaries)
    if parts > 1:
        for i in range(parts):
            values = [s["parts_wall_s"][i] if i < len(s["parts_wall_s"]) else None for s in summaries]
            row = [f"wall of part {i + 1}", *["-" if v is None else f"{v:.0f}" for v in values]]
            if len(values) == 2:
                row.append(f"{values[1] / values[0]:.2f}" if values[0] and values[1] else "-")
            rows.append(row)
    counts = [s["engine_starts"] for s in summaries]
    rows.append(["engine starts (count)", *[str(c) for c in counts], *(["-"] if len(counts) == 2 else [])])
    print(_table(rows))
    for name, s in zip(names, summaries, strict=True):
        print(f"\n{name}: {s['tests']} tests ({s['engine_tests']} engine); engine starts by where:")
        for where, count in s["engine_starts_by_where"].items():
            print(f"  {count} x {where}")
        print(f"{name}: tests over {SLOW_S:.0f} s:")
        for slow in s["tests_over_20_s"]:
            print(f"  {slow['seconds']:7.1f} s  {slow['test']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "records": [str(p) for p in args.records],
        **({"before": summaries[0], "after": summaries[1]} if len(summaries) == 2 else {"run": summaries[0]}),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
