"""Judge settings: frozen, checked once at construction, errors name the parameter; and :class:`JudgeProtocol`, the
one shape of a judge (``Judge``, ``Client``, ``AsyncClient``, ``RayJudge``), which every caller is written against:
the same config, the same calls, the same results, wherever the engine runs."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from suffice.exceptions import ConfigError
from suffice.gates.base import Gate
from suffice.gates.registry import DEFAULT_GATE, DETAILS, gate_class, make_gate
from suffice.results import JudgeResult
from suffice.serving.engine_config import BACKENDS, DEFAULT_BACKEND, ENGINES, EngineConfig
from suffice.settings import check, setting

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "DETAILS", "ENGINES", "JudgeConfig"]

#: The environment variable that sets the verdict cache when ``JudgeConfig.cache`` is not given: a path or ``off``.
CACHE_ENV = "SUFFICE_VERDICT_CACHE"
#: The values of the cache setting that turn it off.
OFF = ("off", "no", "false", "0", "none")


@dataclass(frozen=True)
class JudgeConfig:
    """How to build a judge: the gate and its own options, and the engine's settings
    (:class:`EngineConfig`: by default in-process vLLM on the embedded
    SmolLM2-135M-Instruct, which proves the pipeline, not the judgement).

    ``options`` are the gate's (see its ``options_model``), checked here: an option
    the gate does not take, or a value it refuses, is a :class:`ConfigError` naming it.
    """

    gate: str = DEFAULT_GATE
    engine: EngineConfig = field(default_factory=EngineConfig)
    options: Mapping[str, Any] = field(default_factory=dict)
    detail: str = setting(
        "full",
        "full verdicts, or only the decision and its probability (one short step: for batch scoring), or "
        "auto: the decision for every record and a full verdict where it does not deliver or is near the threshold",
        choices=DETAILS,
        verdict=True,
    )
    auto_margin: float = setting(
        0.1,
        "--detail auto: a delivered decision within this of the threshold 0.5 gets a full verdict too "
        "(0 to 0.5, default 0.1; 0: only decisions that do not deliver, 0.5: every record)",
        minimum=0,
        maximum=0.5,
        unit=" (a distance in probability)",
        verdict=True,
        per_request=True,
    )
    max_question_tokens: int = setting(
        512, "the question is cut to this many tokens", flag="", minimum=16, per_request=True
    )
    max_response_tokens: int = setting(
        1024,
        "tokens of the response one request shows: the recovery gate judges a longer one in windows of this size, "
        "a gate showing the response whole cuts it here",
        flag="",
        minimum=16,
        per_request=True,
    )
    min_chunk_tokens: int = setting(
        24, "the smallest share of the window, in tokens, a chunk is shown with", flag="", minimum=4, per_request=True
    )
    max_chunks: int = setting(128, "chunks shown at most", flag="", minimum=1, maximum=512, per_request=True)
    #: The verdict cache (:mod:`suffice.cache`): ``None`` reads ``$SUFFICE_VERDICT_CACHE`` (a path, or ``off``),
    #: else the file in suffice's cache folder; ``"off"`` (or ``False``) judges every record again; a path.
    cache: str | os.PathLike[str] | bool | None = None
    cache_max_bytes: int = setting(
        1 << 30,
        "the verdict cache's bound in bytes; the least recently used entries go past it (judge, calibrate and serve: "
        "--verdict-cache-mib)",
        flag="",
        minimum=1 << 16,
    )

    def __post_init__(self) -> None:
        options = gate_class(self.gate).options_model
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError("engine", self.engine, "must be an EngineConfig")
        if not isinstance(self.options, Mapping):
            raise ConfigError("options", self.options, "must be a mapping of the gate's option names to values")
        object.__setattr__(self, "options", dict(self.options))
        options.parse(self.gate, self.options)
        check(self)  # detail, the margin, the token budgets
        if self.cache is True:
            object.__setattr__(self, "cache", None)
        if not (self.cache is None or self.cache is False or isinstance(self.cache, (str, os.PathLike))):
            raise ConfigError("cache", self.cache, "must be a path, 'off' or False")
        if isinstance(self.cache, str) and not self.cache.strip():
            raise ConfigError("cache", self.cache, "must be a path, 'off' or False")

    def cache_path(self) -> Path | None:
        """Where the verdict cache is (``None``: off): the ``cache`` setting, else ``$SUFFICE_VERDICT_CACHE``,
        else ``verdicts.sqlite3`` in suffice's cache folder."""
        value: object = self.cache
        if value is None:
            value = os.environ.get(CACHE_ENV) or None
        if value is None:
            from suffice.serving.weights import cache_root

            return cache_root() / "verdicts.sqlite3"
        if value is False or (isinstance(value, str) and value.strip().lower() in OFF):
            return None
        if isinstance(value, str | os.PathLike):
            return Path(value)
        raise ConfigError("cache", value, "must be a path, 'off' or False")

    def make_gate(self) -> Gate:
        """The gate this config names, built from its options at its detail."""
        return make_gate(self.gate, self.options, self.detail)


@runtime_checkable
class JudgeProtocol(Protocol):
    """A judge, wherever its engine runs.  ``gate``: the gate's name (default: the judge's own); ``options``: the
    gate's options for this call (on an in-process judge, over the judge's own for its gate; through a service,
    the options a request may set).  A judge built once per gate and options is kept, so calls with the same
    ones cost nothing more than the first."""

    def judge(
        self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        """One record's result (blocking)."""
        ...

    def judge_batch(
        self, records: Sequence[object], *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        """One result per record, in order (blocking)."""
        ...

    async def ajudge(
        self, record: object, *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> JudgeResult:
        """One record's result, awaited."""
        ...

    async def ajudge_batch(
        self, records: Sequence[object], *, gate: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[JudgeResult]:
        """One result per record, in order, awaited."""
        ...

    def gate_for(self, gate: str | None = None, options: Mapping[str, Any] | None = None) -> Gate:
        """The gate that reads the verdicts of a call with this ``gate`` and ``options`` (its decision, route and
        useful chunks); raises :class:`~suffice.exceptions.ConfigError` for a gate or an option it refuses."""
        ...

    def settings_for(self, gate: str | None = None, options: Mapping[str, Any] | None = None) -> dict[str, str]:
        """What decides the rows of a call with this ``gate`` and ``options`` (gate, prompt version, model,
        engine): the values ``suffice judge`` records beside an output and an audit log beside each verdict."""
        ...


def require_judge(judge: object) -> JudgeProtocol:
    """``judge``, or a :class:`~suffice.exceptions.ConfigError` naming ``judge`` when it is not one."""
    if not isinstance(judge, JudgeProtocol):
        raise ConfigError(
            "judge",
            type(judge).__name__,
            "must be a judge (suffice.JudgeProtocol): a suffice.Judge, Client or AsyncClient",
        )
    return judge
