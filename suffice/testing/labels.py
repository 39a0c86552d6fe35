"""A gate against the labels of a file: its agreement, recall and precision, and an assertion bounding them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suffice.calibration.metrics import point
from suffice.exceptions import ConfigError, InputError
from suffice.gates.registry import DEFAULT_GATE
from suffice.records.item import InvalidRecord
from suffice.records.lines import read_lines
from suffice.results import JudgeResult
from suffice.testing.assertions import AS_JUDGED, JudgeLike, RecordProperty, describe_failure, gate_of, judge_records

#: pytest shows a failure or an error from the test's line, not from inside these helpers.
__tracebackhide__ = True
#: How many records of a labeled file go in one call (a service's body limit bounds one request).
BATCH = 32
#: How many disagreements a failed :func:`assert_agreement` names.
SHOWN = 5


@dataclass(frozen=True)
class Agreement:
    """How a gate's decisions agree with the labels of a file: ``agreement`` (share of labeled records decided
    as labeled; a record without a verdict counts as a disagreement), ``recall`` and ``precision`` of the
    positive label, and the records that disagree (id, label, decision or error)."""

    path: str
    gate: str
    label: str
    n: int
    agreement: float
    recall: float
    precision: float
    errors: int
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The measures, without the disagreements."""
        return {name: value for name, value in vars(self).items() if name != "disagreements"}


def _labeled(path: Path, label: str, limit: int | None) -> list[tuple[int, object, bool]]:
    """The line, record (as ``suffice judge`` reads it) and label of each record of ``path`` that holds a
    true/false ``label``, in order (at most ``limit``)."""
    if not path.is_file():
        raise InputError("path", f"{path} is not a file")
    out: list[tuple[int, object, bool]] = []
    for source in read_lines(path):
        record = source.record
        if isinstance(record, InvalidRecord):
            raise InputError("path", f"{path} line {record.line} {record.message}")
        if not isinstance(record, dict):
            raise InputError("path", f"{path} line {source.line} is not a JSON object")
        value = record.get(label)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise InputError(label, f"{path} line {source.line}: must be true or false, got {value!r}")
        out.append((source.line, AS_JUDGED.apply(record, source.line), value))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise InputError(label, f"no record of {path} has a {label!r} label (true or false)")
    return out


def agreement(
    judge: JudgeLike,
    path: str | Path,
    gate: str = DEFAULT_GATE,
    options: Mapping[str, Any] | None = None,
    *,
    label: str = "sufficient",
    limit: int | None = None,
) -> Agreement:
    """Judge every labeled record of the JSONL file ``path`` with ``gate`` and compare its decisions with
    ``label`` (the ``suffice calibrate`` format: ``sufficient: true | false``).  A record the judge refuses as a
    record is an :class:`~suffice.exceptions.InputError` naming its line."""
    source = Path(path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError("limit", limit, "must be a whole number of at least 1")
    labeled = _labeled(source, label, limit)
    reader = gate_of(judge, gate, options)
    results: list[JudgeResult] = []
    for start in range(0, len(labeled), BATCH):
        results += judge_records(judge, [r for _, r, _ in labeled[start : start + BATCH]], reader.name, options)
    for (line, _, _), result in zip(labeled, results, strict=True):
        if result.error is not None and result.error.field is not None:
            raise InputError("path", f"{source} line {line} cannot be judged: {result.error.message}")
    labels = [value for _, _, value in labeled]
    # An error is scored as the decision that disagrees: a judge that fails must not look accurate.
    decided = [
        (1.0 if reader.route(r.verdict).route == "deliver" else 0.0) if r.verdict is not None else (0.0 if y else 1.0)
        for r, y in zip(results, labels, strict=True)
    ]
    measured = point(decided, labels, 0.5)
    disagreements = [
        {
            "id": r.id,
            "label": y,
            **({"decision": s >= 0.5} if r.verdict is not None else {"error": r.error.type if r.error else "none"}),
            **({"why": describe_failure(reader, r)} if r.verdict is not None and s < 0.5 else {}),
        }
        for r, y, s in zip(results, labels, decided, strict=True)
        if (s >= 0.5) != y
    ]
    return Agreement(
        path=str(source),
        gate=reader.name,
        label=label,
        n=len(labeled),
        agreement=measured.accuracy,
        recall=measured.recall,
        precision=measured.precision,
        errors=sum(r.verdict is None for r in results),
        disagreements=disagreements,
    )


def _bound(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ConfigError(name, value, "must be a number from 0 to 1")
    return float(value)


def assert_agreement(
    judge: JudgeLike,
    path: str | Path,
    gate: str = DEFAULT_GATE,
    options: Mapping[str, Any] | None = None,
    *,
    min_agreement: float | None = None,
    min_recall: float | None = None,
    min_precision: float | None = None,
    label: str = "sufficient",
    limit: int | None = None,
    record_property: RecordProperty | None = None,
) -> Agreement:
    """Fail when the gate's agreement with the labels of ``path`` (or its recall, or precision) drops below its
    bound; the message gives every measure and the first disagreements, each in the verdict's words."""
    bounds = {
        "agreement": _bound("min_agreement", min_agreement),
        "recall": _bound("min_recall", min_recall),
        "precision": _bound("min_precision", min_precision),
    }
    if all(bound is None for bound in bounds.values()):
        raise ConfigError("min_agreement", None, "give at least one of min_agreement, min_recall, min_precision")
    measured = agreement(judge, path, gate, options, label=label, limit=limit)
    if record_property is not None:
        record_property(f"suffice.{measured.gate}.agreement", json.dumps(measured.as_dict(), sort_keys=True))
    below = [
        f"{name} {getattr(measured, name):.3f} < {bound:.3f}"
        for name, bound in bounds.items()
        if bound is not None and getattr(measured, name) < bound
    ]
    if below:
        shown = "; ".join(
            f"{d['id']} (labeled {d['label']}, "
            + (f"judged {d['decision']}" if "decision" in d else f"error {d['error']}")
            + (f": {d['why']}" if "why" in d else "")
            + ")"
            for d in measured.disagreements[:SHOWN]
        )
        more = len(measured.disagreements) - SHOWN
        raise AssertionError(
            f"suffice {measured.gate} on {measured.path}: {', '.join(below)} over {measured.n} labeled records "
            f"(agreement {measured.agreement:.3f}, recall {measured.recall:.3f}, precision {measured.precision:.3f}, "
            f"{measured.errors} without a verdict); disagreements: {shown}" + (f" and {more} more" if more > 0 else "")
        )
    return measured
