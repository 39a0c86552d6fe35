"""The batch runner: records in (JSONL or Parquet), one result row each out, resumable.

Guarantees, whatever the input holds and whatever fails:

- every record gets exactly one row (``id`` and ``line`` say which): a verdict or an error naming the field; a
  repeated id gets a ``DuplicateIdError`` row; memory does not grow with the input, and rows are flushed per batch;
- a rerun with the same settings judges only what is missing, by id, rows in any order; rows a failing engine
  caused (``retry_errors``: every error) and stale rows by position are judged again;
- one run at a time per output (:class:`OutputBusyError`); an output line that is not a result row is set aside in
  ``OUTPUT.rejected``; other settings, or the input as output, raise :class:`OutputMismatchError`;
- a dead engine raises :class:`EngineDeadError` after what is done is on disk; the records in flight are noted
  (:mod:`suffice.batch.suspects`) so a record that crashes the engine gets an ``EngineCrashError`` row later.

A Parquet output is written from a JSONL journal beside it (``OUTPUT.journal.jsonl``) when the run ends.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path

from suffice.audit import AuditLog, is_audit_file
from suffice.audit.recording import audit_values, record_results, review_rule
from suffice.batch.answered import KeyIndex, line_key, record_key
from suffice.batch.inputs import InputFile
from suffice.batch.journal import DUPLICATE_ID, ResultFile
from suffice.batch.options import BatchOptions
from suffice.batch.ray_scorer import RayScorer
from suffice.batch.run_settings import RunSettings
from suffice.batch.scoring import LocalScorer, Notify, Scorer, _quiet
from suffice.batch.service_scorer import ServiceScorer, request_options, service_gate, service_settings
from suffice.batch.summary import RunSummary
from suffice.batch.suspects import Suspects, suspects_path
from suffice.config import JudgeConfig, JudgeProtocol
from suffice.exceptions import ConfigError, EngineDeadError, OutputMismatchError, SufficeError
from suffice.files import output_lock, writing
from suffice.formats.files import file_format_of
from suffice.formats.verdicts import verdict_format
from suffice.gates.base import Gate
from suffice.gates.roles import model_positive
from suffice.judge import Judge
from suffice.records.item import record_id
from suffice.records.lines import SourceLine
from suffice.results import ErrorInfo, Judged, JudgeResult, ResultsObserver, ResultsStream
from suffice.rows.shaping import crash_result, error_result, result_row
from suffice.serving import startup
from suffice.serving.base import Progress, checked_progress
from suffice.serving.weights import embedded_notice

#: Called once with (total or ``None``, already done: 0); returns the :class:`~suffice.serving.base.Progress` (records
#: done, prompts read, records answered without the engine) and a function that closes it.
ProgressFactory = Callable[[int | None, int], tuple[Progress, Callable[[], None]]]


#: Input records looked up in the key index at a time.
_LOOKUP = 1024


@dataclass
class BatchReport:
    """What a finished run did; ``errors`` counts error rows in the whole output."""

    total: int
    skipped: int
    summary: RunSummary
    errors: int = 0
    redone: int = 0
    #: Rows in the output for records this input does not have (kept as they were).
    foreign: int = 0
    #: Records sent to a person (a ``human_review`` route, two failed generations) and queued for review.
    reviews: int = 0
    #: Records sent to a person with no review queue to hold them (no audit log): nobody sees them.
    unqueued_reviews: int = 0


def journal_path(output: Path) -> Path:
    """Where the rows of an output that is not appended to (Parquet) are written as they come."""
    return output.with_name(output.name + ".journal.jsonl")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _nonempty(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0


def judge_file(
    config: JudgeConfig,
    source: Path,
    output: Path,
    options: BatchOptions | None = None,
    *,
    notify: Notify = _quiet,
    progress: ProgressFactory | None = None,
    open_judge: Callable[[JudgeConfig], Judge] | None = None,
    client: JudgeProtocol | None = None,
    judge: JudgeProtocol | None = None,
    observers: Sequence[ResultsObserver] = (),
) -> BatchReport:
    """Judge every record of ``source`` into ``output``, resuming it.

    ``judge``: judge with that :class:`~suffice.JudgeProtocol` (a :class:`~suffice.Client` of a running ``suffice
    serve``, a :class:`~suffice.Judge` already open, ...) instead of opening an engine here (``config``'s gate,
    options and detail count, its engine settings do not); the output, resume and settings check are the same,
    the settings being those the judge reports (``settings_for``).  Not with Ray or an audit log (a service keeps
    its own).  ``client``: the same, under its older name.  ``observers``: told each batch written (its
    records and results, :class:`~suffice.results.Judged`) after the run's summary, as the summary is.

    Raises :class:`OutputBusyError`, :class:`OutputMismatchError`, :class:`ConfigError`, :class:`EngineDeadError`
    (rerun to resume), a :class:`ServiceError` of the client, and other :class:`SufficeError` for what stops the
    run; item failures never raise.
    """
    options = options or BatchOptions()
    if client is not None and judge is not None:
        raise ConfigError("client", type(client).__name__, "is judge= under its older name: give one of them")
    judge = judge if judge is not None else client
    if judge is not None and not isinstance(judge, JudgeProtocol):
        raise ConfigError("judge", type(judge).__name__, "must be a judge (suffice.JudgeProtocol)")
    if judge is not None and options.ray is not None:
        raise ConfigError("ray", options.ray.address, "judges on Ray actors' engines: not with a judge given")
    if judge is not None and options.audit_db is not None:
        raise ConfigError(
            "audit_db", str(options.audit_db), "is kept by the service judged through (`suffice serve --audit-db`)"
        )
    open_judge = open_judge or Judge.open  # looked up now: a default bound at import ignores a patched Judge.open
    if _same_file(source, output):
        raise OutputMismatchError("output", f"the output {output} is the input itself; choose another -o")
    if options.audit_db is not None:
        named = [("output", output), ("output", journal_path(output)), ("input", source)]
        if options.anchor_file is not None:
            named.append(("anchor file", options.anchor_file))
        for role, path in named:
            if is_audit_file(options.audit_db, path):
                raise OutputMismatchError(
                    "audit_db", f"the audit database {options.audit_db} is the {role} {path}; choose another"
                )
    inputs = InputFile(
        source,
        options.input_format,
        options.fields,
        options.shard,
        max_field_chars=options.max_field_chars,
        max_chunks_per_item=options.max_chunks_per_item,
    )
    out_format = file_format_of(output, options.output_format, "output-format")
    cannot = out_format.refuses(verdict_format(options.fmt), config.detail)
    if cannot is not None:
        raise cannot
    gate = config.make_gate() if judge is None else service_gate(config)
    refused = verdict_format(options.fmt).refuses(gate)
    if refused is not None:
        raise ConfigError("format", options.fmt, refused)
    if judge is None:
        settings = RunSettings.of(config, gate, options)
    else:
        settings = RunSettings.judged_by(service_settings(judge, config), config, options)
    journal = output if out_format.appendable else journal_path(output)
    with writing(output.parent):
        output.parent.mkdir(parents=True, exist_ok=True)
    # Held from before anything is read until an output that is not appended to is written.
    with output_lock(output):
        if not options.overwrite and (_nonempty(journal) or _nonempty(output)):
            settings.check(output)
        with ExitStack() as stack:
            index = KeyIndex(output.parent)
            stack.callback(index.close)
            if not out_format.appendable and not options.overwrite and output.exists() and not journal.exists():
                out_format.resume(output, journal)
            results = ResultFile(journal, index, overwrite=options.overwrite, retry_errors=options.retry_errors)
            stack.callback(results.close)
            if done := index.done_count:
                notify(f"resuming {output}: it holds {done} finished rows; records that have one are skipped")
            if results.redo:
                notify(f"judging again {results.redo} records whose rows were engine failures or errors")
            if results.repeated:
                notify(f"dropping {results.repeated} second rows for records already answered")
            if results.rejected:
                notify(
                    f"set aside {results.rejected} lines of {journal} that are not result rows (torn or damaged): "
                    f"appended to {results.rejected_path}; records left without a row are judged"
                )
            suspects = Suspects(suspects_path(output), overwrite=options.overwrite, retry_errors=options.retry_errors)
            stack.callback(suspects.close)
            if suspects.suspects:
                notify(f"judging alone the {len(suspects.suspects)} records in flight when the engine died")
            if suspects.culprits:
                notify(f"{len(suspects.culprits)} records stopped the engine when judged alone: they get error rows")
            # A bad key or a damaged audit log stops the run before the engine starts.
            audit = None
            if options.audit_db:
                audit = stack.enter_context(closing(AuditLog(options.audit_db, key=options.audit_key)))
                audit.check_writable()
            results.start()
            settings.write(output, keep_served=not options.overwrite)
            v = settings.values
            describe = f"{v['engine']}, backend {v['backend']}, model {v['model']}"
            scorer: Scorer
            if judge is not None:
                scorer = ServiceScorer(judge, gate, request_options(judge, config), v, notify=notify)
            elif options.ray is not None:
                scorer = RayScorer(config, gate, options.ray, notify=notify, describe=describe, open_judge=open_judge)
            else:
                scorer = LocalScorer(config, gate, open_judge, notify=notify, describe=describe)
            stack.callback(scorer.close)
            report = BatchReport(total=0, skipped=0, summary=_summary_for(gate), redone=results.redo)
            errors_before = index.done_errors
            stream = ResultsStream([report.summary, *observers])
            run = _Run(scorer, gate, options, results, index, audit, settings, report, suspects, output, stream)
            failing = True
            try:
                run.go(inputs, progress)
                failing = False
            finally:
                # Anchored after a failed run too (the rows it recorded count); a failure to anchor is raised only
                # after a run that ended well, else the run's own error is reported.
                if audit is not None and (anchor := options.anchor_file) is not None:
                    try:
                        audit.save_anchor(anchor)
                    except (SufficeError, OSError) as exc:
                        if not failing:
                            raise
                        notify(f"could not write the audit anchor {anchor}: {exc}")
            suspects.forget_rest()
            report.foreign = index.unmet()
            report.errors = errors_before - run.forgotten_errors + report.summary.errors
        if (skipped := report.skipped) and report.total == skipped:
            notify(f"nothing to do: every record already has a result in {output}")
        elif skipped:
            notify(f"resuming: {skipped} of {report.total} records already had a row in {output}; not judged again")
        if report.foreign:
            notify(f"note: {output} holds {report.foreign} rows for ids this input does not have; they were kept")
        if not out_format.appendable:
            out_format.finish(journal, output, gate)
            journal.unlink()
        return report


def _summary_for(gate: Gate) -> RunSummary:
    """The run's summary, counting by the gate's own rules: what routes, where to, and the model's own decision."""
    return RunSummary(
        gate=gate.name,
        positive=gate.is_positive,
        route=lambda verdict: gate.route(verdict).route,
        model_positive=functools.partial(model_positive, gate),
        notice_of=embedded_notice,
    )


@dataclass
class _Run:
    """One pass over the input: skip what is answered, flag repeated ids, judge, write and audit the rest."""

    scorer: Scorer
    gate: Gate
    options: BatchOptions
    results: ResultFile
    index: KeyIndex
    audit: AuditLog | None
    settings: RunSettings
    report: BatchReport
    suspects: Suspects
    #: The output the user named (for Parquet, ``results`` is its journal).
    output: Path
    #: Where each batch written is published: the run's summary observes it.
    stream: ResultsStream
    update: Progress | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Error rows dropped as stale (they no longer count in the output's errors).
    forgotten_errors: int = 0
    _weights: str | None = None

    def __post_init__(self) -> None:
        #: What the audit rows record as deciding their verdicts: the run's settings less the output's own
        #: (its format and field mapping change the file, not a verdict), so ``serve`` records the same.
        self._verdict_settings = {k: v for k, v in self.settings.values.items() if k not in _OUTPUT_ONLY}

    def go(self, inputs: InputFile, progress: ProgressFactory | None) -> None:
        # From 0, advanced as answered records are met (:meth:`_todo`): the output's row count would overshoot.
        update, close_progress = progress(inputs.count, 0) if progress else (None, None)
        start = time.perf_counter()
        sent: deque[tuple[list[tuple[SourceLine, str]], float]] = deque()
        written = 0  # batches written, so sent[0] is batch number `written`

        def batches() -> Iterator[list[object]]:
            served = False
            for batch in self._grouped(self._todo(iter(inputs))):
                if not served:  # the engine starts here, only when there is work
                    self.settings.check_served(self.output, self.scorer.served())
                    served = True
                sent.append((batch, time.perf_counter()))
                yield [line.record for line, _ in batch]

        try:
            self.update = checked_progress(update, "progress")
            for judged in self.scorer.map(batches(), self.update, self._crashed):
                batch, began = sent.popleft()
                self._write([line for line, _ in batch], judged, (time.perf_counter() - began) * 1000)
                self.suspects.settled(key for _, key in batch)
                written += 1
                startup.mark("batch written")
        except EngineDeadError:
            culprit = self.scorer.implicated()
            if culprit is not None and 0 <= culprit - written < len(sent):
                self.suspects.died([(key, line.record) for line, key in sent[culprit - written][0]])
            raise
        finally:
            if close_progress is not None:
                close_progress()
            self.report.summary.seconds = time.perf_counter() - start

    def _grouped(self, todo: Iterator[tuple[SourceLine, str]]) -> Iterator[list[tuple[SourceLine, str]]]:
        """Batches of ``batch_size``; a suspect goes alone, and a proven culprit gets its error row here."""
        batch: list[tuple[SourceLine, str]] = []
        for line, key in todo:
            # Only looked up while something is noted (a rerun after a death).
            if self.suspects and self.suspects.is_culprit(key, line.record):
                self._write([line], [self._crashed(line.record)], 0.0)
                self.suspects.settled([key])
                self._skipped(1)
            elif self.suspects and self.suspects.is_suspect(key, line.record):
                yield [(line, key)]
            else:
                batch.append((line, key))
                if len(batch) >= self.options.batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def _skipped(self, records: int) -> None:
        """Count ``records`` answered without the engine (a row kept, a repeated id, a known culprit)."""
        if records and self.update is not None:
            self.update.skipped(records)

    def _crashed(self, record: object) -> JudgeResult:
        v = self.settings.values
        return crash_result(record_id(record), self.gate, v["model"], v["backend"])

    def _todo(self, lines: Iterator[SourceLine]) -> Iterator[tuple[SourceLine, str]]:
        """The lines still to judge, with keys; answered ones are skipped, repeated ids get error rows here."""
        for chunk in _batches(lines, _LOOKUP):
            found = [(line, rid, record_key(rid, line.line)) for line in chunk for rid in [record_id(line.record)]]
            # Ids keyed by position (none, or made from it) cannot repeat: not looked up.
            first = self.index.first_lines(
                [(rid, line.line) for line, rid, key in found if rid is not None and key != line_key(line.line)]
            )
            keyed: list[tuple[SourceLine, str, str | None, int | None]] = []
            for line, rid, key in found:
                if rid is not None and key != line_key(line.line) and first[rid] != line.line:
                    keyed.append((line, line_key(line.line), rid, first[rid]))
                else:
                    keyed.append((line, key, rid, None))
            # A row kept for a position now holding another record is stale: dropped, and the record judged.
            positions = self.index.done_rows([line_key(line.line) for line, _, _, _ in keyed])
            stale = [
                line_key(line.line)
                for line, key, rid, _ in keyed
                if (old := positions.get(line_key(line.line))) is not None and (key != old.key or old.id != rid)
            ]
            if stale:
                self.forgotten_errors += self.results.forget(stale)
            done = self.index.done_rows([key for _, key, _, _ in keyed])
            met: list[tuple[str, int]] = []
            repeated: list[tuple[SourceLine, JudgeResult]] = []
            for line, key, rid, first_line in keyed:
                self.report.total += 1
                row = done.get(key)
                if row is not None:
                    met.append((key, line.line))
                    self.report.skipped += 1
                elif first_line is not None:
                    repeated.append((line, self._repeated(rid, first_line)))
                else:
                    yield line, key
            self.index.mark_met(met)
            self._skipped(len(met))
            if repeated:
                self._write([line for line, _ in repeated], [r for _, r in repeated], 0.0)
                self._skipped(len(repeated))

    def _repeated(self, rid: str | None, first_line: int) -> JudgeResult:
        message = f"id: {rid!r} is also the id of record {first_line}; ids must be unique to resume by id"
        v = self.settings.values
        return error_result(
            rid, self.gate, v["model"], v["backend"], ErrorInfo(type=DUPLICATE_ID, message=message, field="id")
        )

    def _write(self, batch: list[SourceLine], judged: list[JudgeResult], latency_ms: float) -> None:
        records = [line.record for line in batch]
        if self.audit is not None:  # audited before written: a row on disk is always in the log
            if self._weights is None:
                self._weights = self.scorer.weights_hash()  # a Ray pool asks its actors once, whatever the answer
            items = [self.scorer.item_or_none(record) for record in records]
            rows = [
                audit_values(
                    self.gate,
                    result,
                    item,
                    run_id=self.run_id,
                    round=1,
                    latency_ms=latency_ms,
                    weights_hash=self._weights,
                    settings=self._verdict_settings,
                )
                for item, result in zip(items, judged, strict=True)
            ]
            # A record sent to a person (its route, or two failed generations) is queued for review.
            record_results(self.audit, rows, judged, items, self.run_id, self.gate, self._verdict_settings)
        if not isinstance(self.scorer, ServiceScorer):  # a service queues its own reviews
            to_person = sum(review_rule(self.gate, r) is not None for r in judged)
            if self.audit is not None:
                self.report.reviews += to_person
            else:
                self.report.unqueued_reviews += to_person
        self.results.write(
            result_row(r, self.gate, self.options.fmt, line.line) for r, line in zip(judged, batch, strict=True)
        )
        self.stream.publish(Judged(records, judged, latency_ms / 1000, self.gate, self.gate.name))


#: Run settings that shape the output file, not the verdicts in it.
_OUTPUT_ONLY = ("format", "fields")


def _batches(lines: Iterator[SourceLine], size: int) -> Iterator[list[SourceLine]]:
    while batch := list(itertools.islice(lines, size)):
        yield batch


__all__ = ["BatchOptions", "BatchReport", "journal_path", "judge_file"]
