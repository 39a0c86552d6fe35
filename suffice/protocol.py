"""The one shape of a judge: what the in-process :class:`~suffice.Judge`, the service's :class:`~suffice.Client`
and :class:`~suffice.AsyncClient`, and the Ray pool :class:`suffice.batch.RayJudge` all are.

Code written against :class:`JudgeProtocol` (the integrations, the :class:`~suffice.Pipeline`, the batch runner's
``judge_file(judge=...)``) runs on any of them: swapping the in-process judge for the service, or for a pool of
Ray actors, is swapping one object.  Each call returns one
:class:`~suffice.results.JudgeResult` per record, in order, with a record's
failure as its ``error``; a call that cannot be answered at all raises a
:class:`~suffice.exceptions.SufficeError` (a :class:`~suffice.exceptions.ServiceError` from a client, an
:class:`~suffice.exceptions.EngineError` from an engine).  The same mistake in a call raises the same error from
each kind, naming the same field: a gate or an option refused is a :class:`~suffice.exceptions.ConfigError` (an
unknown rubric a :class:`~suffice.exceptions.RubricError`), through a service too (tests/test_judge_errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from suffice.exceptions import ConfigError
from suffice.gates.base import Gate
from suffice.results import JudgeResult


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
