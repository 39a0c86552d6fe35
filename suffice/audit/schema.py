"""The audit database's tables and its two hash chains."""

from __future__ import annotations

from dataclasses import dataclass

from suffice.audit.encoding import Kind

#: Written into ``meta``; a database with another (or no) format is refused.
FORMAT = "suffice-audit/7"
#: Formats this suffice recognises to refuse with a reason: what each lacks that a later one chains.
EARLIER_FORMATS = {
    "suffice-audit/2": "retrieval attempts were not logged",
    "suffice-audit/3": "a review had one reviewer and no label",
    "suffice-audit/4": "evaluation rows hold no input hash, settings digest or routing rule",
    "suffice-audit/5": "evaluation rows hold no fence token",
    "suffice-audit/6": "evaluation rows hold no retry count or failed outputs",
}
ALG_KEYED = "hmac-sha256"
ALG_PLAIN = "sha256"

EVALUATION_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("ts", "text"),
    ("run_id", "text"),
    ("item_id", "text"),
    ("query_hash", "text"),
    ("chunks", "text"),
    ("gate", "text"),
    ("rubric", "text"),
    ("rubric_version", "text"),
    ("prompt_version", "text"),
    # The prompt's fence token (it is keyed with a per-process secret): what a replay of the prompt needs.
    ("fence", "text"),
    ("model_id", "text"),
    ("weights_hash", "text"),
    ("backend", "text"),
    ("raw_output", "text"),
    ("verdict", "text"),
    ("scores", "text"),
    ("decision", "text"),
    # The regulator's trail (docs/harness.md, "What a row holds"): the rule behind the route, a hash of
    # everything judged, and the settings that decide verdicts with their digest.
    ("rule", "text"),
    ("input_hash", "text"),
    ("settings", "text"),
    ("settings_digest", "text"),
    # A verdict the verdict cache answered (suffice.cache): when it was first judged; null when the engine judged.
    ("cached_from", "text"),
    ("round", "int"),
    ("latency_ms", "real"),
    ("error", "text"),
    # The seeds' "log every evaluation attempt": how many generations were repeated after an output failed
    # validation, and each failed output (type, message, raw text cut to its head, raw_chars), in order, on the
    # row of the result they led to.  On that row, not rows of their own: a failed output decides nothing, and
    # one row per record keeps every reader of rows (export, reviews' evaluation_seq) as it was.
    ("retries", "int"),
    ("attempts", "text"),
)
COLUMNS = tuple(name for name, _ in EVALUATION_COLUMNS)
#: Evaluation columns holding structured values as JSON text (parsed by ``export``).
JSON_COLUMNS = ("chunks", "verdict", "scores", "error", "settings", "attempts")

#: One retrieval attempt of the harness: its round, the queries sent, the width asked for, the ids of the chunks
#: it brought back (``chunk_ids``, as the retriever gave them) and how many were new; ``error`` when it failed.
RETRIEVAL_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("ts", "text"),
    ("run_id", "text"),
    ("item_id", "text"),
    ("gate", "text"),
    ("round", "int"),
    ("queries", "text"),
    ("width", "int"),
    ("chunk_ids", "text"),
    ("new_chunks", "int"),
    ("error", "text"),
)
RETRIEVAL_COLUMN_NAMES = tuple(name for name, _ in RETRIEVAL_COLUMNS)
#: Retrieval columns holding structured values as JSON text.
RETRIEVAL_JSON_COLUMNS = ("queries", "chunk_ids", "error")

#: What an ``enqueued`` event carries (and the ``reviews`` row starts with): ``rule`` names what sent it,
#: ``reviewers`` how many independent reviewers must agree, ``machine_label`` the machine's ``sufficient`` or
#: ``insufficient`` (none without a verdict).
REVIEW_FIELDS: tuple[tuple[str, Kind], ...] = (
    ("created_at", "text"),
    ("run_id", "text"),
    ("item_id", "text"),
    ("gate", "text"),
    ("reason", "text"),
    ("rule", "text"),
    ("payload", "text"),
    ("evaluation_seq", "int"),
    ("reviewers", "int"),
    ("machine_label", "text"),
)
#: What a ``resolved`` event sets on the ``reviews`` row (``decisions`` too).
RESOLUTION_FIELDS = ("decision", "label", "resolved_by", "resolved_at", "note")
#: Every reviewer's decision so far, as JSON text: a ``decided`` event sets it (a decision that does not close the
#: review), a ``resolved`` event sets it with the resolution.
DECISIONS = "decisions"
NO_DECISIONS = "[]"
REVIEW_COLUMNS = ("id", *(name for name, _ in REVIEW_FIELDS), "status", DECISIONS, *RESOLUTION_FIELDS)

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE evaluations (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL, run_id TEXT, item_id TEXT, query_hash TEXT, chunks TEXT,
    gate TEXT, rubric TEXT, rubric_version TEXT, prompt_version TEXT,
    fence TEXT,
    model_id TEXT, weights_hash TEXT, backend TEXT,
    raw_output TEXT, verdict TEXT, scores TEXT, decision TEXT,
    rule TEXT, input_hash TEXT, settings TEXT, settings_digest TEXT, cached_from TEXT,
    round INTEGER, latency_ms REAL, error TEXT,
    retries INTEGER, attempts TEXT,
    prev_hash TEXT NOT NULL, row_hash TEXT NOT NULL)""",
    """CREATE TABLE review_events (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL, review_id INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL,
    prev_hash TEXT NOT NULL, row_hash TEXT NOT NULL)""",
    """CREATE TABLE retrievals (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL, run_id TEXT, item_id TEXT, gate TEXT, round INTEGER,
    queries TEXT, width INTEGER, chunk_ids TEXT, new_chunks INTEGER, error TEXT,
    prev_hash TEXT NOT NULL, row_hash TEXT NOT NULL)""",
    """CREATE TABLE chain_heads (
    chain TEXT PRIMARY KEY, count INTEGER NOT NULL, last_hash TEXT NOT NULL, mac TEXT NOT NULL)""",
    """CREATE TABLE reviews (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL, run_id TEXT, item_id TEXT, gate TEXT, reason TEXT, rule TEXT,
    payload TEXT NOT NULL, evaluation_seq INTEGER, reviewers INTEGER NOT NULL DEFAULT 1, machine_label TEXT,
    status TEXT NOT NULL DEFAULT 'open', decisions TEXT NOT NULL DEFAULT '[]',
    decision TEXT, label TEXT, resolved_by TEXT, resolved_at TEXT, note TEXT)""",
)
#: Tables of the format before :data:`FORMAT` (no ``meta``): recognised to say so.
OLD_TABLES = frozenset({"evaluations", "chain_head", "reviews"})


@dataclass(frozen=True)
class Chain:
    """One hash chain: the table its rows live in and the columns they hash."""

    name: str
    table: str
    columns: tuple[tuple[str, Kind], ...]
    noun: str

    @property
    def nouns(self) -> str:
        return self.noun + "s"


EVALUATIONS = Chain("evaluations", "evaluations", EVALUATION_COLUMNS, "row")
REVIEW_EVENTS = Chain(
    "reviews",
    "review_events",
    (("ts", "text"), ("review_id", "int"), ("event", "text"), ("data", "text")),
    "review event",
)
RETRIEVALS = Chain("retrievals", "retrievals", RETRIEVAL_COLUMNS, "retrieval attempt")
CHAINS = (EVALUATIONS, REVIEW_EVENTS, RETRIEVALS)
