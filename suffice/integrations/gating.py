"""What every framework integration does around the judge, once: documents in, a decision out.

An adapter (:mod:`suffice.integrations.langchain`, ``.llama_index``, ``.haystack``) turns its documents into
:class:`Evidence` and calls :class:`DocumentGate` (an answer check: :class:`AnswerGate`, which returns a
:class:`CheckedAnswer`), passing the gate's settings by keyword (:class:`GateSettings`, :class:`CheckSettings`);
the gate's own methods read the verdict, so no adapter asks which gate it runs.

Ids: a document's own id becomes its chunk id (and source id); one without gets its position (an ``int``), and
one repeating an earlier document's gets ``"<id>@<position>"`` (chunk ids of a record must differ).  The
verdict's useful ids map back to the documents by these ids; kept documents stay in the order given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Unpack

from pydantic import BaseModel

from suffice.audit import AuditLog
from suffice.audit.recording import audit_values, record_results, weights_hash
from suffice.config import JudgeProtocol
from suffice.exceptions import (
    ConfigError,
    GateFailedError,
    InsufficientContextError,
    ServiceTimeoutError,
    ServiceUnavailableError,
)
from suffice.gates import Gate
from suffice.gates.recovery.grammar import JudgedSegment
from suffice.gates.registry import DEFAULT_CHECK_GATE
from suffice.gates.roles import parse_item, useful_chunk_ids
from suffice.grammars.routes import Route, Routing
from suffice.results import JudgeResult

#: What a compressor / postprocessor / router does with documents the gate judged insufficient:
#: raise :class:`~suffice.InsufficientContextError`, return no documents, or return them all.
OnInsufficient = Literal["raise", "empty", "keep"]
#: What it does with documents the gate sent to a person (``human_review``): by default as :data:`OnInsufficient`,
#: except that ``"keep"`` there returns none here (only ``on_review="keep"`` keeps them, and the outcome says so).
OnReview = Literal["raise", "empty", "keep"]
#: What it does when the gate gave no verdict: raise :class:`~suffice.GateFailedError` (fail closed),
#: or let every document through unjudged (fail open).
OnError = Literal["raise", "keep"]
#: What it does when the service a client judges through does not answer (down, overloaded past its retries,
#: past ``timeout``): raise the client's error (fail closed), let every document through unjudged, or return none.
OnUnavailable = Literal["raise", "keep", "empty"]

#: The errors :data:`OnUnavailable` covers: the service gave no verdict because it did not answer.
UNAVAILABLE = (ServiceUnavailableError, ServiceTimeoutError)

_log = logging.getLogger(__name__)

#: The metadata key under which a kept document carries the gate's verdict.
METADATA_KEY = "suffice"

_Scalar = str | int | float | bool | None


class CheckSettings(TypedDict, total=False):
    """The settings every integration takes, by keyword (what each means: :class:`DocumentGate`); an answer check
    takes these."""

    gate: str | None
    options: Mapping[str, Any] | None
    on_error: OnError
    metadata_keys: Sequence[str]
    audit: AuditLog | None
    on_unavailable: OnUnavailable
    timeout: float | None


class GateSettings(CheckSettings, total=False):
    """The settings of an integration that returns documents: :class:`CheckSettings` and what a negative route
    does with them."""

    on_insufficient: OnInsufficient
    on_review: OnReview | None


@dataclass(frozen=True)
class Evidence:
    """One framework document as the judge sees it: ``id`` is the framework's id (``None``: its
    position stands in), ``score`` the retriever's, ``metadata`` only the keys chosen to show."""

    text: str
    id: str | int | None = None
    score: float | None = None
    source: str | None = None
    date: str | None = None
    metadata: Mapping[str, _Scalar] | None = None


@dataclass(frozen=True)
class GateOutcome:
    """The gate's decision on a list of documents.

    ``positive``: whether the route delivers (not the verdict's bare boolean: an escalated PASS is not positive);
    ``kept``: the indices to keep on a delivery, in order (the useful ones; all when it names none).  Once the gate
    applied its policy (:meth:`DocumentGate.select`): ``returned`` and ``dropped`` indices, and ``policy``, the
    route and the setting that decided (e.g. ``human_review: on_review='keep'``).
    """

    result: JudgeResult[BaseModel]
    positive: bool
    kept: list[int]
    routing: Routing
    returned: list[int] | None = None
    dropped: list[int] | None = None
    policy: str = ""

    @property
    def verdict(self) -> BaseModel:
        assert self.result.verdict is not None, "an outcome is built from a verdict"
        return self.result.verdict

    def metadata(self) -> dict[str, Any]:
        """What a kept document's ``metadata[METADATA_KEY]`` holds: the verdict and its route."""
        return {
            "gate": self.result.gate,
            "route": self.routing.route,
            "positive": self.positive,
            "policy": self.policy,
            "verdict": self.verdict.model_dump(mode="json"),
        }


def chunk_ids(evidence: Sequence[Evidence]) -> list[str | int]:
    """The chunk id of each document (see the module docstring)."""
    ids: list[str | int] = []
    seen: set[str] = set()
    for position, doc in enumerate(evidence):
        cid: str | int = position if doc.id is None or doc.id == "" else doc.id
        if str(cid) in seen:
            cid = f"{cid}@{position}"
        seen.add(str(cid))
        ids.append(cid)
    return ids


def record_for(question: str, evidence: Sequence[Evidence], answer: str | None = None) -> dict[str, Any]:
    """The judge's input record for one question, its documents and answer; its id is a digest of the question and
    the chunk ids, so one question over the same documents is one id in an audit log."""
    ids = chunk_ids(evidence)
    chunks = [
        {"id": cid, "text": doc.text}
        | {key: getattr(doc, key) for key in ("score", "source", "date") if getattr(doc, key) is not None}
        | ({"metadata": dict(doc.metadata)} if doc.metadata else {})
        for cid, doc in zip(ids, evidence, strict=True)
    ]
    digest = hashlib.sha256(json.dumps([question, [str(i) for i in ids]]).encode()).hexdigest()[:16]
    record: dict[str, Any] = {"id": f"q-{digest}", "question": question, "chunks": chunks}
    if answer is not None:
        record["response"] = answer
    return record


def scalar_metadata(metadata: Mapping[str, Any] | None, keys: Sequence[str]) -> dict[str, _Scalar] | None:
    """The ``keys`` of a framework document's metadata that hold a JSON scalar, to show the judge: only those asked
    for, as a framework's metadata (file paths, embeddings' ids) would fill the window and every fence line."""
    if not metadata or not keys:
        return None
    shown = {k: metadata[k] for k in keys if isinstance(metadata.get(k), str | int | float | bool)}
    return shown or None


class DocumentGate:
    """A gate over framework documents, on any :class:`~suffice.JudgeProtocol`: an in-process
    :class:`~suffice.Judge`, a :class:`~suffice.Client` or :class:`~suffice.AsyncClient` of ``suffice serve``.

    ``gate``: which gate (default: the judge's own); ``options``: its options for each call (through a client
    they travel with each request).  ``on_*``: see :data:`OnInsufficient`, :data:`OnReview`, :data:`OnError`,
    :data:`OnUnavailable`; ``timeout``: seconds one call to a service may take (refused for an in-process judge).
    ``audit``: with an in-process judge, every verdict is written to this audit log and each one sent to a
    person queued for review there, as ``suffice judge --audit-db`` does (a service keeps its own log).
    ``metadata_keys``: the metadata keys the judge sees (:func:`scalar_metadata`), kept here for the adapter.
    """

    def __init__(
        self,
        judge: JudgeProtocol,
        gate: str | None = None,
        options: Mapping[str, Any] | None = None,
        on_insufficient: OnInsufficient = "raise",
        on_error: OnError = "raise",
        audit: AuditLog | None = None,
        on_unavailable: OnUnavailable = "raise",
        timeout: float | None = None,
        on_review: OnReview | None = None,
        metadata_keys: Sequence[str] = (),
    ) -> None:
        if not isinstance(judge, JudgeProtocol):
            raise ConfigError(
                "judge",
                type(judge).__name__,
                "must be a judge (suffice.JudgeProtocol): a suffice.Judge, Client or AsyncClient",
            )
        if on_insufficient not in ("raise", "empty", "keep"):
            raise ConfigError("on_insufficient", on_insufficient, "must be 'raise', 'empty' or 'keep'")
        if on_review is not None and on_review not in ("raise", "empty", "keep"):
            raise ConfigError("on_review", on_review, "must be 'raise', 'empty', 'keep' or None (as on_insufficient)")
        if on_error not in ("raise", "keep"):
            raise ConfigError("on_error", on_error, "must be 'raise' or 'keep'")
        if on_unavailable not in ("raise", "keep", "empty"):
            raise ConfigError("on_unavailable", on_unavailable, "must be 'raise', 'keep' or 'empty'")
        if isinstance(metadata_keys, str) or not all(isinstance(key, str) for key in metadata_keys):
            raise ConfigError("metadata_keys", metadata_keys, "must be a list of metadata key names")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf")
        ):
            raise ConfigError("timeout", timeout, "must be a positive number of seconds")
        if timeout is not None and "timeout" not in inspect.signature(judge.judge).parameters:
            raise ConfigError("timeout", timeout, "bounds a call to suffice serve: give a Client or AsyncClient")
        if audit is not None and not isinstance(audit, AuditLog):
            raise ConfigError("audit", type(audit).__name__, "must be a suffice.audit.AuditLog")
        if audit is not None and getattr(judge, "engine", None) is None:
            # A row records the weights that made its verdict: only a judge whose engine is here can say.
            raise ConfigError(
                "audit", "AuditLog", "needs an in-process judge; a service keeps its own log (suffice serve --audit-db)"
            )
        self.on_insufficient: OnInsufficient = on_insufficient
        self.on_review: OnReview | None = on_review
        self.on_error: OnError = on_error
        self.on_unavailable: OnUnavailable = on_unavailable
        self.timeout = timeout
        self.options = dict(options or {})
        self.metadata_keys = tuple(metadata_keys)
        self.judge_object = judge
        #: The call's keywords: the gate and options, and the timeout where one is set.
        self._call: dict[str, Any] = {"gate": gate, "options": self.options or None}
        self._call |= {"timeout": timeout} if timeout is not None else {}
        # Reads the verdicts here (route, useful ids); a gate or option the judge refuses fails now, not per call.
        self.gate: Gate = judge.gate_for(gate, self.options)
        self.audit = audit
        if audit is not None and hasattr(judge, "review_queue"):
            judge.review_queue = "an integration's audit log"
        self._audit_settings: dict[str, str] | None = None
        self._weights: str | None = None
        self._lock = threading.Lock()

    def _record(self, record: Mapping[str, Any], result: JudgeResult, seconds: float) -> JudgeResult:
        """Write ``result`` to the audit log (if any), queueing it for review when it goes to a person."""
        if self.audit is None:
            return result
        gate = self.gate
        try:
            item = parse_item(gate, record)
        except Exception:
            item = None
        if self._audit_settings is None:  # asked once: through a client it is a request
            self._audit_settings = {
                **self.judge_object.settings_for(self._call["gate"], self._call["options"]),
                # What the integration does with the documents of each route: with the row's route, which of them
                # it dropped and why (the outcome's ``dropped`` and ``policy``).
                "on_insufficient": self.on_insufficient,
                "on_review": self._on_review(),
            }
            self._weights = weights_hash(getattr(getattr(self.judge_object, "engine", None), "model_path", None))
        settings = self._audit_settings
        values = audit_values(
            gate,
            result,
            item,
            run_id=str(record["id"]),
            round=1,
            latency_ms=seconds * 1000,
            weights_hash=self._weights,
            settings=settings,
        )
        with self._lock:  # one SQLite connection, callers on many threads
            record_results(self.audit, [values], [result], [item], str(record["id"]), gate, settings)
        return result

    @property
    def gate_name(self) -> str:
        return self.gate.name

    def judge(self, question: str, evidence: Sequence[Evidence], answer: str | None = None) -> JudgeResult:
        """The judge's result for one question and its documents (blocking)."""
        record = record_for(question, evidence, answer)
        began = time.perf_counter()
        judge: Any = self.judge_object  # ``timeout`` is no keyword of the protocol: passed where the judge takes it
        result = judge.judge(record, **self._call)
        return self._record(record, result, time.perf_counter() - began)

    async def ajudge(self, question: str, evidence: Sequence[Evidence], answer: str | None = None) -> JudgeResult:
        """The judge's result, awaited (the judge's own ``ajudge``: an in-process judge on a worker thread whose
        generation stops when the task is cancelled, an :class:`~suffice.AsyncClient` natively)."""
        record = record_for(question, evidence, answer)
        began = time.perf_counter()
        judge: Any = self.judge_object
        result = await judge.ajudge(record, **self._call)
        # Written on the caller's thread: a SQLite connection is used on the thread that opened it.
        return self._record(record, result, time.perf_counter() - began)

    def select(
        self, question: str, evidence: Sequence[Evidence], answer: str | None = None
    ) -> tuple[list[int], GateOutcome | None]:
        """Judge the documents: the indices to return and the outcome (``None`` when no verdict decided).

        Raises :class:`~suffice.InsufficientContextError`, :class:`~suffice.GateFailedError` or the client's
        unavailable/timeout error where ``on_insufficient``, ``on_error`` or ``on_unavailable`` is ``"raise"``."""
        try:
            result: JudgeResult | Exception = self.judge(question, evidence, answer)
        except UNAVAILABLE as exc:
            result = exc
        return self._selection(question, evidence, result)

    async def aselect(
        self, question: str, evidence: Sequence[Evidence], answer: str | None = None
    ) -> tuple[list[int], GateOutcome | None]:
        """:meth:`select`, awaited (see :meth:`ajudge`)."""
        try:
            result: JudgeResult | Exception = await self.ajudge(question, evidence, answer)
        except UNAVAILABLE as exc:
            result = exc
        return self._selection(question, evidence, result)

    def _selection(
        self, question: str, evidence: Sequence[Evidence], result: JudgeResult | Exception
    ) -> tuple[list[int], GateOutcome | None]:
        """:meth:`select`'s answer once the judge gave ``result`` or raised it (the service did not answer)."""
        if isinstance(result, Exception):
            if self.on_unavailable == "raise":
                raise result
            return self.unavailable(result, len(evidence)), None
        outcome = self.outcome(question, evidence, result)
        returned = self.keep(question, outcome, len(evidence))
        if outcome is None:
            return returned, None
        dropped = sorted(set(range(len(evidence))) - set(returned))
        if dropped:
            # A gate that drops documents says which and why, in the log as well as in the outcome.
            _log.info("suffice: %d of %d document(s) dropped (%s)", len(dropped), len(evidence), outcome.policy)
        return returned, dataclasses.replace(outcome, returned=returned, dropped=dropped)

    def unavailable(self, exc: Exception, count: int) -> list[int]:
        """The indices to return when the service did not answer (``on_unavailable`` ``"keep"`` or ``"empty"``)."""
        # A fail-open gate passes documents nobody judged: the log says so, each time.
        _log.warning("suffice: the service gave no verdict (%s); on_unavailable=%r", exc, self.on_unavailable)
        return list(range(count)) if self.on_unavailable == "keep" else []

    def outcome(self, question: str, evidence: Sequence[Evidence], result: JudgeResult) -> GateOutcome | None:
        """What ``result`` decides for these documents, or ``None`` when the gate failed and
        ``on_error="keep"`` lets them through.  Raises :class:`~suffice.GateFailedError` otherwise."""
        if result.verdict is None:
            if self.on_error == "keep":
                return None
            raise GateFailedError(result)
        verdict = result.verdict
        useful = useful_chunk_ids(self.gate, verdict.model_dump(mode="json"))
        ids = chunk_ids(evidence)
        routing = self.gate.route(verdict)
        positive = routing.route == "deliver"
        wanted = {str(u) for u in useful or ()}
        kept = [i for i, cid in enumerate(ids) if str(cid) in wanted]
        if useful is None or (positive and not kept):
            # No useful ids to go by (a decision-only verdict, or a calibrated threshold that made
            # "sufficient" of a verdict naming none): a positive decision keeps the evidence it judged.
            kept = list(range(len(evidence)))
        return GateOutcome(result, positive, kept, routing, policy=self._policy(routing))

    def _policy(self, routing: Routing) -> str:
        """Why the documents are returned as they are: the route and the setting that decides it."""
        if routing.route == "deliver":
            return "deliver: the useful documents"
        if routing.route == "human_review":
            return f"human_review: on_review={self._on_review()!r}"
        return f"{routing.route}: on_insufficient={self.on_insufficient!r}"

    def _on_review(self) -> OnReview:
        if self.on_review is not None:
            return self.on_review
        return "empty" if self.on_insufficient == "keep" else self.on_insufficient

    def keep(self, question: str, outcome: GateOutcome | None, count: int) -> list[int]:
        """The indices to return, by ``on_insufficient`` (``"raise"``: :class:`~suffice.InsufficientContextError`)."""
        if outcome is None:
            return list(range(count))
        if outcome.positive:
            return outcome.kept
        policy = self._on_review() if outcome.routing.route == "human_review" else self.on_insufficient
        if policy == "keep":
            return list(range(count))
        if policy == "empty":
            return []
        routing = outcome.routing
        raise InsufficientContextError(question, list(routing.gap), list(routing.queries), outcome.result, routing)


@dataclass(frozen=True)
class CheckedAnswer:
    """What a check of a generated answer returns: the answer as given and where the verdict routes it.

    ``route``: ``"deliver"``, ``"retrieve_more"``, ``"abstain"`` or ``"human_review"``; ``delivered``: what to
    show the user on ``"deliver"`` (``None`` otherwise): the gate's delivered answer (for the recovery gate, the
    answer byte for byte with ``[CITATION:source_id]`` after each supported segment), with ``caveats``; ``gap``:
    what the documents do not support; ``queries``: what to retrieve to close it; ``outcome``: the gate's whole
    decision, ``None`` when no verdict decided (``on_error`` / ``on_unavailable`` did).
    """

    question: str
    answer: str
    route: Route
    delivered: str | None
    caveats: list[str]
    gap: list[str]
    queries: list[str]
    outcome: GateOutcome | None

    @property
    def checked(self) -> bool:
        """Whether a verdict decided the route (``False``: no verdict, ``on_error`` / ``on_unavailable`` decided)."""
        return self.outcome is not None

    @property
    def segments(self) -> list[JudgedSegment]:
        """The verdict's segments of the answer, in order, each with its label and the source ids that support it;
        ``[]`` without a verdict or for a gate that judges no segments."""
        if self.outcome is None:
            return []
        found = getattr(self.outcome.verdict, "segments", None) or []
        return [s for s in found if isinstance(s, JudgedSegment)]

    @property
    def cited_answer(self) -> str | None:
        """The answer with ``[CITATION:source_id]`` after each segment that names sources, whatever the route
        (what a person reviewing it sees); ``None`` without a verdict or for a gate that cites nothing."""
        if self.outcome is None:
            return None
        cited = getattr(self.outcome.verdict, "cited_answer", None)
        return cited if isinstance(cited, str) else None


class AnswerGate(DocumentGate):
    """A :class:`DocumentGate` that checks a generated answer against its documents (default: the
    :data:`~suffice.gates.registry.DEFAULT_CHECK_GATE`) and routes it: what every integration's check runs.

    A negative verdict is routed, never raised (:meth:`check` returns a :class:`CheckedAnswer`); ``"keep"`` under
    ``on_error`` / ``on_unavailable`` delivers the answer unchecked, ``on_unavailable="empty"`` abstains.
    ``owner`` names the check in the :class:`~suffice.ConfigError` for a gate that reads no answer.
    """

    def __init__(self, judge: JudgeProtocol, *, owner: str = "AnswerGate", **settings: Unpack[CheckSettings]) -> None:
        settings["gate"] = settings.get("gate") or DEFAULT_CHECK_GATE
        super().__init__(judge, **settings)
        if not self.gate.needs_response:
            raise ConfigError(
                "gate",
                self.gate_name,
                f"checks no answer: {owner} runs a gate that reads one, such as {DEFAULT_CHECK_GATE!r}",
            )

    def check(self, question: str, evidence: Sequence[Evidence], answer: str) -> CheckedAnswer:
        """Check ``answer`` against ``evidence`` for ``question`` (blocking)."""
        try:
            result = self.judge(question, evidence, answer)
        except UNAVAILABLE as exc:
            return self._unchecked(question, answer, exc)
        return self.checked(question, evidence, answer, result)

    async def acheck(self, question: str, evidence: Sequence[Evidence], answer: str) -> CheckedAnswer:
        """:meth:`check`, awaited on the judge itself (see :meth:`DocumentGate.ajudge`)."""
        try:
            result = await self.ajudge(question, evidence, answer)
        except UNAVAILABLE as exc:
            return self._unchecked(question, answer, exc)
        return self.checked(question, evidence, answer, result)

    def _unchecked(self, question: str, answer: str, exc: Exception) -> CheckedAnswer:
        """The answer when the service did not answer: raised, delivered unchecked, or withheld (``abstain``)."""
        if self.on_unavailable == "raise":
            raise exc
        delivered = bool(self.unavailable(exc, 1))
        return CheckedAnswer(
            question, answer, "deliver" if delivered else "abstain", answer if delivered else None, [], [], [], None
        )

    def checked(self, question: str, evidence: Sequence[Evidence], answer: str, result: JudgeResult) -> CheckedAnswer:
        """What ``result`` decides for ``answer``; raises :class:`~suffice.GateFailedError` for no verdict under
        ``on_error="raise"``."""
        outcome = self.outcome(question, evidence, result)
        if outcome is None:  # no verdict, and on_error="keep": the answer goes out unchecked
            return CheckedAnswer(question, answer, "deliver", answer, [], [], [], None)
        routing = outcome.routing
        delivered = (routing.answer or answer) if routing.route == "deliver" else None
        return CheckedAnswer(
            question,
            answer,
            routing.route,
            delivered,
            list(routing.caveats),
            list(routing.gap),
            list(routing.queries),
            outcome,
        )
