"""Judging a Ray ``Dataset``: records in, result rows out, through ``map_batches``.

For users already on Ray Data; ``suffice judge --ray`` is :mod:`suffice.batch.ray_scorer`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from suffice.batch.options import BatchOptions, RayOptions
from suffice.batch.ray_pool import JudgeWorker, ray_module
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError, EngineDeadError, EngineUnreachableError
from suffice.formats.verdicts import verdict_format
from suffice.gates.registry import gate_class
from suffice.judge import Judge
from suffice.records.fields import FieldMap
from suffice.records.item import record_id
from suffice.results import JudgeResult
from suffice.rows.shaping import crash_result, result_row
from suffice.serving.isolation import isolate
from suffice.settings import declared

#: Times Ray Data may restart a :func:`judge_dataset` actor whose process died, and retry
#: its batch.  Ray Data's default is for ever: a record that kills its actor restarts it
#: without end (21 times in two minutes, measured).
DATASET_RESTARTS = 3


class _DatasetWorker:
    """``map_batches`` body for :func:`judge_dataset` (a callable class: one engine per actor).

    A record that kills the engine costs only its own row: the engine is opened again
    and the batch judged in halves (:mod:`suffice.serving.isolation`), down to that record,
    which gets an ``EngineCrashError`` row.  An engine that dies on everything fails
    the batch (and the dataset): more deaths in a row than a poison record's halving
    needs (``2 + log2(batch)``), or a lone death before this actor judged anything.
    """

    def __init__(
        self,
        config: JudgeConfig,
        fmt: str,
        fields: dict[str, str],
        open_judge: Callable[[JudgeConfig], Judge] | None = None,
    ) -> None:
        self.config = config
        self.open_judge = open_judge
        self.worker = JudgeWorker(config, open_judge)
        self.fields = FieldMap(fields)
        self.fmt = fmt
        #: Engine deaths since a batch was last judged, and whether any ever was.
        self.deaths = 0
        self.judged_any = False

    def __call__(self, batch: Any) -> dict[str, list[Any]]:
        records = [self.fields.apply(record, None) for record in batch.to_pylist()]
        judged = self._judged(records, 2 + math.ceil(math.log2(max(len(records), 1))))
        if any(r is None for r in judged) and not self.judged_any:
            raise EngineDeadError(
                "the engine died on every record this actor was given, each alone too, and judged none: "
                "the engine itself is failing"
            )
        judge = self.worker.opened()
        gate, engine = judge.gate, judge.engine
        results = [
            crash_result(record_id(record), gate, engine.model_id, engine.backend) if r is None else r
            for record, r in zip(records, judged, strict=True)
        ]
        rows = [{k: v for k, v in result_row(r, gate, self.fmt, 0).items() if k != "line"} for r in results]
        return {
            "id": [r.id for r in results],
            "positive": [None if r.verdict is None else gate.route(r.verdict).route == "deliver" for r in results],
            "error": [None if r.error is None else r.error.type for r in results],
            "result": [json.dumps(row, ensure_ascii=False) for row in rows],
        }

    def _judged(self, records: list[object], most_deaths: int) -> list[JudgeResult | None]:
        """``records`` judged (``None`` for one that killed the engine alone); on an
        engine death, again in halves on a new engine."""

        def died(exc: Exception, _: Sequence[object]) -> None:
            if not isinstance(exc, EngineDeadError) or isinstance(exc, EngineUnreachableError):
                raise exc  # a server gone, or no death at all: no record is to blame
            self.deaths += 1
            if self.deaths > most_deaths:
                raise EngineDeadError(
                    f"the engine died {self.deaths} times in a row with nothing judged in between: "
                    f"the engine itself is failing (last: {exc})"
                ) from exc
            self.worker.close()
            self.worker = JudgeWorker(self.config, self.open_judge)
            if self.worker.failed is not None:  # the engine cannot come back: that error, typed
                raise self.worker.failed from exc

        return isolate(self._judge_batch, records, died)

    def _judge_batch(self, records: Sequence[object]) -> list[JudgeResult]:
        results = self.worker.judge_batch(records)
        self.deaths = 0
        self.judged_any = True
        return results


#: The settings of :class:`BatchOptions` a dataset is judged by; another set is refused rather than ignored.
_DATASET_SETTINGS = ("batch_size", "fmt", "fields", "ray")


def judge_dataset(
    dataset: Any,
    config: JudgeConfig,
    options: BatchOptions | None = None,
    *,
    open_judge: Callable[[JudgeConfig], Judge] | None = None,
) -> Any:
    """A Ray ``Dataset`` of records (suffice's fields or RAGAS names) judged by Ray actors, one engine each: one row
    per record with ``id``, ``positive`` (the gate's decision that routes; null for an error), ``error`` (its type)
    and ``result`` (the full row as JSON, as ``suffice judge`` writes it).  ``options``: its ``batch_size``,
    ``fmt``, ``fields`` and ``ray`` (:class:`RayOptions`: ``actors``, default 1; ``gpus_per_actor``, default one per
    tensor-parallel rank when the cluster has GPUs; ``cpus_per_actor``, default 1).  Records need ids (a Dataset's
    order is not kept, so a position would join nothing back); one without is an error row naming ``id``.  Lazy,
    like every Ray Data transform.  A record that kills the engine gets an ``EngineCrashError`` row and the others
    their verdicts (see :class:`_DatasetWorker`); an actor process that dies is restarted, its batch retried, up to
    :data:`DATASET_RESTARTS` times.  ``open_judge``: how each actor opens its judge (default :meth:`Judge.open`)."""
    options = options or BatchOptions()
    for d in declared(BatchOptions):
        if d.name not in _DATASET_SETTINGS and not d.is_default(getattr(options, d.name)):
            raise ConfigError(d.label, getattr(options, d.name), "not used by judge_dataset")
    refused = verdict_format(options.fmt).refuses(gate_class(config.gate))
    if refused is not None:
        raise ConfigError("format", options.fmt, refused)
    ray = options.ray or RayOptions()
    gpus_per_actor = ray.gpus_per_actor
    if gpus_per_actor is None:
        has_gpus = float(ray_module().cluster_resources().get("GPU", 0)) > 0
        gpus_per_actor = float(config.engine.tensor_parallel_size or 1) if has_gpus else 0.0
    return dataset.map_batches(
        _DatasetWorker,
        fn_constructor_kwargs={
            "config": config,
            "fmt": options.fmt,
            "fields": dict(options.fields.names),
            "open_judge": open_judge,
        },
        batch_size=options.batch_size,
        batch_format="pyarrow",
        concurrency=ray.actors or 1,
        num_gpus=gpus_per_actor,
        num_cpus=1.0 if ray.cpus_per_actor is None else ray.cpus_per_actor,
        max_restarts=DATASET_RESTARTS,
        max_task_retries=DATASET_RESTARTS,
    )
