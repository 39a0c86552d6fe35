"""How a batch run is configured, checked once; errors name the option and its value."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from suffice.batch.inputs import Shard
from suffice.exceptions import ConfigError
from suffice.formats.files import file_format
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT, verdict_format
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


def finite_number(name: str, value: object) -> float:
    """``value`` if it is a finite number that is not negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(name, value, "must be a finite number")
    if value < 0:
        raise ConfigError(name, value, "must not be negative")
    return float(value)


@dataclass(frozen=True)
class BatchOptions:
    batch_size: int = setting(256, "records per engine call (default 256)", minimum=1)
    #: Verdict format in the output (:mod:`suffice.formats.verdicts`).
    fmt: str = DEFAULT_VERDICT_FORMAT
    overwrite: bool = False
    #: Judge again every record whose row is an error (not only those the engine caused).
    retry_errors: bool = False
    audit_db: Path | None = None
    audit_key: bytes | None = None
    #: Where to write an anchor of the audit log when the run ends (see :meth:`AuditLog.save_anchor`).
    anchor_file: Path | None = None
    #: File formats (:mod:`suffice.formats.files`); ``None``: by the file's extension.
    input_format: str | None = None
    output_format: str | None = None
    #: Input field names that differ from suffice's (RAGAS names are known without one).
    fields: FieldMap = field(default_factory=FieldMap)
    #: Judge on Ray actors instead of this process's engine.
    ray: RayOptions | None = None
    #: Judge only this shard of the input (one of N copies of a cluster job).
    shard: Shard | None = None
    #: The service's caps on one record (a string's characters, a list's entries): a record over one is its
    #: error row (see :class:`~suffice.batch.inputs.InputFile`).
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
        check(self)
        verdict_format(self.fmt)
        for name in ("input_format", "output_format"):
            value = getattr(self, name)
            if value is not None:
                file_format(value, name)
        if self.anchor_file is not None and self.audit_db is None:
            raise ConfigError("anchor_file", str(self.anchor_file), "needs audit_db: it anchors the audit log")
