"""The audit log's settings, shared by every command that records evaluations (``judge``, ``calibrate``,
``serve``): declared once, each a flag of those commands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suffice.audit.keys import load_key
from suffice.exceptions import ConfigError
from suffice.settings import check, setting


@dataclass(frozen=True)
class AuditOptions:
    """The audit log's settings of ``judge``, ``calibrate`` and ``serve``."""

    audit_db: Path | None = setting(None, "record every evaluation in this audit database", in_process=True)
    audit_key: bytes | None = setting(
        None,
        "key file (suffice audit keygen) for the audit log's keyed MAC chain",
        reads=Path,
        convert=load_key,
        in_process=True,
    )
    anchor_file: Path | None = setting(
        None,
        "when the run ends (serve: at shutdown), write an anchor of the audit log to PATH; keep it where the "
        "log's writers cannot reach, and check with `suffice audit verify --anchor-file PATH`",
        metavar="PATH",
        in_process=True,
    )

    def __post_init__(self) -> None:
        if self.audit_key is not None and self.audit_db is None:  # before the key file is read
            shown = "<key>" if isinstance(self.audit_key, bytes) else str(self.audit_key)
            raise ConfigError("audit_key", shown, "needs --audit-db")
        if self.anchor_file is not None and self.audit_db is None:
            raise ConfigError("anchor_file", str(self.anchor_file), "needs audit_db: it anchors the audit log")
        check(self)
