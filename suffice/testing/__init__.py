"""The gate in a test suite: assertions that fail with the verdict's own words, and a bound on agreement.

Each helper takes a judge (any :class:`~suffice.protocol.JudgeProtocol`: a :class:`~suffice.Judge`, or a
:class:`~suffice.Client` of ``suffice serve``) and a record as ``suffice judge`` reads one (``question``,
``chunks``, and ``response`` for a gate that checks an answer), judges it, and returns the
:class:`~suffice.results.JudgeResult`; when the gate says no, it raises :class:`AssertionError` naming what the
verdict names: what is missing, which claim is unsupported, which rubric dimension fell short.
``record_property`` (pytest's fixture of that name, or any ``(name, value)`` callable) receives the verdict, so a
JUnit XML report carries it.

The pytest plugin (:mod:`suffice.testing.plugin`, entry point ``pytest11``) gives these as fixtures; this module
imports no pytest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suffice.calibration.metrics import point
from suffice.exceptions import ConfigError, InputError
from suffice.gates import Gate
from suffice.gates.registry import DEFAULT_CHECK_GATE, DEFAULT_GATE
from suffice.protocol import JudgeProtocol
from suffice.records.item import InvalidRecord
from suffice.records.jsonl import read_records
from suffice.results import JudgeResult

__all__ = [
    "ADEQUACY",
    "RECOVERY",
    "SUFFICIENCY",
    "Agreement",
    "JudgeLike",
    "RecordProperty",
    "agreement",
    "assert_adequate",
    "assert_agreement",
    "assert_insufficient",
    "assert_passes",
    "assert_sufficient",
    "assert_supported",
    "judge_records",
]

#: What the helpers judge with: any judge of the one protocol (a Judge in process, a Client or AsyncClient
#: of ``suffice serve``, your own).
JudgeLike = JudgeProtocol
#: pytest's ``record_property``: one ``(name, value)`` for the JUnit XML report.
RecordProperty = Callable[[str, object], None]

#: How many records of a labeled file go in one call (a service's body limit bounds one request).
BATCH = 32
#: How many disagreements a failed :func:`assert_agreement` names.
SHOWN = 5
#: The gates the named helpers judge with: the registry's defaults, and the adequacy gate (the one built-in gate no
#: default stands for; an outside gate is judged by :func:`assert_passes` with its name).
SUFFICIENCY = DEFAULT_GATE
RECOVERY = DEFAULT_CHECK_GATE
ADEQUACY = "adequacy"


def judge_records(
    judge: JudgeLike, records: Sequence[object], gate: str | None = None, options: Mapping[str, Any] | None = None
) -> list[JudgeResult]:
    """One result per record, in order (``gate``: default the judge's own)."""
    if not isinstance(judge, JudgeProtocol):
        raise ConfigError("judge", type(judge).__name__, "must be a judge: a suffice.Judge, Client or AsyncClient")
    return judge.judge_batch(list(records), gate=gate, options=options)


def _gate_of(judge: JudgeLike, gate: str | None, options: Mapping[str, Any] | None) -> Gate:
    """The gate that reads the verdicts (its decision rule and route), as the judge builds it."""
    if not isinstance(judge, JudgeProtocol):
        raise ConfigError("judge", type(judge).__name__, "must be a judge: a suffice.Judge, Client or AsyncClient")
    return judge.gate_for(gate, options)


def _question(record: object) -> str:
    question = record.get("question") if isinstance(record, Mapping) else None
    return repr(question) if isinstance(question, str) else "the record"


def _words(items: Sequence[str]) -> str:
    return "; ".join(str(item) for item in items)


def _describe_failure(gate: Gate, result: JudgeResult) -> str:
    """Why ``result`` does not pass ``gate``, in the verdict's own words."""
    verdict = result.verdict
    if verdict is None:
        error = result.error
        return f"no verdict: {error.type}: {error.message}" if error is not None else "no verdict"
    parts: list[str] = []
    fields = verdict.model_dump(mode="json")
    if isinstance(fields.get("missing_information"), list) and fields["missing_information"]:
        parts.append(f"missing: {_words(fields['missing_information'])}")
    coverage = fields.get("coverage")
    if isinstance(coverage, dict):
        uncovered = [name for name, covered in coverage.items() if not covered]
        if uncovered:
            parts.append(f"not covered: {_words(uncovered)}")
    for key, label in (("unsupported_claims", "unsupported claims"), ("contradictions", "contradictions")):
        if isinstance(fields.get(key), list) and fields[key]:
            parts.append(f"{label}: {_words(fields[key])}")
    decision = fields.get("decision")
    if isinstance(decision, dict):
        below = decision.get("below_minimum") or {}
        critical = decision.get("failed_critical") or {}
        if below:
            parts.append("below minimum: " + ", ".join(f"{k} {v:g}" for k, v in below.items()))
        if critical:
            parts.append("failed critical: " + ", ".join(f"{k} {v:g}" for k, v in critical.items()))
        unmet = [f"{n} (critical)" for n in decision.get("failed_critical_criteria") or []]
        unmet += [str(n) for n in decision.get("unmet_criteria") or []]
        if unmet:
            parts.append("criteria not met: " + ", ".join(unmet))
        if decision.get("reason"):
            parts.append(f"decision: {decision['reason']}")
    for key in ("classification", "abstention_notice", "reasoning", "rationale"):
        if fields.get(key):
            parts.append(f"{key}: {fields[key]}")
    routing = gate.route(verdict)
    parts.append(f"route: {routing.route}")
    return "; ".join(parts)


def _record(record_property: RecordProperty | None, gate: Gate, result: JudgeResult, positive: bool | None) -> None:
    """The verdict as one JUnit XML property, ``suffice.<gate>``: a JSON object (id, passed, route, verdict)."""
    if record_property is None:
        return
    value: dict[str, Any] = {"id": result.id, "passed": positive}
    if result.verdict is not None:
        value["route"] = gate.route(result.verdict).route
        value["verdict"] = result.verdict.model_dump(mode="json")
    if result.error is not None:
        value["error"] = result.error.model_dump(mode="json")
    record_property(f"suffice.{gate.name}", json.dumps(value, ensure_ascii=False, sort_keys=True))


def _judged(
    judge: JudgeLike,
    record: object,
    gate: str | None,
    options: Mapping[str, Any] | None,
    record_property: RecordProperty | None,
) -> tuple[Gate, JudgeResult, bool | None]:
    reader = _gate_of(judge, gate, options)
    result = judge_records(judge, [record], reader.name, options)[0]
    # What passes is what delivers: a verdict a person must see is not "sufficient", whatever its boolean says.
    positive = reader.route(result.verdict).route == "deliver" if result.verdict is not None else None
    _record(record_property, reader, result, positive)
    return reader, result, positive


def _require_positive(
    judge: JudgeLike,
    record: object,
    gate: str | None,
    options: Mapping[str, Any] | None,
    record_property: RecordProperty | None,
    failed: str,
) -> JudgeResult:
    """The result of ``record``, or an AssertionError unless its decision is positive: ``suffice <gate>: <failed,
    ``{}`` the question>: <what the verdict says>``."""
    reader, result, positive = _judged(judge, record, gate, options, record_property)
    if not positive:
        raise AssertionError(
            f"suffice {reader.name}: {failed.format(_question(record))}: {_describe_failure(reader, result)}"
        )
    return result


def assert_passes(
    judge: JudgeLike,
    record: object,
    gate: str | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Judge ``record`` with ``gate`` (any gate, yours too) and fail unless its decision is positive."""
    return _require_positive(judge, record, gate, options, record_property, "{} did not pass")


def assert_sufficient(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the sufficiency gate finds the chunks enough to answer the question; the message names what
    the verdict says is missing, the entities no chunk covers and any contradiction."""
    return _require_positive(
        judge, record, SUFFICIENCY, options, record_property, "the context for {} is not sufficient"
    )


def assert_insufficient(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the sufficiency gate refuses the chunks (a question your corpus must not pretend to answer);
    the message names the chunks the verdict found useful and its reasoning."""
    _, result, positive = _judged(judge, record, SUFFICIENCY, options, record_property)
    if positive is None:
        error = result.error
        raise AssertionError(
            f"suffice sufficiency: {_question(record)} got no verdict"
            + (f": {error.type}: {error.message}" if error is not None else "")
        )
    if positive:
        fields = result.verdict.model_dump(mode="json") if result.verdict is not None else {}
        raise AssertionError(
            f"suffice sufficiency: the context for {_question(record)} was judged sufficient: "
            f"useful chunks: {fields.get('useful_chunk_ids')}; reasoning: {fields.get('reasoning')}"
        )
    return result


def assert_supported(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    allow_unsupported: bool = False,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the recovery gate delivers the record's ``response`` as supported by its chunks, and (unless
    ``allow_unsupported``) no claim of it is unsupported; the message names the unsupported claims."""
    result = _require_positive(judge, record, RECOVERY, options, record_property, "the answer to {} is not supported")
    assert result.verdict is not None
    unsupported = list(getattr(result.verdict, "unsupported_claims", []) or [])
    if unsupported and not allow_unsupported:
        raise AssertionError(
            f"suffice recovery: the answer to {_question(record)} was delivered with unsupported claims: "
            f"{_words(unsupported)}"
        )
    return result


def assert_adequate(
    judge: JudgeLike,
    record: object,
    options: Mapping[str, Any] | None = None,
    *,
    record_property: RecordProperty | None = None,
) -> JudgeResult:
    """Fail unless the adequacy gate's computed decision is PASS; the message names the dimensions under their
    minimum, the failed critical ones, the rubric criteria not met, what is missing and the rationale."""
    return _require_positive(judge, record, ADEQUACY, options, record_property, "the context for {} is not adequate")


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


def _labeled(path: Path, label: str, limit: int | None) -> list[tuple[dict[str, Any], bool]]:
    """The records of ``path`` that hold a true/false ``label``, in order (at most ``limit``)."""
    if not path.is_file():
        raise InputError("path", f"{path} is not a file")
    out: list[tuple[dict[str, Any], bool]] = []
    for number, record in enumerate(read_records(path), start=1):
        if isinstance(record, InvalidRecord):
            raise InputError("path", f"{path} line {record.line} {record.message}")
        if not isinstance(record, dict):
            raise InputError("path", f"{path} line {number} is not a JSON object")
        value = record.get(label)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise InputError(label, f"{path} line {number}: must be true or false, got {value!r}")
        out.append((record, value))
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
    ``label`` (the ``suffice calibrate`` format: ``sufficient: true | false``)."""
    source = Path(path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError("limit", limit, "must be a whole number of at least 1")
    labeled = _labeled(source, label, limit)
    reader = _gate_of(judge, gate, options)
    results: list[JudgeResult] = []
    for start in range(0, len(labeled), BATCH):
        results += judge_records(judge, [r for r, _ in labeled[start : start + BATCH]], reader.name, options)
    labels = [value for _, value in labeled]
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
            **({"why": _describe_failure(reader, r)} if r.verdict is not None and s < 0.5 else {}),
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
