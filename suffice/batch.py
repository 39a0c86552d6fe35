"""The batch runner: a JSONL file in, one result line per record out, resumable.

What it guarantees, whatever the input holds and whatever fails:

- every non-blank input line gets exactly one output row (``line`` says which), a
  verdict or an error naming the field; one bad line never stops the run;
- rows are flushed to disk after every batch, so a killed run loses at most the batch
  in flight, and a rerun with the same settings judges only what is missing (rows a
  failing engine caused are judged again; ``retry_errors`` re-judges every error);
- a rerun with other settings (gate, model, weights, backend, prompt, rubric,
  threshold, format) is refused with :class:`OutputMismatchError` naming the setting,
  and so is an output that is the input itself;
- a dead engine raises :class:`EngineDeadError` after what is done is on disk; no
  record gets an error row because of it.

The CLI (``suffice judge``, ``calibrate``, ``demo``) only turns arguments into a
:class:`BatchOptions` and maps the exceptions to exit statuses.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suffice.config import JudgeConfig
from suffice.exceptions import OutputMismatchError
from suffice.gates import make_gate_for
from suffice.gates.base import Gate
from suffice.harness.audit import AuditLog, weights_hash
from suffice.harness.recording import audit_values
from suffice.jsonl import SourceLine, read_lines
from suffice.judge import Judge
from suffice.output import ResultFile
from suffice.results import JudgeResult
from suffice.run_settings import RunSettings
from suffice.summary import RunSummary

#: Called with a message for the user (resuming, starting the engine, ...).
Notify = Callable[[str], None]
#: Called once with (total, already done); returns the per-record progress callback
#: and a function that closes the display.
ProgressFactory = Callable[[int, int], tuple[Callable[[int], None], Callable[[], None]]]


def _quiet(message: str) -> None:
    return None


@dataclass(frozen=True)
class BatchOptions:
    batch_size: int = 256
    #: Verdict shape in the output: ``suffice``, or the seed prompt's own (``seed``/``ragflow``).
    fmt: str = "suffice"
    overwrite: bool = False
    #: Judge again every record whose row is an error (not only those the engine caused).
    retry_errors: bool = False
    audit_db: Path | None = None
    audit_key: bytes | None = None


@dataclass
class BatchReport:
    """What a finished run did; ``errors`` counts error rows in the whole output."""

    total: int
    skipped: int
    summary: RunSummary
    errors: int = 0
    redone: int = 0


def result_row(result: JudgeResult, gate: Gate, fmt: str, line: int) -> dict[str, Any]:
    """The output row of one result (``line``: the input line it answers); the gate
    shapes the verdict for ``fmt``."""
    row = result.model_dump(mode="json", exclude={"raw_text"})
    row["line"] = line
    if result.verdict is not None:
        row.update(gate.export(result.verdict, fmt))
    return row


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _batches(lines: Iterator[SourceLine], size: int) -> Iterator[list[SourceLine]]:
    batch: list[SourceLine] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def judge_file(
    config: JudgeConfig,
    source: Path,
    output: Path,
    options: BatchOptions | None = None,
    *,
    notify: Notify = _quiet,
    progress: ProgressFactory | None = None,
    open_judge: Callable[[JudgeConfig], Judge] = Judge.open,
) -> BatchReport:
    """Judge every record of ``source`` into ``output``, resuming it.

    Raises :class:`OutputMismatchError` (the output is not this run's to resume),
    :class:`EngineDeadError` (the engine died; rerun to resume) and other
    :class:`SufficeError` for what stops the run; item failures never raise.
    """
    options = options or BatchOptions()
    if _same_file(source, output):
        raise OutputMismatchError("output", f"the output {output} is the input itself; choose another -o")
    gate = make_gate_for(config)
    settings = RunSettings.of(config, gate, options.fmt)
    fresh = options.overwrite or not output.exists() or output.stat().st_size == 0
    if not fresh:
        settings.check(output)
    results = ResultFile(output, overwrite=options.overwrite, retry_errors=options.retry_errors)
    # Every answered row is checked against the input before anything is written.
    total, missing = _check_answered(source, results)
    report = BatchReport(total=total, skipped=total - missing, summary=RunSummary(positive=gate.is_positive))
    report.redone = results.redo
    with ExitStack() as stack:
        stack.callback(results.close)
        if results.done:
            notify(f"resuming: {len(results.done)} of {total} records already in {output}")
        if missing == 0:
            notify(f"nothing to do: every record already has a result in {output}")
            report.errors = results.done_errors
            return report
        if results.redo:
            notify(f"judging again {results.redo} records whose rows were engine failures or errors")
        # A bad key or a damaged audit log stops the run before the engine starts.
        audit = (
            stack.enter_context(closing(AuditLog(options.audit_db, key=options.audit_key)))
            if options.audit_db
            else None
        )
        results.start()
        settings.write(output)
        v = settings.values
        notify(f"starting the engine ({v['engine']}, backend {v['backend']}, model {v['model']})")
        judge = stack.enter_context(closing(open_judge(config)))
        todo = (line for line in read_lines(source) if line.line not in results.done)
        _run(judge, options, results, audit, todo, total, report, progress)
    report.errors = results.done_errors + report.summary.errors
    return report


def _check_answered(source: Path, results: ResultFile) -> tuple[int, int]:
    """(records in the input, records without a final row), after checking that every
    answered row carries the id of the input record at its line."""
    total = seen = 0
    for line in read_lines(source):
        total += 1
        if line.line in results.done:
            results.verify(line.line, line.record)
            seen += 1
    if seen != len(results.done):
        lines = {line.line for line in read_lines(source)}
        extra = sorted(set(results.done) - lines)
        raise OutputMismatchError(
            "input", f"{results.path} answers input lines this input does not have (e.g. line {extra[0]})"
        )
    return total, total - seen


def _run(
    judge: Judge,
    options: BatchOptions,
    results: ResultFile,
    audit: AuditLog | None,
    todo: Iterator[SourceLine],
    total: int,
    report: BatchReport,
    progress: ProgressFactory | None,
) -> None:
    update, close_progress = progress(total, len(results.done)) if progress else (None, None)
    start = time.perf_counter()
    try:
        run_id = uuid.uuid4().hex
        weights = weights_hash(getattr(judge.engine, "model_path", None)) if audit is not None else None
        for batch in _batches(todo, options.batch_size):
            records = [line.record for line in batch]
            began = time.perf_counter()
            judged = judge.judge_batch(records, progress=update)
            latency = (time.perf_counter() - began) * 1000
            if audit is not None:  # audited before written: a row on disk is always in the log
                audit.record_many(
                    audit_values(
                        judge.gate,
                        result,
                        judge.item_or_none(record),
                        run_id=run_id,
                        round=1,
                        latency_ms=latency,
                        weights_hash=weights,
                    )
                    for record, result in zip(records, judged, strict=True)
                )
            results.write(
                result_row(r, judge.gate, options.fmt, line.line) for r, line in zip(judged, batch, strict=True)
            )
            report.summary.add(records, judged)
    finally:
        if close_progress is not None:
            close_progress()
        report.summary.seconds = time.perf_counter() - start


__all__ = ["BatchOptions", "BatchReport", "judge_file", "result_row"]
