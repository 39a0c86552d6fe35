"""Anchors: a record of both chains kept where the database's writers cannot reach.

Nothing inside a database can prove that rows were not removed along with every
trace of them (a wipe, or a rollback to an older copy); an anchor can.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from suffice.audit.encoding import digest, now, same
from suffice.audit.keys import key_id
from suffice.audit.schema import ALG_KEYED, ALG_PLAIN, CHAINS
from suffice.exceptions import AuditError
from suffice.files import replace_atomically

#: The ``format`` field of an anchor file.  2: the chain's MAC kind and key id are recorded (and MAC'd), so a log
#: rewritten without its key as an unkeyed one no longer matches its anchor.
ANCHOR_FORMAT = "suffice-audit-anchor/2"


def anchor_mac(key: bytes, body: Mapping[str, Any]) -> str:
    return digest(key, {"kind": "anchor", "anchor": body})


def make_anchor(db_id: str, database: str, key: bytes | None, heads: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The anchor of a database whose chains end at ``heads`` (chain -> count, head)."""
    body: dict[str, Any] = {
        "format": ANCHOR_FORMAT,
        "db_id": db_id,
        "database": database,
        "created_at": now(),
        "keyed": key is not None,
        "chain_mac": ALG_KEYED if key is not None else ALG_PLAIN,
        "key_id": key_id(key) if key is not None else "",
        "chains": {chain.name: heads[chain.name] for chain in CHAINS},
    }
    return {**body, "mac": anchor_mac(key, body) if key is not None else None}


def anchor_problem(anchor: Mapping[str, Any], key: bytes | None, db_id: str, keyed: bool) -> str | None:
    """Why ``anchor`` cannot be trusted or does not belong to database ``db_id`` (``keyed``: whether the database
    says it is chained with a key), or None.  An anchor that says keyed never matches a database that says it is
    not: the one downgrade a writer without the key can make."""
    if anchor.get("format") == "suffice-audit-anchor/1":
        return (
            "the anchor was written by an earlier suffice (suffice-audit-anchor/1: no MAC kind or key id): "
            "write a new one with `suffice audit anchor`"
        )
    if anchor.get("format") != ANCHOR_FORMAT:
        return f"the anchor is not a suffice audit anchor (format {anchor.get('format')!r})"
    if key is not None:
        mac = anchor.get("mac")
        if not isinstance(mac, str) or not same(mac, anchor_mac(key, {k: v for k, v in anchor.items() if k != "mac"})):
            return "the anchor is forged: its MAC does not verify with this key"
    said = anchor.get("chain_mac")
    if said not in (ALG_KEYED, ALG_PLAIN) or anchor.get("keyed") is not (said == ALG_KEYED):
        return f"the anchor is malformed: chain_mac {said!r} and keyed {anchor.get('keyed')!r} do not agree"
    if said == ALG_KEYED and not keyed:
        return (
            f"the anchor was made for a keyed database ({ALG_KEYED}, key {anchor.get('key_id')}), but this one says "
            "it has no key: it was rewritten without the key (a downgrade), or it is not the anchored log"
        )
    if said == ALG_PLAIN and keyed:
        return "the anchor was made for an unkeyed database, but this one is keyed: it is not this log's anchor"
    chains = anchor.get("chains")
    for chain in CHAINS:
        entry = chains.get(chain.name) if isinstance(chains, Mapping) else None
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("count"), int)
            or isinstance(entry.get("count"), bool)
            or entry["count"] < 0
            or not isinstance(entry.get("head"), str)
        ):
            return f"the anchor is malformed: no valid {chain.name} count and head"
    if anchor.get("db_id") != db_id:
        return (
            f"the anchor belongs to another database (id {anchor.get('db_id')}; this one is {db_id}): "
            "the database was replaced or recreated"
        )
    return None


def load_anchor(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read an anchor file.  Only that it is a JSON object is checked here: whether
    it is authentic and matches is :meth:`AuditLog.verify`'s to report."""
    try:
        anchor = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AuditError(f"anchor {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise AuditError(f"anchor {path}: not readable JSON ({exc})") from exc
    if not isinstance(anchor, dict):
        raise AuditError(f"anchor {path}: not a JSON object")
    return anchor


def save_anchor(anchor: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write an anchor atomically (a crash never leaves half an anchor), readable by the owner only."""
    body = (json.dumps(anchor, indent=2, sort_keys=True) + "\n").encode("utf-8")
    replace_atomically(Path(path), [body], mode=0o600)
