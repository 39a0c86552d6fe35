"""The review desk of ``suffice serve --audit-db``: a page a person decides reviews on, and the same over JSON.

Reviewers authenticate with their own key (``--reviewer-keys FOLDER``: one key file per reviewer, ``NAME.key`` as
``suffice audit keygen`` writes it, mode 0600), never with the service's client token.  The application that sent
a record learns the decision on two routes of its own, with the client token (:mod:`suffice.server.outcomes`).

Its modules: ``sessions`` (reviewers' keys, page sessions), ``schema`` (the JSON contract), ``desk`` (the audit log,
and the dispatch of review paths), ``pages`` (the page, from ``templates/``), ``routes``, ``counts`` (``/metrics``).
"""

from suffice.server.reviews.desk import API, REVIEW_BODY_BYTES, REVIEW_BODY_SECONDS, ReviewPaths
from suffice.server.reviews.routes import install
from suffice.server.reviews.schema import MAX_NOTE_CHARS
from suffice.server.reviews.sessions import load_reviewer_keys

__all__ = [
    "API",
    "MAX_NOTE_CHARS",
    "REVIEW_BODY_BYTES",
    "REVIEW_BODY_SECONDS",
    "ReviewPaths",
    "install",
    "load_reviewer_keys",
]
