"""``suffice judge``: JSONL in, one result line per record out, resumable."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from suffice.cli.exit_codes import EXIT_FATAL, EXIT_ITEM_ERRORS, EXIT_OK, EXIT_USAGE
from suffice.config import BACKENDS, DEFAULT_BACKEND, DETAILS, ENGINES, GATES, THRESHOLD_PRESETS, JudgeConfig
from suffice.exceptions import ConfigError, InputError, SufficeError
from suffice.gates import make_gate_for
from suffice.harness.audit import AuditLog, weights_hash
from suffice.harness.recording import audit_result
from suffice.jsonl import ResumableWriter, read_records
from suffice.judge import Judge
from suffice.records import Item
from suffice.results import JudgeResult
from suffice.serving.machine import machine_settings
from suffice.summary import RunSummary


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """The options that build a judge (shared by ``judge`` and ``calibrate``)."""
    p.add_argument("--gate", choices=GATES, default="sufficiency")
    p.add_argument("--model", type=Path, default=None, help="local Hugging Face model folder (default: embedded)")
    p.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND, help="structured-output backend (vLLM)")
    p.add_argument("--engine", choices=ENGINES, default="vllm", help="vllm, or transformers where vLLM cannot run")
    p.add_argument("--batch-size", type=int, default=256, help="records per engine call (default 256)")
    p.add_argument("--max-model-len", type=int, default=None, help="context window (default: the model's)")
    p.add_argument("--compile", action="store_true", help="let vLLM compile the model (slower start, faster decode)")
    p.add_argument("--rubric", default=None, help="adequacy gate: rubric NAME[@VERSION] (newest if no version)")
    p.add_argument("--rubric-dir", type=Path, default=None, help="adequacy gate: your own rubric folder")
    p.add_argument("--threshold", choices=THRESHOLD_PRESETS, default="strict", help="recovery gate: threshold preset")
    p.add_argument("--gate-config", type=Path, default=None, help="sufficiency gate: a calibrated threshold file")
    p.add_argument(
        "--detail",
        choices=DETAILS,
        default="full",
        help="full verdicts, or only the decision and its probability (one short step: for batch scoring)",
    )
    p.add_argument("--cores", default=None, help="cores for the engine's threads, e.g. 0-3 (default: all allowed)")
    p.add_argument(
        "--kv-cache-gib", type=int, default=None, help="KV cache in GiB (CPU; default: 20%% of available memory)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show the engine's own log and its settings")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "judge", help="judge JSONL records", description="Judge every record of INPUT; write one result line each."
    )
    p.add_argument("input", type=Path, help="JSONL records (id, question, chunks[, response])")
    p.add_argument("-o", "--output", type=Path, required=True, help="JSONL results, appended as batches finish")
    add_engine_args(p)
    p.add_argument("--overwrite", action="store_true", help="start over instead of resuming OUTPUT")
    p.add_argument(
        "--format",
        choices=("suffice", "seed", "ragflow"),
        default="suffice",
        help="verdict shape in OUTPUT: suffice's, or the seed prompt's own schema (ragflow: the same, for sufficiency)",
    )
    p.add_argument("--audit-db", type=Path, default=None, help="record every evaluation in this audit database")
    p.set_defaults(run=run)


def result_row(result: JudgeResult, fmt: str) -> dict[str, Any]:
    row = result.model_dump(mode="json", exclude={"raw_text"})
    verdict = result.verdict
    if fmt in ("seed", "ragflow") and verdict is not None and hasattr(verdict, "to_seed"):
        row["verdict"] = verdict.to_seed()
        row["fitting"] = verdict.model_dump(
            mode="json",
            include={"truncated_chunk_ids", "omitted_chunk_ids", "question_truncated", "prompt_version"},
        )
        decision = getattr(verdict, "decision", None)
        if isinstance(decision, BaseModel):
            row["decision"] = decision.model_dump(mode="json")
    return row


def _batches(records: Iterator[object], size: int) -> Iterator[list[object]]:
    batch: list[object] = []
    for record in records:
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _item_or_none(judge: Judge, record: object) -> Item | None:
    try:
        return judge.gate.parse_item(record)
    except InputError:
        return None


def config_from_args(args: argparse.Namespace) -> JudgeConfig:
    """A checked config, its gate built once so a bad rubric fails before the engine starts."""
    if args.batch_size < 1:
        raise ConfigError("batch_size", args.batch_size, "must be at least 1")
    config = JudgeConfig(
        gate=args.gate,
        engine=args.engine,
        backend=args.backend,
        model=args.model,
        max_model_len=args.max_model_len,
        enforce_eager=not args.compile,
        rubric=args.rubric,
        rubric_dir=args.rubric_dir,
        threshold=args.threshold,
        gate_config=args.gate_config,
        detail=args.detail,
        cores=args.cores,
        kv_cache_gib=args.kv_cache_gib,
        verbose=args.verbose,
    )
    make_gate_for(config)
    machine_settings(config)  # --cores outside the affinity mask is a usage error, before the engine starts
    return config


def run(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        print(f"error: input {str(args.input)!r} is not a file", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = config_from_args(args)
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return judge_file(
        config,
        args.input,
        args.output,
        batch_size=args.batch_size,
        fmt=args.format,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        audit_db=args.audit_db,
    )


def judge_file(
    config: JudgeConfig,
    source: Path,
    output: Path,
    *,
    batch_size: int = 256,
    fmt: str = "suffice",
    overwrite: bool = False,
    progress: bool = True,
    audit_db: Path | None = None,
) -> int:
    """Judge every record of ``source`` into ``output`` (resuming it); returns the exit status."""
    from tqdm import tqdm

    total = sum(1 for _ in read_records(source))
    try:
        writer = ResumableWriter(output, overwrite=overwrite)
        records = read_records(source)
        for index in range(len(writer.done_ids)):
            record = next(records, None)
            if record is None:
                raise SufficeError(f"{output} has more lines than {source} has records; use --overwrite")
            writer.verify(index, record)
        if writer.done_ids:
            print(f"resuming: {len(writer.done_ids)} of {total} records already in {output}", file=sys.stderr)
        if len(writer.done_ids) == total:
            print(f"nothing to do: every record already has a result in {output}", file=sys.stderr)
            return EXIT_OK if writer.done_errors == 0 else EXIT_ITEM_ERRORS
        print(
            f"starting the engine ({config.engine}, backend {config.backend}, model {config.model or 'embedded'})",
            file=sys.stderr,
        )
        judge = Judge.open(config)
        audit = AuditLog(audit_db) if audit_db else None
    except SufficeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FATAL

    summary = RunSummary(positive=judge.gate.is_positive)  # what routes is what is counted
    bar = tqdm(
        total=total,
        initial=len(writer.done_ids),
        unit="rec",
        disable=not progress,
        file=sys.stderr,
        smoothing=0.1,
        dynamic_ncols=True,
    )
    start = time.perf_counter()
    try:
        run_id = uuid.uuid4().hex
        weights = weights_hash(getattr(judge.engine, "model_path", None)) if audit else None
        for batch in _batches(records, batch_size):
            began = time.perf_counter()
            results = judge.judge_batch(batch, progress=bar.update)
            latency = (time.perf_counter() - began) * 1000
            if audit is not None:
                for record, result in zip(batch, results, strict=True):
                    item = _item_or_none(judge, record)
                    audit_result(audit, result, item, run_id=run_id, round=1, latency_ms=latency, weights_hash=weights)
            writer.write(result_row(r, fmt) for r in results)
            summary.add(batch, results)
    except SufficeError as exc:
        print(f"\nerror: {exc}\nresults so far are in {output}; rerun the same command to resume", file=sys.stderr)
        return EXIT_FATAL
    finally:
        bar.close()
        writer.close()
        judge.close()
        if audit is not None:
            audit.close()
    summary.seconds = time.perf_counter() - start
    print(summary.table(), file=sys.stderr)
    print(f"verdicts written to {output}", file=sys.stderr)
    return EXIT_OK if summary.errors + writer.done_errors == 0 else EXIT_ITEM_ERRORS
