"""``suffice calibrate``: judge labeled records, report metrics and plots, save a threshold."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from suffice.batch import BatchOptions
from suffice.calibration.report import build_report, write_report
from suffice.calibration.thresholds import GateConfig
from suffice.cli import judge_cmd
from suffice.cli.exit_codes import EXIT_FATAL, EXIT_ITEM_ERRORS, EXIT_OK, EXIT_USAGE
from suffice.exceptions import ConfigError, InputError, OutputWriteError
from suffice.gates import make_gate_for
from suffice.gates.base import Gate
from suffice.jsonl import dump_line, read_records
from suffice.rubric_store import Rubric, RubricStore


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "calibrate",
        help="tune a gate on golden data",
        description="Judge labeled records (`sufficient` is the label), then write report.json, report.md and plots.",
    )
    p.add_argument("golden", type=Path, help="labeled JSONL (the ../shared/data format)")
    p.add_argument("-o", "--output", type=Path, required=True, help="report folder (verdicts.jsonl resumes there)")
    judge_cmd.add_judge_args(p)
    p.add_argument("--limit", type=int, default=None, help="use the first N records only")
    p.add_argument("--overwrite", action="store_true", help="judge again instead of resuming verdicts.jsonl")
    judge_cmd.add_audit_args(p)
    p.add_argument("--precision-target", type=float, default=0.9, help="precision for the high-stakes threshold")
    p.add_argument("--score", default=None, help="which score's threshold to save (default: best AUC)")
    p.add_argument(
        "--choose", choices=("best-f1", "precision-target"), default="best-f1", help="which threshold to save"
    )
    p.add_argument("--save-config", type=Path, default=None, help="sufficiency: write a gate config here")
    p.add_argument("--save-rubric", action="store_true", help="adequacy: write the next rubric version")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.precision_target <= 1:
        print(f"error: --precision-target must be in (0, 1], got {args.precision_target}", file=sys.stderr)
        return EXIT_USAGE
    if not args.golden.is_file():
        print(f"error: golden file {str(args.golden)!r} is not a file", file=sys.stderr)
        return EXIT_USAGE
    if args.limit is not None and args.limit < 0:
        print(f"error: --limit must be 0 or more, got {args.limit}", file=sys.stderr)
        return EXIT_USAGE
    if args.output.exists() and not args.output.is_dir():
        print(f"error: -o {str(args.output)!r} is a file; calibrate writes a report folder there", file=sys.stderr)
        return EXIT_USAGE
    if args.save_config is not None and args.save_config.is_dir():
        print(f"error: --save-config {str(args.save_config)!r} is a folder; name the file to write", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = judge_cmd.config_from_args(args)
        options = BatchOptions(
            batch_size=args.batch_size,
            overwrite=args.overwrite,
            audit_db=args.audit_db,
            audit_key=judge_cmd.audit_key_of(args),
        )
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        read = list(read_records(args.golden))
    except ConfigError as exc:  # a damaged or zstd-compressed golden file
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    taken = _rubric_version_taken(args, config.rubric)
    if taken is not None:
        print(f"error: {taken}", file=sys.stderr)
        return EXIT_USAGE
    records = [r for r in read if isinstance(r, dict)]
    if len(records) < len(read):
        left = len(read) - len(records)
        print(f"note: {left} lines of {args.golden} are not JSON objects: left out", file=sys.stderr)
    if args.limit is not None:
        records = records[: args.limit]
    problem = _label_problem(records)
    if problem is not None:
        print(f"error: {args.golden}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    args.output.mkdir(parents=True, exist_ok=True)
    source = args.output / "golden.jsonl"
    if args.golden.resolve() == source.resolve():
        print(
            f"error: the golden file is {source}, which calibrate writes; move it or choose another -o", file=sys.stderr
        )
        return EXIT_USAGE
    source.write_bytes(b"".join(dump_line(r) for r in records))
    verdicts = args.output / "verdicts.jsonl"
    status = judge_cmd.judge_file(config, source, verdicts, options, progress=not args.no_progress)
    if status not in (EXIT_OK, EXIT_ITEM_ERRORS):
        return status
    rows = [json.loads(line) for line in verdicts.read_text(encoding="utf-8").splitlines()]
    gate = make_gate_for(config)
    try:
        report = build_report(gate, records, rows, args.precision_target)
    except InputError as exc:
        print(f"error: {verdicts}: {exc}; judge again with --overwrite", file=sys.stderr)
        return EXIT_FATAL
    if not report["scores"]:
        print("error: no labeled verdicts to calibrate on", file=sys.stderr)
        return EXIT_FATAL
    try:
        files = write_report(report, args.output)
    except OutputWriteError as exc:  # as judge says: room made, the same command resumes
        print(
            f"error: {exc}\nthe verdicts are in {verdicts}; fix the cause, then rerun the same command: "
            "it resumes them and writes the report",
            file=sys.stderr,
        )
        return EXIT_FATAL
    print(_summary(report), file=sys.stderr)
    for path in files:
        print(f"wrote {path}", file=sys.stderr)
    return _save(args, gate, config.rubric, report)


def _rubric_version_taken(args: argparse.Namespace, rubric_ref: str | None) -> str | None:
    """Why ``--save-rubric`` could not write its version, found before judging: the
    version after the calibrated one exists already (it is never overwritten)."""
    if not args.save_rubric or rubric_ref is None:
        return None
    try:
        base = RubricStore(args.rubric_dir).get(rubric_ref)
    except (ConfigError, InputError):
        return None  # the run reports a bad rubric itself
    path = next_rubric_path(base, args.rubric_dir or args.output / "rubrics")
    if path.exists():
        return f"--save-rubric: {path.stem} exists already in {path.parent}: calibrate from it, or move it away"
    return None


def _label_problem(records: list[dict[str, Any]]) -> str | None:
    """Why the golden records cannot calibrate, found before anything is judged: a
    label that is not true or false (``"true"`` and ``0`` were read as no label, and
    the run ended, after judging, with "no labeled verdicts"), or no label at all."""
    for number, record in enumerate(records, start=1):
        label = record.get("sufficient")
        if label is not None and not isinstance(label, bool):
            return f"record {number}: sufficient must be true or false, got {label!r}"
    if not any(isinstance(r.get("sufficient"), bool) for r in records):
        return "no record has a label (sufficient: true or false)"
    return None


def _summary(report: dict[str, Any]) -> str:
    lines = []
    for name, s in report["scores"].items():
        auc = "n/a" if s["auc"] is None else f"{s['auc']:.3f}"
        b = s["best_f1"]
        lines.append(f"{name:<20} n={s['n']:<5} AUC={auc:<6} best-F1 {b['f1']:.3f} at {b['threshold']:.3f}")
    return "\n".join(lines)


def _choose(args: argparse.Namespace, gate: Gate, report: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    allowed = [s for s in gate.saveable_scores if s in report["scores"]]
    if args.score is not None:
        if args.score not in allowed:
            print(f"error: --score {args.score!r} cannot be saved; have {allowed}", file=sys.stderr)
            return None
        name = args.score
    elif allowed:
        name = max(allowed, key=lambda s: report["scores"][s]["auc"] or 0.0)
    else:
        print(f"error: no saveable score for the {args.gate} gate", file=sys.stderr)
        return None
    scores = report["scores"][name]
    negatives = scores["n"] - scores["positives"]
    if scores["positives"] == 0 or negatives == 0:
        missing = "sufficient" if scores["positives"] == 0 else "insufficient"
        print(
            f"error: no threshold is saved: the {scores['n']} labeled verdicts have no {missing} item, "
            "so no threshold separates the two",
            file=sys.stderr,
        )
        return None
    chosen = scores["best_f1"] if args.choose == "best-f1" else scores["precision_target"]
    if chosen is None:
        print(f"error: no threshold of {name} reaches precision {args.precision_target}", file=sys.stderr)
        return None
    if scores["auc"] is None or scores["auc"] <= 0.5:
        # Saved all the same (the user asked), but a threshold on a score that ranks
        # the labels no better than chance routes by chance: every score equal gave a
        # threshold that delivered every question, and nothing said so.
        auc = "n/a" if scores["auc"] is None else f"{scores['auc']:.3f}"
        print(
            f"warning: {name} ranks the labels no better than chance (AUC {auc} on {scores['n']} items): "
            "the saved threshold routes by chance; judge with a stronger model or calibrate on more items",
            file=sys.stderr,
        )
    return name, {**chosen, "auc": scores["auc"], "n": scores["n"], "rule": args.choose}


def _save(args: argparse.Namespace, gate: Gate, rubric_ref: str | None, report: dict[str, Any]) -> int:
    if args.save_config is None and not args.save_rubric:
        return EXIT_OK
    picked = _choose(args, gate, report)
    if picked is None:
        return EXIT_USAGE
    name, metrics = picked
    if args.save_config is not None:
        if gate.calibration_target != "gate_config":
            print("error: --save-config is for the sufficiency gate (use --save-rubric for adequacy)", file=sys.stderr)
            return EXIT_USAGE
        config = GateConfig(
            gate="sufficiency",
            score=name,  # type: ignore[arg-type]
            threshold=metrics["threshold"],
            calibrated_on=str(args.golden),
            metrics=metrics,
        )
        try:
            config.save(args.save_config)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"saved {name} >= {metrics['threshold']:.3f} to {args.save_config}", file=sys.stderr)
    if args.save_rubric:
        if gate.calibration_target != "rubric" or rubric_ref is None:
            print("error: --save-rubric needs --gate adequacy and --rubric", file=sys.stderr)
            return EXIT_USAGE
        store = RubricStore(args.rubric_dir)
        base = store.get(rubric_ref)
        folder = args.rubric_dir or args.output / "rubrics"
        if args.rubric_dir is None:  # a store of its own: the base version beside the new one
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{base.ref}.json").write_text(base.model_dump_json(indent=2) + "\n", encoding="utf-8")
        try:
            path = save_rubric_version(base, metrics, folder)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"saved rubric version {path.stem} (calibrated threshold {metrics['threshold']:.3f})", file=sys.stderr)
    return EXIT_OK


def next_rubric_path(rubric: Rubric, folder: Path) -> Path:
    """Where the rubric's next patch version goes in ``folder``."""
    parts = rubric.version.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return folder / f"{rubric.name}@{'.'.join(parts)}.json"


def save_rubric_version(rubric: Rubric, metrics: dict[str, Any], folder: Path) -> Path:
    """The rubric's next patch version, with the calibrated composite threshold.

    Raises :class:`ConfigError` naming ``save_rubric`` when that version exists
    already (it was overwritten: a hand-edited version lost) or cannot be written.
    A file this call created and could not finish (a full disk) is removed: left
    empty, it was the store's newest version, unreadable, so every later judge with
    the rubric failed, and a retry took it for a version that exists already."""
    path = next_rubric_path(rubric, folder)
    version = path.stem.rsplit("@", 1)[1]
    data = rubric.model_dump(mode="json")
    data.update(version=version, calibrated_threshold=metrics["threshold"], calibration=metrics)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = path.open("x", encoding="utf-8")
    except FileExistsError as exc:
        raise ConfigError(
            "save_rubric", str(path), f"{rubric.name}@{version} exists already: calibrate from it, or move it away"
        ) from exc
    except OSError as exc:
        raise ConfigError("save_rubric", str(path), f"cannot be written: {exc}") from exc
    try:
        with handle:
            handle.write(json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        path.unlink(missing_ok=True)  # created exclusively above: it is this call's own
        raise ConfigError("save_rubric", str(path), f"cannot be written: {exc}") from exc
    return path
