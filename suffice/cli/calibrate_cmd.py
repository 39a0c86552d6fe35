"""``suffice calibrate``: judge labeled records, report metrics and plots, save a threshold."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.audit.options import AuditOptions
from suffice.batch import BatchOptions
from suffice.batch.run_settings import settings_path
from suffice.calibration.metrics import Sweep
from suffice.calibration.report import build_report, write_report
from suffice.cli import judge_cmd
from suffice.cli.errors import command, fail
from suffice.cli.serve_settings import SettingSources
from suffice.exceptions import (
    EXIT_ITEM_ERRORS,
    EXIT_OK,
    ConfigError,
    InputError,
    OutputMismatchError,
    OutputWriteError,
    SufficeError,
    VerdictsFileError,
)
from suffice.files import replace_atomically
from suffice.gates import CalibrationChoice, Gate
from suffice.gates.base import fitted_under
from suffice.gates.roles import default_choice, save_calibration, save_problem, saveable_scores
from suffice.records.lines import dump_line, read_records
from suffice.records.text import terminal_text
from suffice.settings import add_flags, declared, from_args, setting, values_of

#: ``--save`` without a path: where the gate keeps its threshold (see suffice.gates.roles.save_calibration).
SAVE_WHERE_THE_GATE_KEEPS_IT = Path()

#: The seed's golden set: "run a golden dataset of 100+ query-context pairs with known
#: adequacy labels" before a threshold is tuned; fewer get a warning.
SEED_MINIMUM_GOLDEN = 100

CHOICES = ("best-f1", "precision-target", "f-beta", "cost")


@dataclass(frozen=True)
class CalibrateSettings:
    """``suffice calibrate``'s own settings."""

    golden: Path | None = setting(None, "labeled JSONL (the ../shared/data format)", positional=True)
    output: Path | None = setting(
        None, "report folder (verdicts.jsonl resumes there)", also=("-o",), required=True, metavar="OUTPUT"
    )
    limit: int | None = setting(None, "use the first N records only", minimum=0, metavar="N")
    precision_target: float = setting(0.9, "precision for the high-stakes threshold", above=0, maximum=1)
    score: str | None = setting(None, "which score's threshold to save (default: best AUC)")
    choose: str | None = setting(
        None,
        "which threshold to save: best F1, the precision target's, best F-beta (--beta), or the least "
        "expected cost (--fp-cost, --fn-cost); default: the gate's (best-f1; f-beta for a HIGH-risk rubric)",
        choices=CHOICES,
    )
    beta: float = setting(0.5, "F-beta's beta (< 1 favours precision; default 0.5)", above=0)
    fp_cost: float | None = setting(None, "--choose cost: a false positive's cost (default 1)", minimum=0)
    fn_cost: float | None = setting(None, "--choose cost: a false negative's cost (default 1)", minimum=0)
    save: Path | None = setting(
        None,
        "save the chosen threshold where the gate reads it (sufficiency: a gate config file PATH; "
        "adequacy: the rubric's next version, in PATH or the rubric folder)",
        const=SAVE_WHERE_THE_GATE_KEEPS_IT,
        metavar="PATH",
    )


def add_parser(sub: Any) -> None:
    p = command(sub, "calibrate", run, CalibrateSettings, ("golden", "output"), help="tune a gate on golden data")
    judge_cmd.add_judge_args(p)
    add_flags(p, BatchOptions, only=(*(d.name for d in declared(AuditOptions)), "overwrite"))
    add_flags(
        p, CalibrateSettings, only=[d.name for d in declared(CalibrateSettings) if d.name not in ("golden", "output")]
    )
    add_flags(p, judge_cmd.JudgeSettings, only=("server", "timeout"))
    p.set_defaults(command_settings=SettingSources(p, "calibrate", "precision_target = 0.95"))


def run(args: argparse.Namespace) -> int:
    """Judge labeled records (`sufficient` is the label), in this process or through a running service (--server),
    then write report.json, report.md, report.html and plots."""
    judge_cmd.read_settings(args)
    try:
        values_of(CalibrateSettings, args)  # the bounds of what a flag, a variable or the file gave
    except ConfigError as exc:
        raise judge_cmd.named(exc, args) from None
    problem = _choice_problem(args)
    if problem is not None:
        raise ConfigError("fn_cost", 0, problem)
    if not args.golden.is_file():
        raise ConfigError("golden", str(args.golden), "is not a file")
    if args.output.exists() and not args.output.is_dir():
        raise ConfigError("output", str(args.output), "is a file; calibrate writes a report folder there")
    try:
        config = judge_cmd.judge_config(args)
        options: BatchOptions = from_args(BatchOptions, args)
    except ConfigError as exc:
        raise judge_cmd.named(exc, args) from None  # said by reports_errors, with the table's exit status
    read = list(read_records(args.golden))  # a damaged or zstd-compressed golden file: ConfigError
    gate = config.make_gate()
    if args.save is not None:
        problem = save_problem(gate, _destination(args), args.output)
        if problem is not None:
            raise ConfigError("save", str(_destination(args)), problem)
    records = [r for r in read if isinstance(r, dict)]
    if len(records) < len(read):
        left = len(read) - len(records)
        print(f"note: {left} lines of {terminal_text(args.golden)} are not JSON objects: left out", file=sys.stderr)
    if args.limit is not None:
        records = records[: args.limit]
    _check_labels(records, args.golden)
    labeled = sum(isinstance(r.get("sufficient"), bool) for r in records)
    if labeled < SEED_MINIMUM_GOLDEN:
        print(
            f"warning: {labeled} labeled records; the seed asks for a golden set of {SEED_MINIMUM_GOLDEN}+ "
            "labeled query-context pairs before a threshold is tuned: treat this one as provisional",
            file=sys.stderr,
        )
    args.output.mkdir(parents=True, exist_ok=True)
    source = args.output / "golden.jsonl"
    if args.golden.resolve() == source.resolve():
        raise OutputMismatchError(
            "output", f"the golden file is {source}, which calibrate writes; move it or choose another -o"
        )
    replace_atomically(source, (dump_line(r) for r in records), private=True)
    verdicts = args.output / "verdicts.jsonl"
    try:
        client = judge_cmd.open_client(args, config)  # --server: a team that only runs the service calibrates on it
    except ConfigError as exc:
        raise judge_cmd.named(exc, args) from None
    with client or contextlib.nullcontext():
        status = judge_cmd.judge_file(config, source, verdicts, options, progress=not args.no_progress, client=client)
    if status not in (EXIT_OK, EXIT_ITEM_ERRORS):
        return status
    rows = [json.loads(line) for line in verdicts.read_text(encoding="utf-8").splitlines()]
    try:
        report = build_report(gate, records, rows, args.precision_target)
    except InputError as exc:
        raise VerdictsFileError(str(verdicts), str(exc)) from exc
    if not report["scores"]:
        raise SufficeError("no labeled verdicts to calibrate on")
    try:
        files = write_report(report, args.output)
    except OutputWriteError as exc:  # as judge says it: room made, the same command resumes the verdicts
        return fail(exc, results_in=verdicts)
    print(_summary(report), file=sys.stderr)
    for path in files:
        print(f"wrote {terminal_text(path)}", file=sys.stderr)
    return _save(args, gate, report, _fitted_under(verdicts))


def _destination(args: argparse.Namespace) -> Path | None:
    return None if args.save is SAVE_WHERE_THE_GATE_KEEPS_IT else args.save


def _choice_problem(args: argparse.Namespace) -> str | None:
    """Costs that no threshold can be chosen by (each is in its bounds: :class:`CalibrateSettings`); costs given
    without --choose choose by cost."""
    if args.choose is None and (args.fp_cost is not None or args.fn_cost is not None):
        args.choose = "cost"
    fp_cost = 1.0 if args.fp_cost is None else args.fp_cost
    fn_cost = 1.0 if args.fn_cost is None else args.fn_cost
    if args.choose == "cost" and fp_cost == fn_cost == 0:
        return "--fp-cost and --fn-cost are both 0: every threshold costs nothing"
    return None


def _check_labels(records: list[dict[str, Any]], golden: Path) -> None:
    """Refuse golden records that cannot calibrate before anything is judged: a label that is not true or false
    (``"true"``, ``0``), or no label at all."""
    for number, record in enumerate(records, start=1):
        label = record.get("sufficient")
        if label is not None and not isinstance(label, bool):
            raise InputError(str(golden), f"record {number}: sufficient must be true or false, got {label!r}")
    if not any(isinstance(r.get("sufficient"), bool) for r in records):
        raise InputError(str(golden), "no record has a label (sufficient: true or false)")


def _summary(report: dict[str, Any]) -> str:
    lines = []
    for name, s in report["scores"].items():
        auc = "n/a" if s["auc"] is None else f"{s['auc']:.3f}"
        b = s["best_f1"]
        lines.append(f"{name:<20} n={s['n']:<5} AUC={auc:<6} best-F1 {b['f1']:.3f} at {b['threshold']:.3f}")
    return "\n".join(lines)


def _choose(args: argparse.Namespace, gate: Gate, report: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    allowed = [s for s in saveable_scores(gate) if s in report["scores"]]
    if args.score is not None:
        if args.score not in allowed:
            raise judge_cmd.named(ConfigError("score", args.score, f"cannot be saved; have {allowed}"), args)
        name = args.score
    elif allowed:
        name = max(allowed, key=lambda s: report["scores"][s]["auc"] or 0.0)
    else:
        raise ConfigError("gate", args.gate, "has no score a threshold can be saved for")
    scores = report["scores"][name]
    negatives = scores["n"] - scores["positives"]
    if scores["positives"] == 0 or negatives == 0:
        missing = "sufficient" if scores["positives"] == 0 else "insufficient"
        raise InputError(
            str(args.golden),
            f"no threshold is saved: the {scores['n']} labeled verdicts have no {missing} item, so no threshold "
            "separates the two",
        )
    rule, why = (args.choose, None) if args.choose is not None else default_choice(gate)
    sweep = Sweep(scores["_values"], scores["_labels"])
    extra: dict[str, Any] = {}
    if rule == "best-f1":
        chosen = scores["best_f1"]
    elif rule == "precision-target":
        chosen = scores["precision_target"]
    elif rule == "f-beta":
        chosen, extra = sweep.best_fbeta(args.beta).as_dict(), {"beta": args.beta}
    else:
        fp_cost = 1.0 if args.fp_cost is None else args.fp_cost
        fn_cost = 1.0 if args.fn_cost is None else args.fn_cost
        cheapest, cost = sweep.min_cost(fp_cost, fn_cost)
        chosen, extra = cheapest.as_dict(), {"fp_cost": fp_cost, "fn_cost": fn_cost, "expected_cost": cost}
    if why is not None:
        how = f"the threshold saved is the best F{args.beta:g}" if rule == "f-beta" else f"--choose {rule}"
        print(f"note: {terminal_text(why)}; {how} (--choose best-f1 for F1)", file=sys.stderr)
    if chosen is None:
        reason = f"no threshold of {name} reaches it"
        raise judge_cmd.named(ConfigError("precision_target", args.precision_target, reason), args)
    if scores["auc"] is None or scores["auc"] <= 0.5:
        # Saved all the same (the user asked), but a threshold on a score that ranks
        # the labels no better than chance routes by chance (every score equal
        # delivers every question), so the user is told.
        auc = "n/a" if scores["auc"] is None else f"{scores['auc']:.3f}"
        print(
            f"warning: {name} ranks the labels no better than chance (AUC {auc} on {scores['n']} items): "
            "the saved threshold routes by chance; judge with a stronger model or calibrate on more items",
            file=sys.stderr,
        )
    return name, {**chosen, "auc": scores["auc"], "n": scores["n"], "rule": rule, **extra}


def _fitted_under(verdicts: Path) -> dict[str, str]:
    """The engine settings the verdicts were judged under, as recorded beside them (a resumed run was checked
    against them), for the saved threshold to carry."""
    try:
        recorded = json.loads(settings_path(verdicts).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return fitted_under({str(k): str(v) for k, v in recorded.items() if isinstance(v, str)})


def _save(args: argparse.Namespace, gate: Gate, report: dict[str, Any], fitted: dict[str, str]) -> int:
    if args.save is None:
        return EXIT_OK
    name, metrics = _choose(args, gate, report)
    choice = CalibrationChoice(
        score=name, threshold=metrics["threshold"], metrics=metrics, golden=args.golden, fitted_under=fitted
    )
    message = save_calibration(gate, choice, _destination(args), args.output)
    print(message, file=sys.stderr)
    return EXIT_OK
