"""Versioned adequacy rubrics in a folder: ``<name>@<version>.json``.

Rubrics are configuration, not code (the adequacy seed: "populated from a
configuration store, not hardcoded"), so they are schema-checked on load and
every error names the field.  ``name`` alone means the newest version.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suffice.exceptions import ConfigError, OutputWriteError, RubricError
from suffice.files import write_new
from suffice.gates.adequacy.grammar import DIMENSIONS, MAX_CRITERIA, check_dimension_names

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
#: The most characters a rubric's description of one of its own dimensions may have.
DESCRIPTION_CHARS = 200
#: The seed's "A PASS decision requires all rubric criteria to be met at an acceptable threshold", read as
#: every weighted dimension scoring at least the middle of its 0-1 scale (docs/seeds.md); a rubric's
#: ``minimums`` set its own.
DEFAULT_DIMENSION_MINIMUM = 0.5
#: The same reading for each rubric criterion the model scores: met at the middle of the 0-1 scale, unless the
#: criterion sets its own ``minimum``.
DEFAULT_CRITERION_MINIMUM = 0.5


class Criterion(BaseModel):
    """One testable criterion of a rubric (the seed: "Replace [ADEQUACY_RUBRIC] with concrete, testable criteria").

    Every criterion must be met for a PASS (the seed: "A PASS decision requires all rubric criteria to be met at an
    acceptable threshold"); ``critical`` marks the ones the seed singles out ("Partial coverage that fails any
    critical criterion must result in FAIL"): the prompt says so, and the decision names them apart.  A rubric
    file may give a criterion as its text alone: a criterion that is not critical, met at the default minimum.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = Field(min_length=1)
    critical: bool = False
    #: The score at which it is met: the seed's "acceptable threshold", per criterion.
    minimum: float = Field(default=DEFAULT_CRITERION_MINIMUM, ge=0.0, le=1.0)

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a criterion says what it requires: it cannot be blank")
        return value


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    use_case: str = Field(min_length=1)
    risk_level: Literal["HIGH", "MEDIUM", "LOW"]
    #: Each scored and assessed on its own in every verdict, in this order.
    criteria: list[Criterion] = Field(min_length=1, max_length=MAX_CRITERIA)
    #: The rubric's own scored dimensions, name -> what it measures (2 to 8 names of
    #: lower-case letters and ``_``); without it the seed's five (:data:`DIMENSIONS`).
    dimensions: dict[str, str] | None = None
    weights: dict[str, float]
    critical: dict[str, float] = Field(default_factory=dict)
    pass_threshold: float = Field(ge=0.0, le=1.0)
    #: A composite threshold chosen on golden data (``suffice calibrate``); when set it
    #: is used as is, without the risk level's margin (the calibration chose the tolerance).
    calibrated_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    calibration: dict[str, Any] | None = None
    #: The seed's "all rubric criteria met": each weighted dimension's score at or above its minimum here,
    #: else :data:`DEFAULT_DIMENSION_MINIMUM` (0 lets a dimension go unmet).
    minimums: dict[str, float] = Field(default_factory=dict)
    #: Deliver a computed PASS even when the model recommended ESCALATE_TO_HUMAN or
    #: FLAG_AS_UNANSWERABLE (by default such a verdict goes to a person); the decision then says so.
    trust_computed_pass: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be lower-case letters, digits, '.', '_' or '-'")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError("must be dotted numbers such as 1 or 1.2.0")
        return value

    @field_validator("criteria", mode="before")
    @classmethod
    def _criteria_as_text(cls, value: Any) -> Any:
        """A criterion given as its text alone is one with the defaults."""
        if isinstance(value, list):
            return [{"text": c} if isinstance(c, str) else c for c in value]
        return value

    @field_validator("dimensions")
    @classmethod
    def _dimensions(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            check_dimension_names(list(value))
            if any(not 0 < len(text.strip()) <= DESCRIPTION_CHARS for text in value.values()):
                raise ValueError(f"each dimension says what it measures in 1 to {DESCRIPTION_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _weights_and_floors(self) -> Rubric:
        known = self.dimension_names
        for field, value in (("weights", self.weights), ("critical", self.critical), ("minimums", self.minimums)):
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise ValueError(f"{field}: unknown dimension(s) {unknown}; this rubric's: {list(known)}")
        if any(w < 0 for w in self.weights.values()):
            raise ValueError("weights: every weight must be >= 0")
        # Infinity (JSON's too) or 1e308 twice would make every composite NaN.
        if not 0 < sum(self.weights.values()) < math.inf:
            raise ValueError("weights: must be finite numbers summing to a positive, finite number")
        for field, value, noun in (("critical", self.critical, "floor"), ("minimums", self.minimums, "minimum")):
            if any(not 0 <= f <= 1 for f in value.values()):
                raise ValueError(f"{field}: every {noun} must be in [0, 1]")
        return self

    def minimum(self, dimension: str) -> float:
        """The score ``dimension`` must reach for its criterion to count as met (0 for an unweighted one)."""
        if dimension in self.minimums:
            return self.minimums[dimension]
        return DEFAULT_DIMENSION_MINIMUM if self.weight(dimension) > 0 else 0.0

    @property
    def dimension_names(self) -> tuple[str, ...]:
        """The dimensions scored, in order: the rubric's own, else the seed's five."""
        return DIMENSIONS if self.dimensions is None else tuple(self.dimensions)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def weight(self, dimension: str) -> float:
        return self.weights.get(dimension, 0.0)


def builtin_dir() -> Path:
    return Path(__file__).parent / "rubrics"


def _field_of(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    fields = ("weights", "critical", "minimums")
    return loc or next((f for f in fields if str(err.get("msg", "")).startswith(f"Value error, {f}")), "rubric")


def load_rubric_file(path: Path) -> Rubric:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RubricError("rubric", f"{path}: cannot read rubric JSON: {exc}") from exc
    try:
        rubric = Rubric.model_validate(data)
    except ValidationError as exc:
        field = _field_of(exc)
        raise RubricError(f"rubric.{field}", f"{path}: {exc.errors()[0]['msg']}") from exc
    if path.stem != rubric.ref:
        raise RubricError("rubric.name", f"{path}: file name must be {rubric.ref}.json")
    return rubric


class RubricStore:
    """A folder of ``<name>@<version>.json`` files (default: the rubrics shipped with suffice)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or builtin_dir()
        if not self.folder.is_dir():
            raise RubricError("rubric_dir", f"{self.folder} is not a folder")
        self._cache: dict[str, Rubric] = {}

    def refs(self) -> list[tuple[str, str]]:
        stems = (path.stem.partition("@") for path in self.folder.glob("*@*.json"))
        out = [(name, version) for name, _, version in stems if _VERSION.match(version)]
        return sorted(out, key=lambda nv: (nv[0], tuple(int(part) for part in nv[1].split("."))))

    def versions(self, name: str) -> list[str]:
        return [v for n, v in self.refs() if n == name]

    def get(self, ref: str) -> Rubric:
        """``name`` (newest version) or ``name@version``; errors name the ``rubric`` field."""
        if ref in self._cache:
            return self._cache[ref]
        name, _, version = ref.partition("@")
        versions = self.versions(name)
        if not versions:
            known = sorted({n for n, _ in self.refs()})
            raise RubricError("rubric", f"unknown rubric {name!r} in {self.folder}; have {known}")
        if not version:
            version = versions[-1]
        elif version not in versions:
            raise RubricError("rubric", f"rubric {name!r} has no version {version!r}; have {versions}")
        rubric = load_rubric_file(self.folder / f"{name}@{version}.json")
        self._cache[ref] = rubric
        return rubric


def next_rubric_path(rubric: Rubric, folder: Path) -> Path:
    """Where the rubric's next patch version goes in ``folder``."""
    parts = rubric.version.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return folder / f"{rubric.name}@{'.'.join(parts)}.json"


def save_rubric_version(rubric: Rubric, metrics: dict[str, Any], folder: Path) -> Path:
    """The rubric's next patch version, with the calibrated composite threshold.

    Raises :class:`ConfigError` naming ``save_rubric`` when that version exists already (a hand-edited version is
    never overwritten) or cannot be written.  A file this call created and could not finish (a full disk) is
    removed: left empty, it would be the store's newest version, and unreadable."""
    path = next_rubric_path(rubric, folder)
    version = path.stem.rsplit("@", 1)[1]
    data = rubric.model_dump(mode="json")
    data.update(version=version, calibrated_threshold=metrics["threshold"], calibration=metrics)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_new(path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
    except FileExistsError as exc:
        raise ConfigError(
            "save_rubric", str(path), f"{rubric.name}@{version} exists already: calibrate from it, or move it away"
        ) from exc
    except OutputWriteError as exc:
        raise ConfigError("save_rubric", str(path), f"cannot be written: {exc.reason}") from exc
    except OSError as exc:
        raise ConfigError("save_rubric", str(path), f"cannot be written: {exc}") from exc
    return path
