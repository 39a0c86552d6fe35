"""A tamper-evident audit log and the human review queue, in one SQLite file.

Tables: ``evaluations`` (one row per gate evaluation), ``reviews`` (the queue as it stands), ``review_events``
(append-only ``enqueued``/``decided``/``resolved`` changes: a review may need several reviewers to agree, see
:mod:`suffice.audit.reviewing`), ``chain_heads`` (per chain: row count, last hash, a MAC over both)
and ``meta`` (format, random database id, keyed or not, key id).

``evaluations`` and ``review_events`` are each a hash chain: row *n* hashes (chain name, database id, *n*, previous
hash, its values).  ``reviews`` is updated in place, so :meth:`AuditLog.verify` requires it to equal a replay of
``review_events``.  With a key (``AuditLog(path, key=load_key(file))``; key files must be mode 0600) every hash and
head is an HMAC-SHA256: someone who can write the file but has not the key cannot alter, insert or reorder rows, or
cut rows off the end, without verification with the key failing.  Rewriting a keyed log as an unkeyed one is caught
only when it is verified with the key (or against a keyed anchor); verified without a key, such a log reads as a
plain one.  Without a key, plain SHA-256 catches accidents only: anyone can recompute it.

What no check inside the file can catch is an older copy put back, or rows cut off together with their head from a
saved copy: :meth:`AuditLog.anchor` (``suffice audit anchor``, or ``--anchor-file`` at the end of every ``judge``,
``calibrate`` and ``serve`` run) writes a small JSON object (database id, per chain row count and head hash, with a
key a MAC) to keep where the log's writers cannot reach, and ``verify(anchor=...)`` requires the anchored rows
present and unchanged.  Rows written after the last anchor are covered by no anchor.

The database (and SQLite's -wal/-shm beside it), exports and anchors are created readable by the owner only.  A
database without a ``meta`` table (an older format) is refused with an :class:`~suffice.exceptions.AuditError`.
Each write is one WAL transaction, so a killed run leaves rows that verify.
"""

from suffice.audit.anchors import load_anchor, save_anchor
from suffice.audit.database import DEFAULT_AUDIT_DB, is_audit_file
from suffice.audit.keys import key_id, load_key, write_key_file
from suffice.audit.log import AuditLog, Decided
from suffice.audit.reviewing import LABELS, REVIEW_DECISIONS
from suffice.audit.verify import VerifyReport

__all__ = [
    "DEFAULT_AUDIT_DB",
    "LABELS",
    "REVIEW_DECISIONS",
    "AuditLog",
    "Decided",
    "VerifyReport",
    "is_audit_file",
    "key_id",
    "load_anchor",
    "load_key",
    "save_anchor",
    "write_key_file",
]
