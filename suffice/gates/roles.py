"""What a gate may do beyond its core, each a role it takes by defining the role's names.

The core (:class:`~suffice.gates.base.Gate`) is a gate's options, template, constraint, parse and route.  A
role is found by what the gate defines, never by what :class:`Gate` defines for it: a gate without a role gets
the default written here, in the function the rest of suffice calls (``shortcut(gate, item)``, not
``gate.shortcut(item)``).  :data:`ROLES` names each role's names for :func:`takes`: a gate takes a role by
defining any of them.

- **decision**: the decision as one JSON key and its values, so ``--detail decision`` and ``auto`` can decode it
  alone and its probability be read from the token log-probabilities.
- **input**: how a record becomes an item, a verdict without the model, a constraint that depends on the item,
  whether an item is high-stakes.
- **calibration**: the scores ``suffice calibrate`` measures, the threshold it may save and where.  A gate naming
  ``threshold_option`` (the option the threshold sets) gets saving for free.
- **commands**: subcommands of the gate's own.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import BaseModel

from suffice.exceptions import ConfigError
from suffice.files import replace_atomically
from suffice.gates.base import CalibrationChoice, Gate, Verdict
from suffice.grammars.decision_verdict import decision_marker as marker_of
from suffice.records.fields import FieldMap
from suffice.records.item import Chunk, Item, parse_record

if TYPE_CHECKING:
    from suffice.grammars.constraint import Constraint


#: Each role's names: a gate takes a role by defining any of them (the rest keep their defaults).
ROLES: dict[str, tuple[str, ...]] = {
    "decision": (
        "decision_key",
        "decision_json_values",
        "positive_value",
        "decision_delivers",
        "with_probabilities",
        "model_positive",
        "check_detail",
    ),
    "input": ("parse_item", "shortcut", "item_constraint", "high_stakes"),
    "calibration": (
        "saveable_scores",
        "threshold_option",
        "calibration_scores",
        "useful_chunk_ids",
        "save_problem",
        "save_calibration",
        "default_choice",
        "calibrated_under",
    ),
    "commands": ("add_commands",),
}


def takes(gate: object, role: str) -> bool:
    """Whether ``gate`` (or a gate class) defines any name of ``role`` (a key of :data:`ROLES`)."""
    return any(getattr(gate, name, None) is not None for name in ROLES[role])


def _call(gate: Any, name: str, *args: Any) -> Any:
    mine = getattr(gate, name, None)
    return _DEFAULTS[name](gate, *args) if mine is None else mine(*args)


# -- the defaults, for a gate without the role (each takes the gate first) -------------------------------------


def _no_detail_but_full(gate: Gate, detail: str) -> None:
    if detail != "full" and decision_of(gate) is None:
        raise ConfigError("detail", detail, f"the {gate.name} gate declares no decision_key to decide by alone")


def _no_windows(gate: Gate, item: Item, shown: Sequence[Chunk], window: tuple[int, int]) -> Constraint:
    raise TypeError(f"the {gate.name} gate judges no response in windows: define window_constraint")


def _scores_from_route(gate: Gate, verdict: Mapping[str, Any]) -> dict[str, float | None]:
    parsed = gate.verdict_model.model_validate(dict(verdict))
    return {**gate.route(parsed).scores, "decision": float(gate.is_positive(parsed))}


def _save_problem(gate: Gate, destination: Path | None, report_dir: Path) -> str | None:
    option = getattr(gate, "threshold_option", None)
    if option and (destination is None or destination.is_dir()):
        return f"the {gate.name} gate saves {option} to a JSON file: name it (--save PATH)"
    return None


def _save_option(gate: Gate, choice: CalibrationChoice, destination: Path | None, report_dir: Path) -> str:
    option = getattr(gate, "threshold_option", None)
    problem = save_problem(gate, destination, report_dir)
    if not option or problem is not None or destination is None:
        reason = problem or f"the {gate.name} gate has no calibrated threshold to save"
        raise ConfigError("save", str(destination), reason)
    saved = {
        option: choice.threshold,
        "score": choice.score,
        "calibrated_on": str(choice.golden),
        "metrics": dict(choice.metrics),
        "fitted_under": dict(choice.fitted_under),
    }
    replace_atomically(destination, [(json.dumps(saved, indent=2) + "\n").encode("utf-8")])
    flag = "--" + option.replace("_", "-")
    return f"saved {option} {choice.threshold:.3f} to {destination}; judge with {flag} {choice.threshold:.3f}"


def _probability(gate: Gate, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
    token = decision_of(gate)
    if probabilities is None or token is None or not isinstance(verdict, Verdict):
        return verdict
    return verdict.model_copy(update={"probability": probabilities.get(token.positive)})


_DEFAULTS: dict[str, Any] = {
    "check_detail": _no_detail_but_full,
    "with_probabilities": _probability,
    "model_positive": lambda gate, verdict: None,
    "parse_item": lambda gate, record: parse_record(record, need_response=gate.needs_response),
    "shortcut": lambda gate, item: None,
    "item_constraint": lambda gate, item, shown: gate.constraint_for(shown),
    "response_segments": lambda gate, item: None,
    "window_constraint": _no_windows,
    "high_stakes": lambda gate, item: False,
    "calibration_scores": _scores_from_route,
    "useful_chunk_ids": lambda gate, verdict: None,
    "save_problem": _save_problem,
    "save_calibration": _save_option,
    "default_choice": lambda gate: ("best-f1", None),
    "calibrated_under": lambda gate: None,
    "add_commands": lambda gate, sub: None,
}


# -- decision ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A gate's decision token: its JSON key, the values as JSON texts, the one that says "enough evidence"."""

    key: str
    values: tuple[str, ...]
    positive: str

    @property
    def marker(self) -> str:
        """Where the decision starts in the generated text: ``"<key>":``."""
        return marker_of(self.key)


#: The decision role's declarations, each with the :class:`Decision` attribute it becomes.
TOKEN_NAMES = {"decision_key": "key", "decision_json_values": "values", "positive_value": "positive"}


def decision_of(gate: object) -> Decision | None:
    """``gate``'s decision token (a gate or a gate class), or ``None`` when it declares none.  Without
    ``decision_json_values``, the values are those of the ``Literal`` field ``decision_key`` names in the gate's
    ``output_model``."""
    key = getattr(gate, "decision_key", None)
    if not key:
        return None
    values = getattr(gate, "decision_json_values", None) or _literal_values(getattr(gate, "output_model", None), key)
    return Decision(key, tuple(values), getattr(gate, "positive_value", None) or "")


def _literal_values(model: type[BaseModel] | None, key: str) -> tuple[str, ...]:
    field = None if model is None else model.model_fields.get(key)
    if field is None or get_origin(field.annotation) is not Literal:
        return ()
    return tuple(json.dumps(value) for value in get_args(field.annotation))


def decision_delivers(gate: object) -> bool:
    """Whether ``gate``'s decision token alone decides its rule, so that a decision-only verdict may deliver
    (default: no: the rule reads more of the full verdict than its decision, and a positive decision-only verdict
    goes to the full verdict under ``auto``, to a person under ``decision``)."""
    return bool(getattr(gate, "decision_delivers", False))


def check_detail(gate: Gate, detail: str) -> None:
    """Raise :class:`ConfigError` if ``gate`` cannot judge at ``detail`` (``full`` or ``decision``): its own rule,
    or by default only ``full`` for a gate without a decision token."""
    _call(gate, "check_detail", detail)
    if getattr(gate, "check_detail", None) is not None:
        _no_detail_but_full(gate, detail)


def with_probabilities(gate: Gate, verdict: BaseModel, probabilities: dict[str, float] | None) -> BaseModel:
    """The verdict with its decision probabilities filled in (default: a :class:`~suffice.gates.base.Verdict`'s
    ``probability`` is the positive value's; another verdict unchanged)."""
    return _call(gate, "with_probabilities", verdict, probabilities)  # type: ignore[no-any-return]


def model_positive(gate: Gate, verdict: BaseModel) -> bool | None:
    """The model's own decision beside the one that routes (:meth:`Gate.is_positive`): ``None`` when the gate
    has no separate one or the model did not decide.  Where the two differ, the code's decision overrode the
    model's (the override rate of the batch summary and of ``/metrics``)."""
    return _call(gate, "model_positive", verdict)  # type: ignore[no-any-return]


# -- input ---------------------------------------------------------------------------------------------------


#: How every judge reads a record, whatever brought it (Python, a file, a request): RAGAS names and strings as
#: chunks are read as suffice's own; no other renaming (a file's ``--field`` mapping is applied before).
_AS_READ = FieldMap()


def parse_item(gate: Gate, record: object) -> Item:
    """``record`` as the item ``gate`` judges (default: every field checked, ``response`` if the gate needs it)."""
    return _call(gate, "parse_item", _AS_READ.apply(record, None))  # type: ignore[no-any-return]


def shortcut(gate: Gate, item: Item) -> BaseModel | None:
    """A verdict decided without the model, or ``None`` to ask it (the default); a
    :class:`~suffice.gates.base.Verdict` gets its prompt version and ``model_called=False`` filled in."""
    verdict = _call(gate, "shortcut", item)
    if isinstance(verdict, Verdict):
        return verdict.model_copy(update={"prompt_version": gate.prompt_version, "model_called": False})
    return verdict  # type: ignore[no-any-return]


def item_constraint(
    gate: Gate, item: Item, shown: Sequence[Chunk], window: tuple[int, int] | None = None
) -> Constraint:
    """The constraint for ``item``'s prompt showing these chunks: the gate's ``constraint_for``, unless its
    constraint depends on the item too (adequacy: its rubric's dimensions); for a window of the response's segments
    (``(first, count)``), the gate's ``window_constraint``."""
    if window is not None:
        return _call(gate, "window_constraint", item, shown, window)  # type: ignore[no-any-return]
    return _call(gate, "item_constraint", item, shown)  # type: ignore[no-any-return]


def response_segments(gate: Gate, item: Item) -> Sequence[Any] | None:
    """The segments ``item``'s response is judged in, for a gate that judges it segment by segment; else ``None``."""
    return _call(gate, "response_segments", item)  # type: ignore[no-any-return]


def high_stakes(gate: Gate, item: Item) -> bool:
    """Whether ``item`` is judged under high stakes (a recovery threshold's ``high_stakes``, a HIGH-risk rubric):
    an abstention or a spent retrieval budget then goes to a person, not to the user alone (default: no)."""
    return bool(_call(gate, "high_stakes", item))


# -- calibration ---------------------------------------------------------------------------------------------


def saveable_scores(gate: Gate) -> tuple[str, ...]:
    """Which calibration scores a threshold can be saved for (none: the gate is not calibrated)."""
    return tuple(getattr(gate, "saveable_scores", None) or ())


def calibration_scores(gate: Gate, verdict: Mapping[str, Any]) -> dict[str, float | None]:
    """Every score an output row's verdict offers for calibration, by name (``decision``: the one that routes).
    By default the scores the gate's :meth:`~Gate.route` names, and the routed decision as ``decision``."""
    return _call(gate, "calibration_scores", verdict)  # type: ignore[no-any-return]


def useful_chunk_ids(gate: Gate, verdict: Mapping[str, Any]) -> list[Any] | None:
    """The chunk ids an output row's verdict names as useful; ``None`` (the default) when the gate names none."""
    return _call(gate, "useful_chunk_ids", verdict)  # type: ignore[no-any-return]


def default_choice(gate: Gate) -> tuple[str, str | None]:
    """The rule ``suffice calibrate --save`` picks a threshold by when ``--choose`` is not given (``best-f1``, or
    ``f-beta`` for a gate whose false positives cost more, such as a high-stakes rubric), and why (``None``: the
    usual rule)."""
    return _call(gate, "default_choice")  # type: ignore[no-any-return]


def calibrated_under(gate: Gate) -> Mapping[str, str] | None:
    """The engine settings the gate's calibrated threshold was fitted under (``None``: no threshold, or one saved
    before suffice recorded them)."""
    return _call(gate, "calibrated_under")  # type: ignore[no-any-return]


def save_problem(gate: Gate, destination: Path | None, report_dir: Path) -> str | None:
    """Why :func:`save_calibration` could not save to ``destination`` (``None``: nothing known against it)."""
    return _call(gate, "save_problem", destination, report_dir)  # type: ignore[no-any-return]


def save_calibration(gate: Gate, choice: CalibrationChoice, destination: Path | None, report_dir: Path) -> str:
    """Save a calibrated threshold where the gate reads it and say what was written (``destination``: ``--save``'s
    value), a :class:`ConfigError` naming ``save`` where it cannot.  By default a gate naming ``threshold_option``
    saves that option's value to a JSON file; a gate without one has nothing to save."""
    return _call(gate, "save_calibration", choice, destination, report_dir)  # type: ignore[no-any-return]


# -- commands ------------------------------------------------------------------------------------------------


def add_commands(gate_class: type[Gate], sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the gate's own subcommands to the ``suffice`` command, if it has any."""
    _call(gate_class, "add_commands", sub)
