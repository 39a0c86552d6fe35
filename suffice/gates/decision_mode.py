"""Any gate in decision-only mode (``--detail decision``).

The wrapped gate keeps its prompt (instructions, rubric, fitting) and says what its
decision is (``decision_key``, ``decision_json_values``, ``positive_value``); this
wrapper swaps the output for the decision alone.  A new gate gets the mode by
declaring those three attributes (the decision role of :mod:`suffice.gates.roles`); both wrappers read
the inner gate's declarations rather than copy them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from suffice.exceptions import ConfigError, VerdictError
from suffice.gates import roles
from suffice.gates.base import Gate
from suffice.grammars.constraint import Constraint
from suffice.grammars.decision_verdict import DecisionVerdict, decision_constraint, decision_format
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt
from suffice.records.item import Chunk, Item


class FromInner:
    """A declaration read from the wrapped gate (``self.inner``) each time it is asked for, never copied: a core
    declaration as the inner gate has it, the decision token as :func:`~suffice.gates.roles.decision_of` reads it
    (``None`` where it has none)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, gate: object, owner: type | None = None) -> Any:
        if gate is None:
            return None
        inner = gate.inner  # type: ignore[attr-defined]
        if self.name not in roles.TOKEN_NAMES:
            return getattr(inner, self.name)
        token = roles.decision_of(inner)
        return None if token is None else getattr(token, roles.TOKEN_NAMES[self.name])


class Wrapping(Gate):
    """A gate around another (``inner``): every declaration of the core but the class-wide ones (its name,
    template, needs, verdict model) and its decision token are the inner gate's, read through :class:`FromInner`,
    and so is how a record is read."""

    def __init__(self, inner: Gate) -> None:
        self.inner = inner

    def parse_item(self, record: object) -> Item:
        return roles.parse_item(self.inner, record)

    def user_context(self, item: Item) -> dict[str, Any]:
        return self.inner.user_context(item)


#: What a wrapper reads from the gate it wraps, derived from the core's declarations (a ``ClassVar`` is the
#: class's own: its options and output model) and the decision role's.
FROM_INNER = (
    *(name for name, hint in Gate.__annotations__.items() if not str(hint).startswith("ClassVar")),
    *roles.TOKEN_NAMES,
)
for _name in FROM_INNER:
    _from_inner = FromInner()
    _from_inner.__set_name__(Wrapping, _name)
    setattr(Wrapping, _name, _from_inner)


class DecisionGate(Wrapping):
    verdict_model = DecisionVerdict

    def __init__(self, inner: Gate) -> None:
        super().__init__(inner)
        token = roles.decision_of(inner)
        if token is None:
            raise ConfigError("detail", "decision", f"the {inner.name} gate declares no decision_key to decide by")
        self.token = token
        self._constraint = decision_constraint(token.key, token.values)

    @property
    def prompt_version(self) -> str:
        return f"{self.template.name}/decision"

    @property
    def decision_delivers(self) -> bool:
        """Whether a positive decision may deliver: only where the inner gate's rule is its decision alone."""
        return roles.decision_delivers(self.inner)

    def settings(self) -> dict[str, str]:
        return {**self.inner.settings(), "prompt_version": self.prompt_version, "detail": "decision"}

    def shortcut(self, item: Item) -> DecisionVerdict | None:
        verdict = roles.shortcut(self.inner, item)
        if verdict is None:
            return None
        positive = self.inner.is_positive(verdict)
        return DecisionVerdict(
            decision=self.token.positive if positive else self._negative(),
            positive=positive,
            probability=1.0 if positive else 0.0,
            prompt_version=self.prompt_version,
            model_called=False,
            high_stakes=roles.high_stakes(self.inner, item),
        )

    def _negative(self) -> str:
        return next(v for v in self.token.values if v != self.token.positive)

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return self._constraint

    def system_context(self, item: Item) -> dict[str, Any]:
        return {
            **self.inner.system_context(item),
            "detail": "decision",
            "decision_format": decision_format(self.token.key, self.token.values),
        }

    def is_positive(self, verdict: BaseModel) -> bool:
        return isinstance(verdict, DecisionVerdict) and verdict.positive

    def route(self, verdict: BaseModel) -> Routing:
        """A bare decision.  Positive delivers only where the inner gate's rule is the decision alone
        (:attr:`decision_delivers`); elsewhere :meth:`Routing.deliver` sends it to a person (rule
        ``decision_only``), as the seeds' rules read more than the decision.  Negative asks for more evidence (no
        gap or query in this mode), except under high stakes, where the full verdict might have sent it to a
        person: there it goes to one (rule ``decision_only_high_stakes``)."""
        if not isinstance(verdict, DecisionVerdict):
            raise TypeError(f"decision-only mode cannot route a {type(verdict).__name__}")
        scores = {"probability": verdict.probability}
        reason = f"decision {verdict.decision}" + (
            "" if verdict.probability is None else f" with probability {verdict.probability:.3f}"
        )
        if verdict.positive:
            return Routing.deliver(self, verdict, reason, scores=scores)
        if verdict.high_stakes and verdict.model_called:  # a shortcut's outcome is known: nothing to retrieve from
            why = f"{reason} under high stakes: only the full verdict says whether a person must see it"
            return Routing("human_review", why, scores=scores, rule="decision_only_high_stakes")
        return Routing("retrieve_more", reason, scores=scores)

    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        return {"probability": verdict.get("probability"), "decision": float(bool(verdict["positive"]))}

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        if probabilities is None:
            return verdict
        return verdict.model_copy(
            update={"probabilities": probabilities, "probability": probabilities[self.token.positive]}
        )

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> DecisionVerdict:
        if not self._constraint.matches(text):
            raise VerdictError("output is not a decision in the required form", text)
        value = json.dumps(json.loads(text)[self.token.key])
        return DecisionVerdict(
            decision=value,
            positive=value == self.token.positive,
            prompt_version=self.prompt_version,
            truncated_chunk_ids=fitted.truncated_chunk_ids,
            omitted_chunk_ids=fitted.omitted_chunk_ids,
            question_truncated=fitted.question_truncated,
            response_truncated=fitted.response_truncated,
            high_stakes=roles.high_stakes(self.inner, item),
        )

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's decision is the one that routes: none separate from it."""
        return None


#: The decision probability a decision-only verdict delivers above: with two values, the positive one is decided
#: when its probability passes one half (the margin of ``detail="auto"`` is measured from here).
DECISION_THRESHOLD = 0.5


class AutoGate(Wrapping):
    """Any gate at ``detail="auto"`` (the cascade): :class:`~suffice.judge.Judge` decides every record with
    :attr:`decision` and judges again with :attr:`inner` (a full verdict) those its :meth:`escalate` picks.  A
    row holds either kind of verdict, so everything asked of a verdict goes to the gate whose verdict it is."""

    def __init__(self, inner: Gate) -> None:
        super().__init__(inner)
        self.decision = DecisionGate(inner)

    @property
    def prompt_version(self) -> str:
        return self.inner.prompt_version

    def settings(self) -> dict[str, str]:
        return {**self.inner.settings(), "detail": "auto"}

    def _of(self, verdict: BaseModel) -> Gate:
        return self.decision if isinstance(verdict, DecisionVerdict) else self.inner

    def _of_row(self, verdict: Mapping[str, Any]) -> Gate:
        return self.decision if verdict.get("detail") == "decision" else self.inner

    def shortcut(self, item: Item) -> BaseModel | None:
        return roles.shortcut(self.inner, item)

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        return self.inner.constraint_for(shown)

    def item_constraint(self, item: Item, shown: Sequence[Chunk]) -> Constraint:
        return roles.item_constraint(self.inner, item, shown)

    def system_context(self, item: Item) -> dict[str, Any]:
        return self.inner.system_context(item)

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> BaseModel:
        return self.inner.parse(text, fitted, item)

    def is_positive(self, verdict: BaseModel) -> bool:
        return self._of(verdict).is_positive(verdict)

    def model_positive(self, verdict: BaseModel) -> bool | None:
        return roles.model_positive(self._of(verdict), verdict)

    def high_stakes(self, item: Item) -> bool:
        return roles.high_stakes(self.inner, item)

    def route(self, verdict: BaseModel) -> Routing:
        return self._of(verdict).route(verdict)

    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        return roles.calibration_scores(self._of_row(verdict), verdict)

    def useful_chunk_ids(self, verdict: Mapping[str, Any]) -> list[Any] | None:
        return roles.useful_chunk_ids(self._of_row(verdict), verdict)

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        return roles.with_probabilities(self._of(verdict), verdict, probabilities)

    def escalate(self, verdict: DecisionVerdict, margin: float) -> str | None:
        """Why ``verdict`` (the decision pass's) gets a full verdict, or ``None`` when the decision stands: a
        decision that does not deliver (named by the rule that stopped it, such as ``decision_only`` for a positive
        decision of a gate whose rule reads the full verdict: every record ``auto`` would deliver is then judged
        in full), one without a probability to measure, or one within ``margin`` of :data:`DECISION_THRESHOLD`."""
        routing = self.decision.route(verdict)
        if routing.route != "deliver":
            return routing.rule or "not deliver"
        if verdict.probability is None:
            return "no probability"
        if abs(verdict.probability - DECISION_THRESHOLD) <= margin:
            return "within margin"
        return None


class VerdictReader(AutoGate):
    """A gate that reads a verdict of any detail (a decision-only one by the decision's rule, a full one by the
    gate's): what a :class:`~suffice.Client` routes a service's verdicts with, not knowing the detail the service
    judges at.  Its settings are the gate's own: it judges nothing."""

    def settings(self) -> dict[str, str]:
        return self.inner.settings()
