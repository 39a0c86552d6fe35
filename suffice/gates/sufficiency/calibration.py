"""Calibrated thresholds saved as gate configs, and the scores they apply to.

A gate config is a small JSON file written by ``suffice calibrate --save-config``:
``{"gate": "sufficiency", "score": "p_sufficient", "threshold": 0.62, ...}``.
Loaded with ``--gate-config``, it makes the routing decision ``score >= threshold``
instead of the model's own boolean.  For the adequacy gate the threshold is saved
as a new rubric version instead (``calibrated_threshold``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suffice.exceptions import ConfigError, OutputWriteError
from suffice.files import replace_atomically

SufficiencyScore = Literal["p_sufficient", "self_confidence"]


class GateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gate: Literal["sufficiency"]
    score: SufficiencyScore
    threshold: float = Field(ge=0.0, le=1.0, strict=True)
    calibrated_on: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    #: The engine settings the threshold was fitted under (model, weights, engine, backend, dtype): loading it
    #: under others warns.  Absent in files saved before it was recorded.
    fitted_under: dict[str, str] | None = None

    @classmethod
    def load(cls, path: Path) -> GateConfig:
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError("gate_config", str(path), f"cannot read: {exc}") from exc
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise ConfigError("gate_config", str(path), f"{field}: {err['msg']}") from exc

    def save(self, path: Path) -> None:
        """Raises :class:`ConfigError` naming ``save_config`` when it cannot be written.

        Written beside and renamed over ``path``: a gate config is what a production
        gate reads at every start, and a full disk must not leave it empty."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_atomically(path, [(self.model_dump_json(indent=2) + "\n").encode("utf-8")])
        except OutputWriteError as exc:
            raise ConfigError("save_config", str(path), f"cannot be written: {exc.reason}") from exc
        except OSError as exc:
            raise ConfigError("save_config", str(path), f"cannot be written: {exc}") from exc


def sufficiency_score(verdict: Any, score: SufficiencyScore) -> float | None:
    """The named score of a sufficiency verdict (``None`` when unavailable)."""
    if score == "p_sufficient":
        value = getattr(verdict, "p_sufficient", None)
        return None if value is None else float(value)
    confidence = float(verdict.confidence)
    return confidence if verdict.is_sufficient else 1.0 - confidence
