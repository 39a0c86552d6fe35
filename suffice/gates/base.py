"""What a gate is: its options, a prompt, a constraint per chunk count, a parser, and everything else that
differs from gate to gate; the rest of suffice asks the gate rather than which gate it holds.  A gate is a
package registered under the entry-point group ``suffice.gates`` (:mod:`suffice.gates.registry`).
"""

from __future__ import annotations

import json
from abc import ABC
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, Field, ValidationError

from suffice.exceptions import ConfigError, VerdictError
from suffice.grammars.constraint import Constraint
from suffice.grammars.from_model import model_rx
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt
from suffice.prompts.templates import PromptTemplate
from suffice.records.item import Chunk, Item
from suffice.settings import check, declared, setting


@dataclass(frozen=True)
class GateOptions:
    """A gate's own settings, each a :func:`~suffice.settings.setting` field of a frozen dataclass subclass (tagged
    ``per_request`` where a client of ``suffice serve`` may set it): set by ``--KEY`` (or ``--gate-option
    KEY=VALUE``), ``JudgeConfig(options=...)`` and the HTTP request's ``options``.  A check across options goes in
    the subclass's ``__post_init__`` (after this one's)."""

    def __post_init__(self) -> None:
        check(self)

    @classmethod
    def parse(cls, gate: str, values: Mapping[str, Any]) -> Self:
        """The options from plain values (text read as its setting's type); a :class:`ConfigError` names the
        option."""
        known = {d.name: d for d in declared(cls)}
        for key, value in values.items():
            if key not in known:
                reason = f"the {gate} gate takes no such option (its options: {', '.join(known) or 'none'})"
                raise ConfigError(key, value, reason)
        return cls(**{key: known[key].parsed(value) for key, value in values.items()})

    def recorded(self) -> dict[str, str]:
        """Every option set to other than its default, as text, by name: what a resume must match (any option may
        change a verdict; a gate records its own form of one where two spellings mean the same)."""
        return {
            d.name: json.dumps(value) if isinstance(value, bool) else str(value)
            for d in declared(type(self))
            if not d.is_default(value := getattr(self, d.name))
        }


#: The default bound on a verdict's free-text reasoning, in characters, and the bounds of ``reasoning_chars``.
REASONING_CHARS = 200
REASONING_CHARS_RANGE = (1, 1000)


@dataclass(frozen=True)
class ReasoningOptions(GateOptions):
    """The options of a gate whose verdict holds a free-text reasoning field: ``reasoning_chars``, its bound.

    On a GPU decode is most of a full verdict's cost and the reasoning the longest thing decoded (up to 3 bytes a
    character in the worst case the constraint allows), so a shorter bound makes every verdict cheaper; the
    constraint, the prompt and the verdict's validation use it.  ``--detail decision`` decodes no reasoning at all.
    """

    reasoning_chars: int = setting(
        REASONING_CHARS,
        "characters the model's reasoning may take: fewer decode fewer tokens per verdict",
        minimum=REASONING_CHARS_RANGE[0],
        maximum=REASONING_CHARS_RANGE[1],
    )


@dataclass(frozen=True)
class CalibrationChoice:
    """A threshold ``suffice calibrate`` chose: on which score, with its metrics."""

    score: str
    threshold: float
    metrics: Mapping[str, Any]
    golden: Path
    #: The engine settings the scores were computed under (see :func:`fitted_under`).
    fitted_under: Mapping[str, str] = field(default_factory=dict)


#: The engine settings a calibrated threshold depends on: the weights, the engine, the backend and the dtype
#: (a bfloat16 run moves decision-only probabilities by up to 0.024 against float32, measured 2026-12-03).
FITTED_UNDER_KEYS = ("model", "weights", "engine", "backend", "dtype")


def fitted_under(engine_settings: Mapping[str, str]) -> dict[str, str]:
    """The part of an engine's recorded settings that a threshold fitted on its scores depends on.  A vLLM engine
    leaves float32 unrecorded (older outputs resume), so a missing dtype reads as float32 here."""
    picked = {key: engine_settings[key] for key in FITTED_UNDER_KEYS if key in engine_settings}
    picked.setdefault("dtype", "float32")
    return picked


def fitted_mismatch(fitted: Mapping[str, str], engine_settings: Mapping[str, str]) -> str | None:
    """Why a threshold fitted under ``fitted`` may not hold on an engine recording ``engine_settings`` (each
    differing setting named with both values), or ``None`` when they agree or nothing was recorded."""
    now = fitted_under(engine_settings)
    differ = [
        f"{key} {fitted[key]!r} (now {now.get(key, 'unknown')!r})" for key in fitted if now.get(key) != fitted[key]
    ]
    if not differ:
        return None
    return "the calibrated threshold was fitted under " + ", ".join(differ)


class Verdict(BaseModel):
    """What every verdict holds, for a gate's ``verdict_model`` to extend with its own fields: the decision that
    routes (``passes``, computed in code), its probability and what fitting the prompt cut.  suffice fills all but
    ``passes`` (the default ``parse``, a shortcut, the decision probability): a gate computes only its own."""

    #: Whether the verdict says "enough evidence": what the default :meth:`Gate.route` delivers on.
    passes: bool
    prompt_version: str = ""
    #: P(the positive decision) from the engine's token log-probabilities (a gate with a decision token).
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    truncated_chunk_ids: list[int | str] = Field(default_factory=list)
    omitted_chunk_ids: list[int | str] = Field(default_factory=list)
    question_truncated: bool = False
    #: Whether the response was cut to fit (a gate that checks one): such a verdict never delivers.
    response_truncated: bool = False
    model_called: bool = True


#: The annotations of the fields a :class:`Verdict`'s default route reports as scores.
_NUMBER = (float, float | None)


class Gate(ABC):
    """A gate's core: its options, its template, a constraint, a parser and a route.

    A gate declaring ``output_model`` (a pydantic class of the JSON the model writes, see
    :mod:`suffice.grammars.from_model`) and ``from_output(output, item, chunk_ids)`` (its :class:`Verdict` computed
    from that output) gets :meth:`constraint_for` and :meth:`parse` derived from them, and a :class:`Verdict`
    routes by its ``passes`` unless the gate writes :meth:`route`.  Everything else a gate may do is a role it
    takes by defining the role's names, found by :mod:`suffice.gates.roles` (which also holds each role's
    default): a decision token (``decision_key``, ``decision_json_values``, ``positive_value``) for ``--detail
    decision``, its own reading of records, a calibrated threshold, commands of its own.
    """

    name: str
    #: The typed options this gate takes (see :class:`GateOptions`).
    options_model: ClassVar[type[GateOptions]] = GateOptions
    template: PromptTemplate
    #: Post-generation gates check a generated answer given as ``response``.
    needs_response: bool = False
    #: The pydantic class of the verdicts ``parse`` and ``shortcut`` return (the Parquet schema's source).
    verdict_model: type[BaseModel]
    #: The pydantic class of the JSON the model writes, when the constraint and the parse are derived from it.
    output_model: ClassVar[type[BaseModel] | None] = None

    @classmethod
    def from_options(cls, options: GateOptions) -> Gate:
        """The gate its options describe (made by :meth:`build`), the options kept as :attr:`options` so that
        :meth:`settings` records them: every way a gate is made from options goes through here."""
        gate = cls.build(options)
        gate.options = options
        return gate

    @classmethod
    def build(cls, options: GateOptions) -> Gate:
        """The gate made from ``options``; by default with no arguments (it reads :attr:`options`)."""
        return cls()

    @property
    def options(self) -> GateOptions:
        """The options the gate was made from (by :meth:`from_options`; else the defaults)."""
        chosen = self.__dict__.get("_options")
        return chosen if isinstance(chosen, GateOptions) else self.options_model()

    @options.setter
    def options(self, options: GateOptions) -> None:
        self.__dict__["_options"] = options

    @property
    def prompt_version(self) -> str:
        """The version string carried into every result."""
        return self.template.name

    def settings(self) -> dict[str, str]:
        """What, besides the model and engine, decides this gate's verdicts (recorded beside a batch output):
        its name, prompt version and every option it was made from set to other than its default."""
        return {"gate": self.name, "prompt_version": self.prompt_version, **self.options.recorded()}

    def system_context(self, item: Item) -> dict[str, Any]:
        """What the template's system part is rendered with: instructions shared by many items (kept identical so
        the prefix cache hits)."""
        return {}

    def user_context(self, item: Item) -> dict[str, Any]:
        """What the template's user part is rendered with, besides the item and the chunks shown."""
        return {}

    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        """The constraint for a prompt showing these chunks (``0..n-1``); it depends on counts only.  By default
        the JSON :attr:`output_model` describes, with its :data:`~suffice.grammars.from_model.ChunkLabel` fields
        among the labels shown."""
        return Constraint.from_rx(
            model_rx(_output_model(self, "constraint_for"), len(shown)), f"{self.name}/{len(shown)}"
        )

    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> BaseModel:
        """Turn the model's text into a verdict; raise ``VerdictError`` if it fails.  By default: the text must
        be in the prompt's constraint and read as :attr:`output_model`; the gate's ``from_output`` computes the
        verdict, and a :class:`Verdict`'s prompt version and fitting are filled in."""
        model = _output_model(self, "parse")
        if not fitted.constraint.matches(text):
            raise VerdictError(f"output is not a {self.name} verdict in the form its constraint allows", text)
        try:
            output = model.model_validate_json(text)
        except ValidationError as exc:
            raise VerdictError(f"output is not a valid {model.__name__}: {exc}", text) from exc
        verdict: BaseModel = self.from_output(output, item, fitted.chunk_ids)  # type: ignore[attr-defined]
        if not isinstance(verdict, Verdict):
            return verdict
        cut = {
            k: getattr(fitted, k)
            for k in ("truncated_chunk_ids", "omitted_chunk_ids", "question_truncated", "response_truncated")
        }
        return verdict.model_copy(update={"prompt_version": self.prompt_version, **cut})

    def route(self, verdict: BaseModel) -> Routing:
        """Where the verdict sends the item, by the decision that counts (the calibrated one, if any).  By default
        a :class:`Verdict` delivers when it ``passes``; else a gate checking a response abstains and one judging
        evidence asks for more; its scores are its numbers."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"the {self.name} gate routes no {type(verdict).__name__}: define route")
        numbers = (k for k, info in type(verdict).model_fields.items() if info.annotation in _NUMBER)
        scores = {k: getattr(verdict, k) for k in numbers}
        said = ", ".join(f"{k} {v:.2f}" for k, v in scores.items() if v is not None)
        reason = ("passes" if verdict.passes else "does not pass") + (f" ({said})" if said else "")
        if verdict.passes:
            return Routing.deliver(self, verdict, reason, scores=scores)
        return Routing("abstain" if self.needs_response else "retrieve_more", reason, scores=scores)

    def is_positive(self, verdict: BaseModel) -> bool:
        """Whether the verdict says "enough evidence" (the decision that routes): by default, whether
        :meth:`route` delivers it."""
        return self.route(verdict).route == "deliver"


def _output_model(gate: Gate, needed_by: str) -> type[BaseModel]:
    if gate.output_model is None:
        raise TypeError(f"the {gate.name} gate declares no output_model to derive {needed_by} from: define it")
    return gate.output_model
