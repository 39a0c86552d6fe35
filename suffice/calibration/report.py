"""The calibration report: metrics per score, chunk agreement, plots."""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from suffice.calibration.metrics import (
    Sweep,
    expected_calibration_error,
    point,
    reliability,
    segment_agreement,
    set_agreement,
)
from suffice.exceptions import InputError
from suffice.files import replace_atomically, writing
from suffice.gates.roles import calibration_scores, useful_chunk_ids
from suffice.records.fields import FieldMap
from suffice.results import OutputTokens

if TYPE_CHECKING:
    from suffice.gates.base import Gate

#: Ids as the batch gives them (no renamed fields).
_AS_JUDGED = FieldMap()


def _record_of(records: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The golden record a result row answers: the one at the row's ``line`` (its
    position in the golden file) if that record has the row's id, as the batch gives
    it (a RAGAS record without an id gets ``row-<line>-<digest>``).  Joined by id, a
    record without one matched nothing, and of two records with one id the last one's
    label scored the first one's verdict."""
    line = row.get("line")
    if not isinstance(line, int) or not 1 <= line <= len(records):
        return None
    record = records[line - 1]
    mapped = _AS_JUDGED.apply(dict(record), line)
    rid = mapped.get("id") if isinstance(mapped, Mapping) else None
    return record if rid is not None and str(rid) == str(row.get("id")) else None


def _scores_of(gate: Gate, verdict: Any, line: int) -> dict[str, float | None]:
    """The verdict's calibration scores, each a finite float or ``None``.

    The verdicts come from a resumed file, kept as they were written: one edited, or
    written by another tool, may hold a score that is ``NaN``, ``null`` or text.
    That raises :class:`InputError` naming the score and the ``line``."""
    try:
        raw = calibration_scores(gate, verdict)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError("verdict", f"line {line} cannot be scored ({type(exc).__name__}: {exc})") from exc
    scores: dict[str, float | None] = {}
    for name, value in raw.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise InputError(f"verdict.{name}", f"line {line}: is {value!r}, not a finite number")
        scores[name] = None if value is None else float(value)
    return scores


def score_metrics(values: Sequence[float], labels: Sequence[bool], precision_target: float) -> dict[str, Any]:
    """One score's part of the report: AUC, the best-F1 and precision-target
    thresholds, the curve, calibration.  One sort serves every threshold (see
    :class:`~suffice.calibration.metrics.Sweep`)."""
    sweep = Sweep(values, labels)
    target = sweep.for_precision(precision_target)
    return {
        "n": len(values),
        "positives": sweep.positives,
        "auc": sweep.auc(),
        "best_f1": sweep.best_f1().as_dict(),
        "precision_target": None if target is None else target.as_dict(),
        "accuracy_at_0_5": point(values, labels, 0.5).accuracy,
        "ece": expected_calibration_error(values, labels),
        "reliability": reliability(values, labels),
        "curve": [p.as_dict() for p in sweep.points],
    }


def build_report(
    gate: Gate, records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], precision_target: float
) -> dict[str, Any]:
    """Metrics over the rows that answer a labeled golden record; rows for records no
    longer in the golden file (kept by an earlier, longer run) are counted apart.

    Raises :class:`InputError` for a row whose score is not a finite number (see
    :func:`_scores_of`); rows are numbered from 1, as the lines of verdicts.jsonl."""
    columns: dict[str, list[tuple[float, bool]]] = {}
    predicted_ids: list[list[Any]] = []
    gold_ids: list[list[Any]] = []
    segment_pairs: list[tuple[str, str]] = []
    skipped = {"error": 0, "unlabeled": 0, "not_in_golden": 0}
    judged = 0
    tokens = OutputTokens()
    for line, row in enumerate(rows, start=1):
        verdict = row.get("verdict")
        record = _record_of(records, row)
        if record is None:
            skipped["not_in_golden" if verdict is not None else "error"] += 1
            continue
        judged += 1
        if verdict is None:
            skipped["error"] += 1
            continue
        tokens.add(_completion_tokens(row))
        segment_pairs += _segment_pairs(verdict, record)
        label = record.get("sufficient")
        if not isinstance(label, bool):
            skipped["unlabeled"] += 1
            continue
        for name, value in _scores_of(gate, verdict, line).items():
            if value is not None:
                columns.setdefault(name, []).append((value, label))
        predicted = useful_chunk_ids(gate, verdict)
        if predicted is not None and label and record.get("useful_chunk_ids") is not None:
            predicted_ids.append(predicted)
            gold_ids.append(list(record["useful_chunk_ids"]))

    report: dict[str, Any] = {
        "gate": gate.name,
        "items": judged,
        "skipped": skipped,
        "precision_target": precision_target,
        "output_tokens": tokens.to_dict(),
    }
    scores: dict[str, Any] = {}
    for name, pairs in columns.items():
        values = [s for s, _ in pairs]
        labels = [y for _, y in pairs]
        scores[name] = {**score_metrics(values, labels, precision_target), "_values": values, "_labels": labels}
    report["scores"] = scores
    if gold_ids:
        report["useful_chunk_ids"] = set_agreement(predicted_ids, gold_ids)
    if segment_pairs:
        report["segments"] = segment_agreement(segment_pairs)
    return report


def _segment_pairs(verdict: Any, record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(predicted, gold)`` labels of the segments a verdict judged (``segments``, the recovery gate's) that the
    golden record labels (``segment_labels``: ``{"start", "end", "label"}`` each, offsets into its response); a
    segment is matched by its offsets, so labels for a segmentation that differs count nowhere."""
    judged = verdict.get("segments") if isinstance(verdict, Mapping) else None
    gold = record.get("segment_labels")
    if not isinstance(judged, list) or not isinstance(gold, list):
        return []
    labelled = {
        (g.get("start"), g.get("end")): g.get("label") for g in gold if isinstance(g, Mapping) and g.get("label")
    }
    return [
        (str(s["label"]), str(labelled[s["start"], s["end"]]))
        for s in judged
        if isinstance(s, Mapping) and (s.get("start"), s.get("end")) in labelled
    ]


def _completion_tokens(row: Mapping[str, Any]) -> int:
    """The row's output tokens (0 where it holds none: a row of another tool, or of a verdict made without the
    model)."""
    tokens = row.get("tokens")
    completion = tokens.get("completion") if isinstance(tokens, Mapping) else None
    return completion if isinstance(completion, int) and not isinstance(completion, bool) else 0


def write_report(report: dict[str, Any], out: Path) -> list[Path]:
    """report.json, report.md, a plot per score, and report.html: the same in one self-contained page (the plots
    inline, nothing fetched), for a person.  Without matplotlib (it comes with the ``cpu`` and ``gpu`` extras, not
    with a client judging through a server) the plots are left out and the report says so.  A file that cannot be
    written (a full disk) raises :class:`~suffice.exceptions.OutputWriteError` naming it."""
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
    try:
        images = _plots(report)
        missing = None
    except ImportError as exc:
        images, missing = {}, f"plots left out: {exc.name or 'matplotlib'} is not installed"
    clean = {
        **report,
        "scores": {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in report["scores"].items()},
    }
    clean["plots"] = [f"{name}.png" for name in images]
    if missing is not None:
        clean["plots_missing"] = missing
    plots = [out / f"{name}.png" for name in images]
    for path, image in zip(plots, images.values(), strict=True):
        replace_atomically(path, [image])
    replace_atomically(out / "report.json", [(json.dumps(clean, indent=2) + "\n").encode("utf-8")])
    replace_atomically(out / "report.md", [_markdown(clean).encode("utf-8")])
    replace_atomically(out / "report.html", [_html(clean, images).encode("utf-8")])
    return [out / "report.json", out / "report.md", out / "report.html", *plots]


def _fmt(value: Any, pattern: str = "{:.3f}") -> str:
    return "n/a" if value is None else pattern.format(value)


def _notes(report: dict[str, Any]) -> list[str]:
    """The sentences below the table: output tokens, chunk agreement, segment agreement (those the report has)."""
    notes = []
    tokens = report.get("output_tokens")
    if tokens is not None and tokens["verdicts"]:
        notes.append(
            f"Output tokens per verdict: mean {tokens['mean']:.0f}, max {tokens['max']} "
            f"(of {tokens['verdicts']} verdicts the model generated)."
        )
    if "useful_chunk_ids" in report:
        u = report["useful_chunk_ids"]
        notes.append(
            f"useful_chunk_ids against the gold evidence (sufficient items): precision {_fmt(u['precision'])}, "
            f"recall {_fmt(u['recall'])} over {int(u['items'])} items."
        )
    if "segments" in report:
        g = report["segments"]
        notes.append(
            f"Segments against their labels ({int(g['segments'])} labeled segments): label agreement "
            f"{_fmt(g['label_agreement'])}; flagging unsupported: precision {_fmt(g['unsupported_precision'])}, "
            f"recall {_fmt(g['unsupported_recall'])}, F1 {_fmt(g['unsupported_f1'])}."
        )
    return notes


def _html(report: dict[str, Any], images: Mapping[str, bytes]) -> str:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("suffice.calibration", ""), autoescape=True, undefined=jinja2.StrictUndefined
    )
    environment.filters["fmt"] = _fmt
    plots = {name: base64.b64encode(png).decode("ascii") for name, png in images.items()}
    return environment.get_template("report.html.j2").render(r=report, notes=_notes(report), plots=plots)


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Calibration report: {report['gate']} gate",
        "",
        f"{report['items']} results; skipped {report['skipped']['error']} errors and "
        f"{report['skipped']['unlabeled']} unlabeled items"
        + (
            f"; {report['skipped']['not_in_golden']} rows for records not in this golden file left out"
            if report["skipped"].get("not_in_golden")
            else ""
        )
        + f". Precision target {report['precision_target']:.2f}.",
        "",
        "| score | n | AUC | best-F1 threshold | P | R | F1 | threshold for target precision | P | R "
        "| accuracy@0.5 | ECE |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["scores"].items():
        b, t = s["best_f1"], s["precision_target"] or {}
        lines.append(
            f"| {name} | {s['n']} | {_fmt(s['auc'])} | {_fmt(b['threshold'])} | {_fmt(b['precision'])} | "
            f"{_fmt(b['recall'])} | {_fmt(b['f1'])} | {_fmt(t.get('threshold'))} | {_fmt(t.get('precision'))} | "
            f"{_fmt(t.get('recall'))} | {_fmt(s['accuracy_at_0_5'])} | {_fmt(s['ece'])} |"
        )
    lines += [line for note in _notes(report) for line in ("", note)]
    lines += ["", report.get("plots_missing") or "Plots: " + ", ".join(report.get("plots", [])), ""]
    return "\n".join(lines)


def _plots(report: dict[str, Any]) -> dict[str, bytes]:
    """Each score's figure (distributions, precision-recall, reliability) as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images: dict[str, bytes] = {}
    for name, s in report["scores"].items():
        values, labels = s["_values"], s["_labels"]
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        pos = [v for v, y in zip(values, labels, strict=True) if y]
        neg = [v for v, y in zip(values, labels, strict=True) if not y]
        bins = [i / 20 for i in range(21)]
        axes[0].hist([pos, neg], bins=bins, label=["sufficient", "insufficient"], color=["tab:green", "tab:red"])
        axes[0].axvline(s["best_f1"]["threshold"], color="black", linestyle="--", label="best-F1 threshold")
        axes[0].set(title=f"{name}: score distributions", xlabel=name, ylabel="items")
        axes[0].legend()
        points = s["curve"]
        axes[1].plot([p["recall"] for p in points], [p["precision"] for p in points], marker=".")
        axes[1].set(title="precision-recall", xlabel="recall", ylabel="precision", xlim=(0, 1.02), ylim=(0, 1.02))
        table = s["reliability"]
        axes[2].plot([0, 1], [0, 1], color="grey", linestyle=":")
        axes[2].plot([r["mean_score"] for r in table], [r["share_positive"] for r in table], marker="o")
        axes[2].set(
            title="reliability", xlabel="mean score in bin", ylabel="share sufficient", xlim=(0, 1), ylim=(0, 1)
        )
        fig.tight_layout()
        image = io.BytesIO()
        try:
            fig.savefig(image, format="png", dpi=90)
        finally:
            plt.close(fig)
        images[name] = image.getvalue()
    return images
