"""The settings a batch output was made with, kept beside it.

Why: resuming appends new verdicts to old ones, and rows made with another gate,
model, backend, prompt, rubric, threshold or output format would be mixed into one
file without a trace.  The settings are written once, next to the output, as
``OUTPUT.settings.json`` (the output itself keeps exactly one line per input record);
a rerun compares them key by key and refuses the first that differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from suffice.batch.options import BatchOptions
from suffice.config import JudgeConfig
from suffice.exceptions import OutputMismatchError
from suffice.files import replace_atomically
from suffice.gates.base import Gate
from suffice.serving.factory import engine_settings
from suffice.settings import recorded

#: The key of what a started engine says it serves (:meth:`RunSettings.check_served`).
SERVED = "served"


def settings_path(output: Path) -> Path:
    return output.with_name(output.name + ".settings.json")


@dataclass(frozen=True)
class RunSettings:
    """Every setting that decides the rows of an output, as strings, in a fixed order."""

    values: dict[str, str]

    @classmethod
    def of(cls, config: JudgeConfig, gate: Gate, options: BatchOptions) -> RunSettings:
        # A cascade's rows depend on its margin: a resume under another would mix two runs' choices.
        margin = {"auto_margin": repr(config.auto_margin)} if config.detail == "auto" else {}
        return cls.judged_by({**gate.settings(), **margin, **engine_settings(config.engine)}, config, options)

    @classmethod
    def judged_by(cls, judge: Mapping[str, str], config: JudgeConfig, options: BatchOptions) -> RunSettings:
        """The settings of rows from a judge whose own settings (gate and engine) are ``judge``: this process's,
        or those a service reports (``suffice judge --server``), with the output's (``options`` tagged verdict:
        the format and the field mapping)."""
        return cls(recorded(options, config.engine.kind, dict(judge)))

    def write(self, output: Path, *, keep_served: bool = False) -> None:
        """Write the settings beside ``output``; ``keep_served``: keep what an earlier
        run's engine said it serves (a resume), for :meth:`check_served` to compare."""
        path = settings_path(output)
        body: dict[str, object] = dict(self.values)
        if keep_served:
            try:
                before = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                before = None
            if isinstance(before, dict) and isinstance(before.get(SERVED), dict):
                body[SERVED] = before[SERVED]
        replace_atomically(path, [(json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode("utf-8")])

    def check(self, output: Path) -> None:
        """Raise :class:`OutputMismatchError` naming the first setting that differs from
        those ``output`` was written with."""
        path = settings_path(output)
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise OutputMismatchError(
                "settings",
                f"{output} has results but no {path.name} saying what made them; use --overwrite to start over",
            ) from None
        except (OSError, ValueError) as exc:
            raise OutputMismatchError("settings", f"{path} cannot be read ({exc}); use --overwrite") from exc
        if not isinstance(recorded, dict):
            raise OutputMismatchError("settings", f"{path} is not a settings file; use --overwrite")
        recorded.pop(SERVED, None)  # checked once the engine runs: check_served
        for key in dict.fromkeys([*self.values, *recorded]):
            old, new = recorded.get(key), self.values.get(key)
            if old != new:
                raise OutputMismatchError(
                    key,
                    f"{output} was written with {key}={old!r}, this run has {key}={new!r}: "
                    "rerun with the same settings to resume, or --overwrite to start over",
                )

    def check_served(self, output: Path, served: Mapping[str, str]) -> None:
        """Once the engine runs: record what it says it serves (a server's model) beside
        ``output``, or, when it is already recorded, raise :class:`OutputMismatchError`
        naming the first value that differs (a server restarted with another model)."""
        if not served:
            return
        path = settings_path(output)
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OutputMismatchError("settings", f"{path} cannot be read ({exc}); use --overwrite") from exc
        before = recorded.get(SERVED) if isinstance(recorded, dict) else None
        if isinstance(before, dict):
            for key, new in served.items():
                old = before.get(key)
                if old is not None and old != new:
                    raise OutputMismatchError(
                        key,
                        f"{output} was written with {key}={old!r}, the server now gives {key}={new!r}: "
                        "serve the same model to resume, or --overwrite to start over",
                    )
            if all(key in before for key in served):
                return
        body = {**self.values, SERVED: {**(before if isinstance(before, dict) else {}), **served}}
        replace_atomically(path, [(json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode("utf-8")])
