"""Records in flight when the engine died, kept in ``OUTPUT.suspects.json`` for the rerun.

The rerun judges each suspect alone; one that stops the engine alone is a culprit and the next run writes its
``EngineCrashError`` row (:func:`suffice.rows.shaping.crash_result`) without the engine.  Each key carries its record's
digest, and its status holds only while the record at that key has it (position keys can change records).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from suffice.batch.answered import id_key
from suffice.files import replace_atomically


def suspects_path(output: Path) -> Path:
    return output.with_name(output.name + ".suspects.json")


def record_digest(record: object) -> str:
    """Sixteen hex digits of a record's whole content as read: equal for the same record, whatever its position."""
    try:
        text = json.dumps(record, sort_keys=True, ensure_ascii=True, default=repr, separators=(",", ":"))
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted
        text = repr(record)
    return hashlib.sha256(text.encode("ascii", "backslashreplace")).hexdigest()[:16]


class Suspects:
    """What died with the engine: ``suspects`` (judge alone) and ``culprits`` (an error row, not the engine), each
    key with its record's digest (``None``: noted without one)."""

    def __init__(self, path: Path, *, overwrite: bool = False, retry_errors: bool = False) -> None:
        self.path = path
        self.suspects: dict[str, str | None] = {}
        self.culprits: dict[str, str | None] = {}
        if overwrite:
            path.unlink(missing_ok=True)
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # none, or (written atomically by suffice) not ours: judge normally
        if isinstance(data, dict):
            digests = data.get("digests")
            digests = digests if isinstance(digests, dict) else {}

            def noted(name: str) -> dict[str, str | None]:
                keys = data.get(name, [])
                keys = keys if isinstance(keys, list) else []
                return {str(k): None if digests.get(k) is None else str(digests[k]) for k in keys}

            self.suspects = noted("suspects")
            self.culprits = noted("culprits")
            for key, digest in list(self.culprits.items()):
                if digest is None and not key.startswith(id_key("")):
                    # An old culprit by position: the record there now may be another.
                    self.suspects[key] = self.culprits.pop(key)
        if retry_errors:  # try them again, each alone
            self.suspects.update(self.culprits)
            self.culprits = {}

    def __bool__(self) -> bool:
        return bool(self.suspects or self.culprits)

    def _holds(self, noted: dict[str, str | None], key: str, record: object) -> bool:
        """Whether ``key`` is noted for this very record; a key now holding another record is forgotten."""
        if key not in noted:
            return False
        digest = noted[key]
        if digest is None or digest == record_digest(record):
            return True
        del noted[key]
        return False

    def is_culprit(self, key: str, record: object) -> bool:
        """This record stopped the engine alone: it gets an error row, not the engine."""
        return self._holds(self.culprits, key, record)

    def is_suspect(self, key: str, record: object) -> bool:
        """This record was in flight when the engine died: judge it alone."""
        return self._holds(self.suspects, key, record)

    def died(self, batch: list[tuple[str, object]]) -> None:
        """A running engine died judging this batch (its records, each with its key)."""
        noted = {key: record_digest(record) for key, record in batch}
        if len(noted) == 1:
            ((key, digest),) = noted.items()
            if key in self.suspects and self.suspects[key] in (None, digest):
                del self.suspects[key]
                self.culprits[key] = digest
                self._save()
                return
        self.suspects.update(noted)
        self._save()

    def settled(self, keys: Iterable[str]) -> None:
        """Rows for ``keys`` are written (in memory; :meth:`close` saves)."""
        if not self:  # the usual run: nothing to look up per row
            return
        for key in keys:
            self.suspects.pop(key, None)
            self.culprits.pop(key, None)

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
        digests = {k: d for noted in (self.suspects, self.culprits) for k, d in noted.items() if d is not None}
        body = {"suspects": sorted(self.suspects), "culprits": sorted(self.culprits), "digests": digests}
        replace_atomically(self.path, [(json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")])
