"""Who judges the batches of a run: this process's engine, or engines on Ray actors.

The runner (:mod:`suffice.batch.runner`) hands a scorer an iterator of batches and
writes what comes back; it never asks which scorer it has.  A scorer yields results
batch by batch in the order the batches came (so the output stays in input order),
and starts its engines only when the first batch arrives: a run with nothing left to
judge starts none.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

from suffice.audit.recording import weights_hash as audit_weights_hash
from suffice.config import JudgeConfig
from suffice.exceptions import EngineDeadError, EngineUnreachableError
from suffice.gates.base import Gate
from suffice.gates.roles import parse_item
from suffice.judge import Judge
from suffice.records.item import Item
from suffice.results import JudgeResult
from suffice.serving.base import Progress
from suffice.serving.weights import embedded_notice

#: Called with a message for the user (resuming, starting the engine, ...).
Notify = Callable[[str], None]


def _quiet(message: str) -> None:
    return None


#: What :meth:`Scorer.map` yields: one result list per batch.
Results = Iterator[list[JudgeResult]]
#: The row for a record found to stop the engine alone (see :meth:`Scorer.map`).
Crashed = Callable[[object], JudgeResult] | None


class Scorer(ABC):
    """Judges batches of records; one per run."""

    gate: Gate

    @abstractmethod
    def map(self, batches: Iterator[list[object]], progress: Progress | None, crashed: Crashed = None) -> Results:
        """One result list per batch, in the batches' order; ``progress`` as records
        finish.  ``crashed(record)`` is the row for a record found to stop the engine
        alone, where a scorer can find it on the same run (Ray); an in-process run
        finds it across reruns instead (:mod:`suffice.batch.suspects`)."""

    def implicated(self) -> int | None:
        """After ``map`` raised :class:`EngineDeadError`: the number (0-based, in the
        order ``map`` took them) of the one batch a running engine died with, or
        ``None`` when no batch is known to be the cause (the engine never started, a
        server went away, an actor died with several batches queued)."""
        return None

    def weights_hash(self) -> str | None:
        """The audit log's hash of the weights (after the first batch started the engine); ``None``: not known here."""
        return None

    def served(self) -> dict[str, str]:
        """What the engine says it serves once started (see :meth:`Engine.served`); the
        default is nothing (an engine that loads what its settings name)."""
        return {}

    def item_or_none(self, record: object) -> Item | None:
        """The record as this gate's item, or ``None`` if it is not one (for the audit log)."""
        try:
            return parse_item(self.gate, record)
        except Exception:
            return None

    def close(self) -> None:
        """Stop every engine this scorer started (a scorer that starts none has nothing to stop)."""
        return None


class LocalScorer(Scorer):
    """One engine in this process (its judge opened at the first batch)."""

    def __init__(
        self,
        config: JudgeConfig,
        gate: Gate,
        open_judge: Callable[[JudgeConfig], Judge] | None = None,
        notify: Notify = _quiet,
        describe: str = "",
    ) -> None:
        self.config = config
        self.gate = gate
        self._open = open_judge or Judge.open
        self._notify = notify
        self._describe = describe
        self.judge: Judge | None = None
        self._died_with: int | None = None

    def _judge(self) -> Judge:
        if self.judge is None:
            self._notify(f"starting the engine ({self._describe})" if self._describe else "starting the engine")
            self.judge = self._open(self.config)
            self.judge.review_queue = "the batch run"  # it queues in --audit-db, or says on stderr what went to nobody
            notice = embedded_notice(getattr(self.judge.engine, "model_id", None))
            if notice is not None:
                self._notify(notice)
            self.gate = self.judge.gate
        return self.judge

    def map(self, batches: Iterator[list[object]], progress: Progress | None, crashed: Crashed = None) -> Results:
        for number, batch in enumerate(batches):
            judge = self._judge()  # a failure to start implicates no batch
            try:
                results = judge.judge_batch(batch, progress=progress)
            except EngineUnreachableError:
                raise
            except EngineDeadError:
                self._died_with = number
                raise
            yield results

    def implicated(self) -> int | None:
        return self._died_with

    def served(self) -> dict[str, str]:
        return self._judge().engine.served()

    def weights_hash(self) -> str | None:
        return audit_weights_hash(getattr(self._judge().engine, "model_path", None))

    def close(self) -> None:
        if self.judge is not None:
            self.judge.close()
            self.judge = None
