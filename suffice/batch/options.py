"""How a batch run is configured, checked once; errors name the option and its value."""

from __future__ import annotations

from dataclasses import dataclass

from suffice.audit.options import AuditOptions
from suffice.batch.inputs import Shard
from suffice.exceptions import ConfigError
from suffice.formats.files import file_format, file_format_names
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT, verdict_format, verdict_format_names
from suffice.records.fields import FieldMap
from suffice.records.item import MAX_CHUNKS_PER_ITEM, MAX_FIELD_CHARS
from suffice.settings import check, setting


@dataclass(frozen=True)
class RayOptions:
    """Judge on Ray actors, one engine each (see :mod:`suffice.batch.ray_scorer`)."""

    #: ``auto`` (a running cluster), ``local`` (start one in this process) or ``ray://...``/``HOST:PORT``.
    address: str = "auto"
    actors: int | None = setting(
        None, "--ray: actors, one engine each (default: one per GPU, or 1)", minimum=1, in_process=True
    )
    gpus_per_actor: float | None = setting(
        None, "GPUs per actor (default: 1 when the cluster has GPUs, else 0)", flag="", minimum=0
    )
    cpus_per_actor: float | None = setting(None, "CPUs per actor (default 1)", flag="", minimum=0)
    queue_per_actor: int = setting(
        1, "batches queued on each actor beyond the one it runs (keeps engines busy)", flag="", minimum=0
    )
    max_batch_retries: int = setting(
        3,
        "times a batch is sent again after its actor died, before it is halved to find the record that kills the "
        "engine (that record gets an EngineCrashError row)",
        flag="",
        minimum=0,
    )
    replace_delay_s: float = setting(
        5.0,
        "seconds to wait, times the tries so far (at most 6 times), before a slot's second and later replacement "
        "actors start: on a GPU the dead engine's memory can take a moment to be freed",
        flag="",
        minimum=0,
    )

    def __post_init__(self) -> None:
        # Checked here, not when Ray uses them: a bad value must fail before any row is written.
        if not isinstance(self.address, str) or not self.address.strip():
            raise ConfigError("ray", self.address, "must be auto, local or a cluster address")
        check(self)


def whole_number(name: str, value: object, least: int = 0) -> int:
    """``value`` if it is a whole number (an ``int``, not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "must be a whole number")
    if value < least:
        raise ConfigError(name, value, f"must be at least {least}")
    return value


@dataclass(frozen=True)
class BatchOptions(AuditOptions):
    """How ``suffice judge`` (and :func:`suffice.batch.judge_file`) runs: each setting a flag of ``judge``."""

    batch_size: int = setting(256, "records per engine call (default 256)", minimum=1)
    overwrite: bool = setting(False, "start over instead of resuming the output")
    retry_errors: bool = setting(False, "when resuming, judge again every record whose line is an error")
    fmt: str = setting(
        DEFAULT_VERDICT_FORMAT,
        "verdict format of the rows written (each described in docs/formats.md)",
        flag="--format",
        label="format",
        choices=verdict_format_names,
        verdict=True,
        record="format",
        record_default=True,  # what every row looks like: each output says it
    )
    input_format: str | None = setting(None, "input format (default: by extension)", choices=file_format_names)
    output_format: str | None = setting(None, "output format (default: by extension)", choices=file_format_names)
    fields: FieldMap = setting(
        FieldMap(),
        "read suffice's FIELD (id, question, chunks, response, rubric) from the input's NAME; repeatable "
        "(RAGAS names are known without one)",
        flag="--field",
        label="field",
        metavar="FIELD=NAME",
        reads=tuple[str, ...],
        convert=FieldMap.parse,
        verdict=True,  # which input field is the question decides the verdict
    )
    ray: RayOptions | None = setting(
        None,
        "judge on Ray actors, one engine each: auto (a running cluster; the default), local, or an address",
        const="auto",
        metavar="ADDRESS",
        in_process=True,
        reads=str,
        convert=RayOptions,
    )
    shard: Shard | None = setting(
        None,
        "judge only shard K (0 to N-1) of N: records K, K+N, K+2N, ... (one of N copies of a cluster job)",
        metavar="K/N",
        reads=str,
        convert=Shard.parse,
    )
    max_field_chars: int = setting(
        MAX_FIELD_CHARS,
        f"most characters in one string of a record, as serve's (default {MAX_FIELD_CHARS}; over: its error row)",
        minimum=1,
    )
    max_chunks_per_item: int = setting(
        MAX_CHUNKS_PER_ITEM,
        f"most entries in one list of a record, as serve's (default {MAX_CHUNKS_PER_ITEM})",
        minimum=1,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        verdict_format(self.fmt)  # one installed apart must load
        for name in ("input_format", "output_format"):
            value = getattr(self, name)
            if value is not None:
                file_format(value, name)
