"""A tamper-evident audit log and the human review queue, in one SQLite file.

What is stored
--------------
* ``evaluations``: one row per gate evaluation.
* ``reviews``: the review queue as it stands (open or resolved), for queries.
* ``review_events``: every change to the queue, append-only: ``enqueued`` (the
  review's fields) and ``resolved`` (the decision, who, when, the note).
* ``chain_heads``: per chain, the number of rows, the last row's hash and a MAC
  over both.
* ``meta``: the format, a random database id, whether the chains are keyed, and
  the key's id (a MAC of a constant, never the key).

Two chains
----------
``evaluations`` and ``review_events`` are each a hash chain: row *n* stores the
previous row's hash and its own hash over (chain name, database id, *n*, the
previous hash, its values).  ``reviews`` is not chained itself, because resolving
a review updates it in place; instead :meth:`AuditLog.verify` replays
``review_events`` and requires the ``reviews`` table to equal the replay, so an
edited, deleted or inserted review (a changed resolution included) is caught.
Two chains rather than one keep evaluation sequence numbers dense (``seq`` 1..N)
and let each chain name its own broken row.

Keyed or not
------------
With a key (``AuditLog(path, key=load_key(file))``), every hash is an
HMAC-SHA256 under that key, and so is each chain head.  Whoever can write the
database but has no key cannot produce a row or a head that verifies: edits,
deletions, insertions, reordering, rewriting a suffix with recomputed hashes, and
cutting the tail while rewriting the head are all detected.  Without a key the
same chain uses plain SHA-256: it catches accidental edits and careless
tampering, but anyone who reads this code can recompute every hash.  The mode is
fixed when the database is created; a keyed database cannot be written or
verified without its key, and a key cannot be added to an unkeyed one.

Anchors
-------
A wipe, or a rollback to an older copy, leaves a database that verifies on its
own.  :meth:`AuditLog.anchor` returns a small JSON object (database id, per chain
the row count and the head hash, and with a key a MAC over all of it) to be kept
where the database's writers cannot reach.  ``verify(anchor=...)`` then requires
the database to still hold the anchored rows unchanged: fewer rows is reported as
``truncated: anchor has N rows, database has M``.  Rows appended after the anchor
are checked by the chain alone.  An anchor whose MAC does not verify is reported
as forged; an unkeyed anchor has no MAC and is only as trustworthy as the place
it is kept.

Older databases
---------------
A database written before this format (no ``meta`` table) is refused with an
:class:`~suffice.exceptions.AuditError` that says so: it is neither extended nor
verified.  Its rows can still be read with ``sqlite3``.

Each write is one transaction in WAL mode: a process killed mid-run leaves a
database whose rows so far still verify.
"""

from suffice.audit.anchors import load_anchor, save_anchor
from suffice.audit.database import DEFAULT_AUDIT_DB, is_audit_file
from suffice.audit.keys import key_id, load_key, write_key_file
from suffice.audit.log import REVIEW_DECISIONS, AuditLog
from suffice.audit.verify import VerifyReport

__all__ = [
    "DEFAULT_AUDIT_DB",
    "REVIEW_DECISIONS",
    "AuditLog",
    "VerifyReport",
    "is_audit_file",
    "key_id",
    "load_anchor",
    "load_key",
    "save_anchor",
    "write_key_file",
]
