"""What a gate is: its options, a prompt, a constraint per chunk count, a parser, and everything else that
differs from gate to gate; the rest of suffice asks the gate rather than which gate it holds.  A gate is a
package registered under the entry-point group ``suffice.gates`` (:mod:`suffice.gates.registry`).
"""

from __future__ import annotations

import argparse
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suffice.exceptions import ConfigError
from suffice.grammars.constraint import Constraint
from suffice.grammars.decision import decision_marker
from suffice.grammars.routes import Routing
from suffice.prompts.fitting import FittedPrompt
from suffice.prompts.templates import PromptTemplate
from suffice.records import Chunk, Item, parse_record


class GateOptions(BaseModel):
    """A gate's own settings, as fields of a subclass: set by ``--gate-option KEY=VALUE`` (or ``--KEY``),
    ``JudgeConfig(options=...)`` and the HTTP request's ``options``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The options a client of ``suffice serve`` may set per request; the others are the server's own.
    per_request: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def parse(cls, gate: str, values: Mapping[str, Any]) -> Self:
        """The options from plain values; a :class:`ConfigError` names the option."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            error = exc.errors()[0]
            cause = (error.get("ctx") or {}).get("error")
            if not error["loc"] and isinstance(cause, ConfigError):
                raise cause from None  # a check across options names its own key
            key = str(error["loc"][0]) if error["loc"] else "gate_option"
            if error["type"] == "extra_forbidden":
                known = ", ".join(cls.model_fields) or "none"
                reason = f"the {gate} gate takes no such option (its options: {known})"
                raise ConfigError(key, values.get(key), reason) from None
            raise ConfigError(key, values.get(key), f"{error['msg']} (an option of the {gate} gate)") from exc


#: The default bound on a verdict's free-text reasoning, in characters, and the bounds of ``reasoning_chars``.
REASONING_CHARS = 200
REASONING_CHARS_RANGE = (1, 1000)


class ReasoningOptions(GateOptions):
    """The options of a gate whose verdict holds a free-text reasoning field: ``reasoning_chars``, its bound.

    On a GPU decode is most of a full verdict's cost and the reasoning the longest thing decoded (up to 3 bytes a
    character in the worst case the constraint allows), so a shorter bound makes every verdict cheaper; the
    constraint, the prompt and the verdict's validation use it.  ``--detail decision`` decodes no reasoning at all.
    """

    reasoning_chars: int = Field(
        default=REASONING_CHARS,
        ge=REASONING_CHARS_RANGE[0],
        le=REASONING_CHARS_RANGE[1],
        description=(
            f"characters the model's reasoning may take ({REASONING_CHARS_RANGE[0]}-{REASONING_CHARS_RANGE[1]}, "
            f"default {REASONING_CHARS}): fewer decode fewer tokens per verdict"
        ),
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


class Gate(ABC):
    name: str
    #: The typed options this gate takes (see :class:`GateOptions`).
    options_model: ClassVar[type[GateOptions]] = GateOptions
    template: PromptTemplate
    #: Post-generation gates check a generated answer given as ``response``.
    needs_response: bool = False
    #: The decision as a JSON key, its values as JSON texts, and the value that says "enough evidence".
    decision_key: str = ""
    decision_json_values: tuple[str, ...] = ()
    positive_value: str = ""
    #: Which calibration scores a threshold can be saved for (none: the gate is not calibrated).
    saveable_scores: tuple[str, ...] = ()
    #: The pydantic class of the verdicts ``parse`` and ``shortcut`` return (the Parquet schema's source).
    verdict_model: type[BaseModel]

    @classmethod
    def from_options(cls, options: GateOptions) -> Gate:
        """The gate its options describe (a gate without options is made with no arguments)."""
        return cls()

    @classmethod
    def add_commands(cls, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Subcommands of the gate's own for the ``suffice`` command (none by default)."""
        return None

    def check_detail(self, detail: str) -> None:
        """Raise :class:`ConfigError` if this gate cannot judge at ``detail`` (``full`` or ``decision``)."""
        return None

    def save_problem(self, destination: Path | None, report_dir: Path) -> str | None:
        """Why :meth:`save_calibration` could not save to ``destination`` (``None``: nothing known against it)."""
        return None

    def default_choice(self) -> tuple[str, str | None]:
        """The rule ``suffice calibrate --save`` picks a threshold by when ``--choose``
        is not given (``best-f1``, or ``f-beta`` for a gate whose false positives cost
        more, such as a high-stakes rubric), and why (``None``: the usual rule)."""
        return "best-f1", None

    def calibrated_under(self) -> Mapping[str, str] | None:
        """The engine settings this gate's calibrated threshold was fitted under (``None``: no threshold, or one
        saved before suffice recorded them)."""
        return None

    def save_calibration(self, choice: CalibrationChoice, destination: Path | None, report_dir: Path) -> str:
        """Save a calibrated threshold where this gate reads it and say what was written (``destination``:
        ``--save``'s value).  Raises :class:`ConfigError` naming ``save``."""
        raise ConfigError("save", str(destination), f"the {self.name} gate has no calibrated threshold to save")

    @property
    def decision_marker(self) -> str:
        """Where the decision starts in the generated text: ``"<key>":``."""
        return decision_marker(self.decision_key)

    @property
    def prompt_version(self) -> str:
        """The version string carried into every result."""
        return self.template.name

    def settings(self) -> dict[str, str]:
        """What, besides the model and engine, decides this gate's verdicts (recorded beside a batch output)."""
        return {"gate": self.name, "prompt_version": self.prompt_version}

    @abstractmethod
    def is_positive(self, verdict: BaseModel) -> bool:
        """Whether this gate's verdict says "enough evidence" (the decision that routes)."""

    def model_positive(self, verdict: BaseModel) -> bool | None:
        """The model's own decision beside the one that routes (:meth:`is_positive`): ``None`` when the gate
        has no separate one or the model did not decide.  Where the two differ, the code's decision overrode
        the model's (the override rate of the batch summary and of ``/metrics``)."""
        return None

    def high_stakes(self, item: Item) -> bool:
        """Whether ``item`` is judged under high stakes (a recovery threshold's ``high_stakes``, a HIGH-risk
        rubric): an abstention or a spent retrieval budget then goes to a person, not to the user alone."""
        return False

    @abstractmethod
    def route(self, verdict: BaseModel) -> Routing:
        """Where the verdict sends the item, by the decision that counts (the calibrated one, if any)."""

    @abstractmethod
    def calibration_scores(self, verdict: Mapping[str, Any]) -> dict[str, float | None]:
        """Every score an output row's verdict offers for calibration, by name (``decision``: the one that routes)."""

    def useful_chunk_ids(self, verdict: Mapping[str, Any]) -> list[Any] | None:
        """The chunk ids an output row's verdict names as useful; ``None`` when the gate names none."""
        return None

    def parse_item(self, record: object) -> Item:
        return parse_record(record, need_response=self.needs_response)

    def shortcut(self, item: Item) -> BaseModel | None:
        """A verdict decided without the model, or ``None`` to ask it."""
        return None

    @abstractmethod
    def constraint_for(self, shown: Sequence[Chunk]) -> Constraint:
        """The constraint for a prompt showing these chunks (``0..n-1``); it depends on counts only."""

    def item_constraint(self, item: Item, shown: Sequence[Chunk]) -> Constraint:
        """The constraint for ``item``'s prompt showing these chunks: :meth:`constraint_for`,
        unless a gate's constraint depends on the item too (adequacy: its rubric's dimensions)."""
        return self.constraint_for(shown)

    def system_context(self, item: Item) -> dict[str, Any]:
        """Instructions shared by many items (kept identical so the prefix cache hits)."""
        return {}

    def user_context(self, item: Item) -> dict[str, Any]:
        return {}

    def with_probabilities(self, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
        """The verdict with its decision probabilities filled in (default: unchanged)."""
        return verdict

    @abstractmethod
    def parse(self, text: str, fitted: FittedPrompt, item: Item) -> BaseModel:
        """Turn the model's text into a verdict; raise ``VerdictError`` if it fails."""

    def export(self, verdict: BaseModel, fmt: str) -> dict[str, Any]:
        """Deprecated, kept one release: the verdict formats hold this now (:func:`suffice.formats.verdicts.export`)."""
        warnings.warn(
            "Gate.export is deprecated: use suffice.formats.verdicts.export(gate, verdict, fmt)",
            DeprecationWarning,
            stacklevel=2,
        )
        from suffice.formats.verdicts import export

        return export(self, verdict, fmt)
