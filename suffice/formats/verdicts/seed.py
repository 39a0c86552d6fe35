"""``seed`` and ``ragflow``: the verdict in the seed prompt's own output schema (RAGFlow's, for sufficiency), with
what fitting the prompt cut and the decision computed in code beside it.

A gate offers this shape by having the methods of :class:`SeedVerdicts` (a role, not a base-class method: a gate
without them is refused ``--format seed`` by name).  A decision-only verdict has its own seed shape, so every gate
judged at ``--detail decision`` offers it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from suffice.formats.verdicts import RowShape
from suffice.gates.base import Gate
from suffice.grammars.decision_verdict import DecisionVerdict


@runtime_checkable
class SeedVerdicts(Protocol):
    """The role of a gate whose verdicts have a seed shape."""

    def seed_verdict(self, verdict: BaseModel) -> dict[str, Any]:
        """The verdict in the seed prompt's own output schema."""


class Fitting(BaseModel):
    """What fitting the prompt into the window cut, beside a verdict in the seed's shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_version: str
    truncated_chunk_ids: list[int | str]
    omitted_chunk_ids: list[int | str]
    question_truncated: bool


_FITTING = {"truncated_chunk_ids", "omitted_chunk_ids", "question_truncated", "prompt_version"}


def _offers(gate: Gate | type[Gate]) -> bool:
    """Whether every verdict ``gate`` gives has a seed shape: a decision-only gate's always do; a wrapper (the
    decision-only mode, the cascade) holds the gate whose full verdicts it gives as ``inner``."""
    if getattr(gate, "verdict_model", None) is DecisionVerdict:
        return True
    return isinstance(getattr(gate, "inner", gate), SeedVerdicts)


class SeedFormat:
    shape = "Seed"
    typed = False

    def __init__(self, name: str, help: str) -> None:
        self.name = name
        self.help = help

    def refuses(self, gate: Gate | type[Gate]) -> str | None:
        if _offers(gate):
            return None
        return f"the {gate.name} gate's verdicts have no seed shape (it has no seed_verdict)"

    def fields(self, gate: Gate, verdict: BaseModel) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        if isinstance(verdict, DecisionVerdict):
            seed = dict(verdict.to_seed())
        else:
            owner: Any = getattr(gate, "inner", gate)
            if not isinstance(owner, SeedVerdicts):
                raise TypeError(self.refuses(gate))
            seed = owner.seed_verdict(verdict)
            # Keys of the gate's own beside the seed's shape (a decision the constraint forced, lists at their
            # bound); its ``fitting`` keys join the row's.
            beside = getattr(owner, "seed_extras", None)
            extras = beside(verdict) if callable(beside) else {}
        row: dict[str, Any] = {"verdict": seed, "fitting": verdict.model_dump(mode="json", include=_FITTING)}
        decision = getattr(verdict, "decision", None)
        if isinstance(decision, BaseModel):
            row["decision"] = decision.model_dump(mode="json")
        row["fitting"].update(extras.get("fitting", {}))
        row.update((key, value) for key, value in extras.items() if key != "fitting")
        return row

    def row(self, verdicts: tuple[type[BaseModel], ...]) -> RowShape:
        extra = {
            "fitting": (Fitting, Field(description="what fitting the prompt cut")),
            "decision": (
                dict[str, Any] | None,
                Field(default=None, description="the decision computed in code, where the gate computes one"),
            ),
        }
        # A gate may add keys of its own beside the seed's shape: the row is open.
        return RowShape(dict[str, Any], "the verdict in the seed prompt's own output schema", extra, open=True)


SEED = SeedFormat("seed", "the seed prompt's own output schema")
RAGFLOW = SeedFormat("ragflow", "the seed's shape, as RAGFlow's sufficiency check writes it (the same as seed)")
