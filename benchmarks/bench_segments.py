"""Issue 49: the recovery gate's per-segment verdict against today's, on the same labeled items, in one run.

The items are ``segment_labels.py``'s (the first ``--items`` of the 240-item set, balanced over SQuAD 2.0, HotpotQA
and MuSiQue): responses of 2-4 sentences copied from the record's own chunks (``supported``) and 1-2 from other
records' (``unsupported``).  Two legs, each a fresh ``suffice judge --gate recovery --no-cache`` process on the
same input file, one after the other:

- **baseline**: the code of ``--baseline-rev`` (default 4558ff2, today's verdict: ``supported_claims`` and
  ``unsupported_claims`` as paraphrases), from a git worktree under /tmp (``git worktree add --detach``, made if
  missing), run with this interpreter from inside the worktree with ``PYTHONPATH`` set to it, so that it imports
  the worktree's ``suffice``, not this checkout's (the editable install's finder comes after ``sys.path``; each leg
  writes the ``suffice`` it imported, and the benchmark checks it);
- **new**: this working tree (the per-segment verdict: ``verdict["segments"]``, one label per segment).  It fails
  with a message naming what is missing when the working tree's verdict has no ``segments``.

Per leg: items, errors, prompt and completion (decoded) tokens an item (the rows' ``tokens``; prefilled prefixes
count with the prompt), seconds judging (from the engine ready to the last batch written, taken from suffice's
``suffice.serving.startup`` marks, so the engine's start-up is left out and constraint compiles are in), verdicts/s, the
process's wall time, and precision, recall and F1 of flagging the ``unsupported`` sentences
(``segment_labels.scores``; the new verdict flags a segment labeled ``unsupported`` or ``partial``, today's
flags the sentence an ``unsupported_claims`` paraphrase matches: at least half of the claim's content words in
it, the best such sentence; ``segment_labels`` says the rule in full).  Then new/baseline ratios.

Share of attainable: ``bench_throughput.py``'s model of this machine's ceiling (the prefill roofline from cores,
clock and SIMD lanes; decode bound by the copy bandwidth, measured here under the lock before the legs) is pure
arithmetic on a leg's token counts and seconds, so it is reused as it is: each leg's prompt tokens/s as a share of
the roofline and of what its tokens allow at best (a response judged in windows counted as that many requests).
As there, prompt tokens include those the prefix cache serves: the windows of one response repeat its context, so
a share over 100 % says the cache served much of it.  Measuring the bandwidth costs a few seconds
(``--no-attainable`` skips it).

``--long N``: instead, N responses of about 3,000 words and ``--ten`` (default 2N, a multiple of N) of exactly 10
sentences (``segment_labels.long_items``, ``ten_sentence_items``), judged by both legs with ``--batch-size N``: the
10-sentence batches first (the first also pays the constraint compiles), then the long one, each timed from the
marks.  Today's verdict checks a long response only
up to ``max_response_tokens`` (1024), the new one in full; the issue's targets are a time ratio of at most 5 on
the long responses and a decoded-token ratio of at most 1 on the 10-sentence ones.

Engine legs take ``--lock`` (default /tmp/engine.lock, the lock ``flock /tmp/engine.lock ...`` takes) for the
whole of both legs, so another engine job on this shared machine runs neither during a leg nor between the two.

    .venv/bin/python benchmarks/bench_segments.py                  # 30 items, about 6 minutes here
    .venv/bin/python benchmarks/bench_segments.py --legs baseline --items 20 --out segments_baseline.json
    .venv/bin/python benchmarks/bench_segments.py --long 2     # about 8 minutes here (--ten 2: 6, --ten 6: 10)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from common import report, table
from segment_labels import (
    baseline_flags,
    build,
    judge_record,
    long_items,
    new_flags,
    scores,
    summary,
    ten_sentence_items,
)

ROOT = Path(__file__).resolve().parents[1]
LEGS = ("baseline", "new")

#: One ``suffice judge``: its start-up marks (and the ``suffice`` it imported) written to the file named first.
RUNNER = """
import logging, sys, time
marks = sys.argv.pop(1)
with open(marks, "a") as file:
    file.write(f"start-up: interpreter up at {time.monotonic():.6f}\\n")
handler = logging.FileHandler(marks)
handler.setFormatter(logging.Formatter("%(message)s"))
log = logging.getLogger("suffice.serving.startup")
log.addHandler(handler)
log.setLevel(logging.DEBUG)
log.propagate = False
import suffice
with open(marks, "a") as file:
    file.write(f"suffice from {suffice.__file__}\\n")
from suffice.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
_MARK = re.compile(r"^start-up: (.+) at (\d+\.\d+)$")


def worktree(rev: str) -> Path:
    """A checkout of ``rev`` under /tmp (made with ``git worktree add --detach`` if missing)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"suffice-baseline-{commit[:12]}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=ROOT, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True)
    if head.stdout.strip() != commit:
        raise SystemExit(f"{path} is at {head.stdout.strip()[:12]}, not {rev} ({commit[:12]}): remove it or move it")
    return path


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold ``path``'s flock (``flock(1)``'s) while the legs run; ``""``: none."""
    if not path:
        yield
        return
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {path} (another engine job holds it)", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_leg(
    name: str, root: Path, source: Path, folder: Path, dtype: str | None, batch_size: int | None
) -> dict[str, Any]:
    """``suffice judge --gate recovery`` from ``root``'s code on ``source``: its rows, wall time and marks."""
    out, marks = folder / f"{name}.out.jsonl", folder / f"{name}.marks"
    command = [sys.executable, "-c", RUNNER, str(marks), "judge", str(source), "-o", str(out)]
    command += ["--gate", "recovery", "--no-cache", "--no-progress", "--overwrite"]
    if dtype:
        command += ["--dtype", dtype]
    if batch_size:
        command += ["--batch-size", str(batch_size)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    print(f"{name}: suffice judge from {root} ...", flush=True)
    began = time.monotonic()
    done = subprocess.run(command, cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.monotonic() - began
    text = marks.read_text() if marks.exists() else ""
    imported = next((line.removeprefix("suffice from ") for line in text.splitlines() if "suffice from" in line), "")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-3000:]
        raise SystemExit(f"the {name} leg's suffice judge failed (exit {done.returncode}, from {root}):\n{tail}")
    if not imported.startswith(str(root.resolve()) + os.sep):
        raise SystemExit(f"the {name} leg imported suffice from {imported or '?'}, not from {root}")
    found = [(m.group(1), float(m.group(2))) for m in map(_MARK.match, text.splitlines()) if m]
    ready = next((at for step, at in found if step == "engine ready"), None)
    written = [at for step, at in found if step == "batch written"]
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    if ready is None or not written:
        raise SystemExit(f"the {name} leg logged no 'engine ready' / 'batch written' mark: cannot time it")
    # Seconds each batch took: the first from the engine ready, each next from the batch before.
    edges = [ready, *written]
    return {"rows": rows, "wall_s": wall, "batch_s": [b - a for a, b in itertools.pairwise(edges)]}


def require_segments(rows: Sequence[dict[str, Any]]) -> None:
    """Fail, naming what is missing, unless every verdict of the new leg has ``segments``."""
    verdicts: list[dict[str, Any]] = [r["verdict"] for r in rows if r.get("verdict") is not None]
    lacking = [v for v in verdicts if "segments" not in v]
    if not verdicts or lacking:
        fields = sorted(lacking[0]) if lacking else []
        errors = Counter(str((r.get("error") or {}).get("type")) for r in rows if r.get("verdict") is None)
        raise SystemExit(
            "the new leg's recovery verdict has no 'segments' (issue 49's per-segment labels: a list of "
            '{"index", "start", "end", "kind", "text", "label", "sources"}) in '
            f"{len(lacking)} of {len(verdicts)} verdicts ({len(rows) - len(verdicts)} rows without a verdict: "
            f"{dict(errors)}); the verdict's fields are {fields}.  Run with --legs baseline until it lands."
        )


def check_working_tree() -> None:
    """Before any engine starts: fail at once when this checkout's verdict model has no ``segments`` field."""
    try:
        from suffice.gates.recovery.grammar import RecoveryVerdict
    except Exception as exc:  # a working tree half-way through a change
        raise SystemExit(f"the working tree's recovery gate does not import ({exc!r}): the new leg cannot run") from exc
    fields = getattr(RecoveryVerdict, "model_fields", {})
    if "segments" not in fields:
        raise SystemExit(
            "the working tree's RecoveryVerdict (suffice/gates/recovery/grammar.py) has no 'segments' field, so the "
            f"new leg cannot be scored per segment (its fields: {sorted(fields)}).  Run with --legs baseline until "
            "issue 49's per-segment verdict lands."
        )


def leg_row(
    name: str,
    label: str,
    items: Sequence[dict[str, Any]],
    rows: Sequence[dict[str, Any]],
    seconds: float,
    wall: float | None,
) -> dict[str, Any]:
    """One table row: tokens, speed and scores of ``rows`` (in ``items``' order)."""
    by_id = {r["id"]: r for r in rows}
    flags: list[bool] = []
    truth: list[bool] = []
    unmatched = 0
    segment_labels: Counter[str] = Counter()
    truncated = 0
    windows = 0
    for item in items:
        row = by_id.get(item["id"], {})
        verdict = row.get("verdict")
        labels = item["segment_labels"]
        if name == "new":
            found, missed = new_flags(verdict, labels)
            unmatched += missed
            segment_labels.update(str(s.get("label")) for s in (verdict or {}).get("segments") or [])
        else:
            found = baseline_flags(verdict, labels)
        truncated += bool((verdict or {}).get("response_truncated"))
        windows += int((verdict or {}).get("windows", 1))
        flags.extend(found)
        truth.extend(x["label"] == "unsupported" for x in labels)
    n = len(items)
    judged = [by_id[i["id"]] for i in items if i["id"] in by_id]
    prompt = sum((r.get("tokens") or {}).get("prompt", 0) for r in judged)
    completion = sum((r.get("tokens") or {}).get("completion", 0) for r in judged)
    score = scores(flags, truth)
    return {
        "leg": name,
        "set": label,
        "items": n,
        "errors": sum(r.get("verdict") is None for r in judged) + n - len(judged),
        "words_per_item": summary(items)["mean_words"],
        "prompt_tokens": prompt,
        "output_tokens": completion,
        "prompt_per_item": prompt / n,
        "completion_per_item": completion / n,
        "seconds": seconds,
        "verdicts_per_s": n / seconds,
        "wall_s": wall,
        "responses_cut": truncated,
        "windows_per_item": windows / n,
        "flagged": score["tp"] + score["fp"],
        **{k: score[k] for k in ("precision", "recall", "f1", "tp", "fp", "fn", "tn")},
        "unmatched_sentences": unmatched if name == "new" else None,
        "segment_labels": dict(segment_labels) if name == "new" else None,
    }


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """new / baseline, per item set."""
    out = []
    for label in dict.fromkeys(r["set"] for r in rows):
        pair = {r["leg"]: r for r in rows if r["set"] == label}
        if set(pair) != set(LEGS):
            continue
        new, base = pair["new"], pair["baseline"]

        def ratio(key: str, new: dict[str, Any] = new, base: dict[str, Any] = base) -> float | None:
            return new[key] / base[key] if base[key] else None

        out.append(
            {
                "set": label,
                "items": new["items"],
                "prompt_tokens_ratio": ratio("prompt_per_item"),
                "completion_tokens_ratio": ratio("completion_per_item"),
                "seconds_ratio": ratio("seconds"),
                "verdicts_per_s_ratio": ratio("verdicts_per_s"),
                "f1_gain": None if new["f1"] is None or base["f1"] is None else new["f1"] - base["f1"],
            }
        )
    return out


def attainable_model(dtype: str | None) -> dict[str, Any] | str:
    """``bench_throughput.py``'s roofline and copy bandwidth for this machine (a reason instead, if it fails)."""
    try:
        from bench_throughput import copy_bandwidth_gbs, kv_bytes_per_token, roofline

        from suffice.serving.machine import compute_dtype
        from suffice.serving.weights import resolve_model

        folder = resolve_model(None).path
        compute = compute_dtype(False, dtype)[0]
        roof = roofline(folder, compute)
        roof["kv_bytes_per_token"] = kv_bytes_per_token(folder, compute)
        roof["copy_bandwidth_gbs"] = copy_bandwidth_gbs()
        return roof
    except Exception as exc:  # the share is an extra: a machine or a checkout it cannot read still runs the legs
        return f"not computed: {exc!r}"


def add_attainable(rows: list[dict[str, Any]], roof: dict[str, Any]) -> None:
    from bench_throughput import attainable_share

    rate = roof["roofline_prompt_tokens_per_s"]
    for row in rows:
        row["share_of_roofline"] = row["prompt_tokens"] / row["seconds"] / rate
        # Decode reads one request's context a step: a response judged in windows is that many requests.
        requests = {**row, "items": row["items"] * row["windows_per_item"]}
        row["attainable_share"] = attainable_share(
            requests, rate, roof["kv_bytes_per_token"], roof["copy_bandwidth_gbs"]
        )
        row["share_of_attainable"] = row["share_of_roofline"] / row["attainable_share"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=30, help="the first N of the 240-item set (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="the labeled set's seed (default 0)")
    parser.add_argument("--baseline-rev", default="4558ff2", help="the baseline's revision (default 4558ff2)")
    parser.add_argument("--legs", nargs="+", choices=LEGS, default=list(LEGS), help="default: both")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="suffice judge --dtype")
    parser.add_argument(
        "--long", type=int, default=0, metavar="N", help="N 3,000-word and N 10-sentence responses instead"
    )
    parser.add_argument("--words", type=int, default=3000, help="--long: words a long response (default 3000)")
    parser.add_argument(
        "--ten", type=int, default=None, metavar="M", help="--long: M 10-sentence responses, a multiple of N (2N)"
    )
    parser.add_argument("--lock", default="/tmp/engine.lock", help="flock held over the legs ('' for none)")
    parser.add_argument("--no-attainable", action="store_true", help="skip the share of attainable")
    parser.add_argument("--out", default=None, help="results file name (default: from the arguments)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="also keep the input and each leg's rows in DIR")
    args = parser.parse_args()
    if args.items < 1 or args.long < 0:
        parser.error("--items must be at least 1 and --long at least 0")
    if "new" in args.legs:
        check_working_tree()
    if args.long:
        ten = args.ten if args.ten is not None else 2 * args.long
        if ten < args.long or ten % args.long:
            raise SystemExit(f"--ten must be a multiple of --long ({args.long}), not {ten}")
        sets = [
            ("10 sentences", ten_sentence_items(ten, args.seed)),
            (f"~{args.words} words", long_items(args.long, args.words, args.seed)),
        ]
        if [len(items) for _, items in sets] != [ten, args.long]:
            raise SystemExit(f"could not build {ten} + {args.long} items: {[len(i) for _, i in sets]}")
        batch_size: int | None = args.long
    else:
        sets = [("labeled", build(240, args.seed)[: args.items])]
        batch_size = None
    items = [item for _, group in sets for item in group]
    roots = {"baseline": worktree(args.baseline_rev) if "baseline" in args.legs else None, "new": ROOT}
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="suffice-segments-") as tmp:
        folder = Path(tmp)
        source = folder / "items.jsonl"
        source.write_text("".join(json.dumps(judge_record(item)) + "\n" for item in items))
        with locked(args.lock):
            waited = time.monotonic() - began
            # The copy bandwidth under the lock too: another engine beside it would halve it.
            roof = None if args.no_attainable else attainable_model(args.dtype)
            for name in args.legs:
                root = roots[name]
                assert root is not None
                leg = run_leg(name, root, source, folder, args.dtype, batch_size)
                if name == "new":
                    require_segments(leg["rows"])
                # Each set is whole batches of batch_size (one, without --long): its seconds are theirs.
                batches = [-(-len(group) // (batch_size or len(group))) for _, group in sets]
                if len(leg["batch_s"]) != sum(batches):
                    raise SystemExit(f"the {name} leg wrote {len(leg['batch_s'])} batches, not {sum(batches)}")
                edges = [0, *itertools.accumulate(batches)]
                spent = [sum(leg["batch_s"][a:b]) for a, b in itertools.pairwise(edges)]
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(source, Path(args.keep) / source.name)
                    shutil.copy(folder / f"{name}.out.jsonl", Path(args.keep) / f"{name}.out.jsonl")
                for (label, group), seconds in zip(sets, spent, strict=True):
                    wall = leg["wall_s"] if len(sets) == 1 else None
                    rows.append(leg_row(name, label, group, leg["rows"], seconds, wall))
        held = time.monotonic() - began - waited
    extra: dict[str, Any] = {
        "labeled_set": {label: summary(group) for label, group in sets},
        "lock_wait_s": waited,
        "run_s": held,
    }
    if isinstance(roof, dict):
        add_attainable(rows, roof)
        extra["machine_ceiling"] = roof
    elif roof is not None:
        extra["machine_ceiling"] = roof
        print(f"share of attainable {roof}")
    columns = [
        ("leg", "leg", ""),
        ("set", "responses", ""),
        ("items", "items", "d"),
        ("errors", "errors", "d"),
        ("words_per_item", "words/item", ".0f"),
        ("prompt_per_item", "prompt tokens/item", ",.0f"),
        ("completion_per_item", "completion (decoded) tokens/item", ",.1f"),
        ("seconds", "judging s", ".1f"),
        ("verdicts_per_s", "verdicts/s", ".3f"),
        ("wall_s", "process s", ".0f"),
        ("responses_cut", "responses cut", "d"),
        ("windows_per_item", "requests/item", ".1f"),
        ("flagged", "flagged", "d"),
        ("precision", "precision", ".2f"),
        ("recall", "recall", ".2f"),
        ("f1", "F1", ".2f"),
        ("share_of_attainable", "% of attainable", ".0%"),
    ]
    found = ratios(rows)
    if found:
        extra["ratios"] = found
    name = args.out or "segments{}{}{}.json".format(
        "_long" if args.long else "",
        "" if len(args.legs) == 2 else "_" + args.legs[0],
        f"_{args.dtype}" if args.dtype else "",
    )
    report(name, rows, columns, baseline_rev=args.baseline_rev, **extra)
    for label, group in sets:
        s = summary(group)
        print(
            f"{label}: {s['sentences']} labeled sentences, {s['unsupported']} unsupported "
            f"({s['unsupported'] / s['sentences']:.0%}: the precision of flagging every sentence)"
        )
    print(f"the legs took {held:.0f} s in all (after {waited:.0f} s waiting for {args.lock or 'no lock'})")
    if found:
        print()
        print(
            table(
                found,
                [
                    ("set", "responses", ""),
                    ("items", "items", "d"),
                    ("prompt_tokens_ratio", "prompt tokens new/baseline", ".2f"),
                    ("completion_tokens_ratio", "decoded tokens new/baseline", ".2f"),
                    ("seconds_ratio", "time new/baseline", ".2f"),
                    ("verdicts_per_s_ratio", "verdicts/s new/baseline", ".2f"),
                    ("f1_gain", "F1 new - baseline", "+.2f"),
                ],
            )
        )
        if args.long:
            print(
                "targets: time new/baseline <= 5 on the long responses, decoded tokens new/baseline <= 1 on the "
                "10-sentence ones"
            )


if __name__ == "__main__":
    main()
