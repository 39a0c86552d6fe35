"""Records in flight when the engine died, kept beside the output for the rerun.

Why: a record that crashes the engine (a tokenizer or kernel bug, memory it alone
exhausts) kills it on every rerun at the same batch, so the run could never finish
and the records after it never got rows.  When a running engine dies judging a
batch (the scorer says which: :meth:`Scorer.implicated`; an unreachable server or an
engine that never started implicates none), that batch's keys are written to
``OUTPUT.suspects.json``.  The rerun judges each
suspect in a batch of its own; if the engine dies with one record alone in flight,
that record is the cause, and the next run writes its row as an
``EngineCrashError`` (final, so it is not judged again unless ``--retry-errors``)
instead of calling the engine with it.  The file is removed once nothing in it is
pending, and by ``--overwrite``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from suffice.files import replace_atomically

#: The error type of a record whose judging alone stopped the engine.
ENGINE_CRASH = "EngineCrashError"


def suspects_path(output: Path) -> Path:
    return output.with_name(output.name + ".suspects.json")


class Suspects:
    """What died with the engine: ``suspects`` (in a batch when it died: judge alone)
    and ``culprits`` (alone when it died: an error row, not the engine)."""

    def __init__(self, path: Path, *, overwrite: bool = False, retry_errors: bool = False) -> None:
        self.path = path
        self.suspects: set[str] = set()
        self.culprits: set[str] = set()
        if overwrite:
            path.unlink(missing_ok=True)
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            return  # written atomically by suffice: unreadable means not ours; judge normally
        if isinstance(data, dict):
            self.suspects = {str(k) for k in data.get("suspects", [])}
            self.culprits = {str(k) for k in data.get("culprits", [])}
        if retry_errors:  # try them again, each alone
            self.suspects |= self.culprits
            self.culprits = set()

    def __bool__(self) -> bool:
        return bool(self.suspects or self.culprits)

    def died(self, keys: list[str]) -> None:
        """A running engine died judging this batch (its records' keys)."""
        if len(keys) == 1 and keys[0] in self.suspects:
            self.suspects.discard(keys[0])
            self.culprits.add(keys[0])
        else:
            self.suspects.update(keys)
        self._save()

    def settled(self, keys: Iterable[str]) -> None:
        """Rows for ``keys`` are written (in memory; :meth:`close` saves)."""
        if not self:  # the usual run: nothing to look up per row
            return
        for key in keys:
            self.suspects.discard(key)
            self.culprits.discard(key)

    def forget_rest(self) -> None:
        """A whole pass is done: what is left was not in the input, or had its row."""
        self.suspects.clear()
        self.culprits.clear()

    def close(self) -> None:
        if self:
            self._save()
        else:
            self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        body = {"suspects": sorted(self.suspects), "culprits": sorted(self.culprits)}
        replace_atomically(self.path, [(json.dumps(body, indent=1) + "\n").encode("utf-8")])
