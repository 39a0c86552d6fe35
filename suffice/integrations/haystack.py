"""Haystack: the gate as a pipeline router (``pip install "suffice[haystack]"``).

:class:`SufficiencyRouter` is a Haystack component with ``run(query, documents)`` and two outputs,
exactly one of which each run produces, so a pipeline routes on the verdict: ``documents`` (the
documents the verdict names useful, copies with the verdict in ``meta["suffice"]``) when they are
sufficient, ``insufficient`` (a JSON-ready dict of what is missing and what to retrieve, see
:func:`insufficient_payload`) when they are not.

Haystack reports usage to PostHog by default.  This module switches that off for the process:
``import suffice`` sets ``HAYSTACK_TELEMETRY_ENABLED=False`` before Haystack is imported (see
:mod:`suffice.serving.offline`), and importing this module (or building a router) drops the
telemetry object of a Haystack imported earlier, so no pipeline run reports anything.
"""

import dataclasses
import logging
import os
import typing
from collections import abc

try:
    import haystack
    import haystack.telemetry._telemetry as hs_telemetry
except ImportError as missing:  # the extra is not installed
    raise ImportError(
        'suffice.integrations.haystack needs Haystack (haystack-ai): pip install "suffice[haystack]"'
    ) from missing

import suffice.audit
import suffice.protocol
from suffice import exceptions
from suffice.integrations import gating

__all__ = ["RouterOnInsufficient", "SufficiencyRouter", "insufficient_payload"]

_logger = logging.getLogger("suffice.integrations.haystack")
_JudgeLike = suffice.protocol.JudgeProtocol

#: What :class:`SufficiencyRouter` does with documents the gate judged insufficient: ``"route"`` (the
#: default) emits the verdict on the ``insufficient`` output; ``"raise"`` raises
#: :class:`~suffice.InsufficientContextError` (as the other integrations do by default); ``"empty"``
#: emits ``documents=[]``; ``"keep"`` emits every document on ``documents``.
RouterOnInsufficient = typing.Literal["route", "raise", "empty", "keep"]

#: Haystack's own switch, read once when Haystack is first imported.
_TELEMETRY_ENV = "HAYSTACK_TELEMETRY_ENABLED"


def _telemetry_off() -> None:
    """No usage report from this process: the switch for a Haystack not yet imported, and no telemetry
    object for one imported before suffice (``pipeline_running`` sends nothing when it is ``None``)."""
    os.environ[_TELEMETRY_ENV] = "False"
    if hs_telemetry.telemetry is not None:
        _logger.debug("Haystack's telemetry was on (Haystack imported before suffice): switched off")
    hs_telemetry.telemetry = None


_telemetry_off()


def _evidence(document: haystack.Document, metadata_keys: abc.Sequence[str]) -> gating.Evidence:
    """A Haystack document as the judge sees it: its id (a content hash unless the application set one),
    its text (a document without text shows as empty), its retriever's score and the chosen metadata."""
    return gating.Evidence(
        text=document.content or "",
        id=document.id or None,
        score=document.score,
        metadata=gating.scalar_metadata(document.meta, metadata_keys),
    )


def _with_verdict(document: haystack.Document, outcome: gating.GateOutcome | None) -> haystack.Document:
    """A copy of ``document`` (same id) carrying the verdict in ``meta["suffice"]`` (nothing added when the
    gate gave no verdict and ``on_error="keep"`` let it through)."""
    meta = dict(document.meta)
    if outcome is not None:
        meta[gating.METADATA_KEY] = outcome.metadata()
    return dataclasses.replace(document, meta=meta)


def insufficient_payload(
    question: str, outcome: gating.GateOutcome, documents: abc.Sequence[haystack.Document]
) -> dict[str, typing.Any]:
    """What :class:`SufficiencyRouter` emits on ``insufficient``: JSON-ready (it survives a pipeline's
    deep copies, tracing and ``json.dumps``), the same fields as :class:`~suffice.InsufficientContextError`.

    ``question``; ``missing`` (the gap the verdict names); ``queries`` (what to retrieve next);
    ``route`` and ``reason`` (the gate's routing: ``retrieve_more``, ``abstain`` or ``human_review``);
    ``gate``; ``verdict`` (the whole verdict as JSON); ``document_ids`` (the documents judged, in order)."""
    routing = outcome.routing
    return {
        "question": question,
        "missing": list(routing.gap),
        "queries": list(routing.queries),
        "route": routing.route,
        "reason": routing.reason,
        "gate": outcome.result.gate,
        "verdict": outcome.verdict.model_dump(mode="json"),
        "document_ids": [document.id for document in documents],
    }


@haystack.component
class SufficiencyRouter:
    """A Haystack component that routes on the gate's verdict: ``run(query, documents)`` emits exactly
    one of ``documents`` (sufficient: the useful ones, in their order, copies with the verdict in
    ``meta["suffice"]``) and ``insufficient`` (a dict, :func:`insufficient_payload`).

    ``judge``: any :class:`~suffice.JudgeProtocol` (a :class:`~suffice.Judge`, :class:`~suffice.Client`,
    :class:`~suffice.AsyncClient`; ``run_async`` awaits its ``ajudge``);
    ``gate`` / ``options``: the gate and its
    options; ``on_insufficient``: see :data:`RouterOnInsufficient` (a router routes by default rather
    than raise); ``on_error``: ``"raise"`` (:class:`~suffice.GateFailedError`, which Haystack wraps in its
    ``PipelineRuntimeError``) or ``"keep"`` (every document on ``documents``, unjudged);
    ``on_unavailable`` (``"raise"``, ``"keep"``, ``"empty"``) and ``timeout``: when the service does not
    answer (see :data:`~suffice.integrations.gating.OnUnavailable`); ``metadata_keys``: the ``meta`` keys
    the judge sees.

    ``to_dict`` writes every setting but the judge itself, which holds an engine or a service's key:
    ``init_parameters["judge"]`` describes it (``kind``, ``gate``, a client's ``base_url``), and
    ``Pipeline.from_dict`` needs the judge given back through
    ``DeserializationCallbacks(component_pre_init=...)``; without it the router's ``judge`` is a
    :class:`~suffice.ConfigError`.
    """

    def __init__(
        self,
        judge: _JudgeLike,
        gate: str | None = None,
        options: abc.Mapping[str, typing.Any] | None = None,
        on_insufficient: RouterOnInsufficient = "route",
        on_error: gating.OnError = "raise",
        metadata_keys: abc.Sequence[str] = (),
        audit: suffice.audit.AuditLog | None = None,
        on_unavailable: gating.OnUnavailable = "raise",
        timeout: float | None = None,
        on_review: gating.OnReview | None = None,
    ) -> None:
        if isinstance(judge, abc.Mapping):
            raise exceptions.ConfigError(
                "judge",
                dict(judge),
                "a saved SufficiencyRouter keeps no judge: give it back with Pipeline.from_dict(data, "
                "callbacks=DeserializationCallbacks(component_pre_init=...)) setting init_params['judge']",
            )
        if on_insufficient not in ("route", "raise", "empty", "keep"):
            raise exceptions.ConfigError(
                "on_insufficient", on_insufficient, "must be 'route', 'raise', 'empty' or 'keep'"
            )
        if isinstance(metadata_keys, str) or not all(isinstance(key, str) for key in metadata_keys):
            raise exceptions.ConfigError("metadata_keys", metadata_keys, "must be a list of metadata key names")
        _telemetry_off()
        self.on_insufficient: RouterOnInsufficient = on_insufficient
        self.metadata_keys = list(metadata_keys)
        # "route" reads the outcome itself; the gate then keeps every document and never raises.
        policy: gating.OnInsufficient = "keep" if on_insufficient == "route" else on_insufficient
        self._gate = gating.DocumentGate(
            judge, gate, options, policy, on_error, audit, on_unavailable, timeout, on_review
        )
        self._judge = judge

    @property
    def gate(self) -> str:
        """The name of the gate this router runs."""
        return self._gate.gate_name

    @property
    def on_error(self) -> gating.OnError:
        """What the router does when the gate gives no verdict (see :data:`~suffice.integrations.gating.OnError`)."""
        return self._gate.on_error

    @haystack.component.output_types(documents=list[haystack.Document], insufficient=dict[str, typing.Any])
    def run(self, query: str, documents: list[haystack.Document]) -> dict[str, typing.Any]:
        """Judge ``documents`` for ``query`` and emit one output (see the class docstring); blocking.
        Raises :class:`~suffice.InsufficientContextError` (``on_insufficient="raise"``),
        :class:`~suffice.GateFailedError` (``on_error="raise"``) and :class:`~suffice.ConfigError` for an
        :class:`~suffice.AsyncClient` called where an event loop runs (use ``run_async``)."""
        evidence = [_evidence(document, self.metadata_keys) for document in documents]
        kept, outcome = self._gate.select(query, evidence)
        return self._route(query, documents, kept, outcome)

    @haystack.component.output_types(documents=list[haystack.Document], insufficient=dict[str, typing.Any])
    async def run_async(self, query: str, documents: list[haystack.Document]) -> dict[str, typing.Any]:
        """:meth:`run`, awaited on the judge's ``ajudge``: an :class:`~suffice.AsyncClient` natively, a
        :class:`~suffice.Judge` on a worker thread (cancelling the task stops its generation), a
        :class:`~suffice.Client` on a thread."""
        evidence = [_evidence(document, self.metadata_keys) for document in documents]
        kept, outcome = await self._gate.aselect(query, evidence)
        return self._route(query, documents, kept, outcome)

    def _route(
        self,
        query: str,
        documents: abc.Sequence[haystack.Document],
        kept: abc.Sequence[int],
        outcome: gating.GateOutcome | None,
    ) -> dict[str, typing.Any]:
        if outcome is not None and not outcome.positive and self.on_insufficient == "route":
            return {"insufficient": insufficient_payload(query, outcome, documents)}
        return {"documents": [_with_verdict(documents[i], outcome) for i in kept]}

    def to_dict(self) -> dict[str, typing.Any]:
        """The router's settings for ``Pipeline.to_dict``; the judge only described (see the class docstring)."""
        # A path option (a gate config file) is written as its string: a saved pipeline is YAML or JSON.
        options = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in self._gate.options.items()}
        return haystack.default_to_dict(
            self,
            judge=self._described_judge(),
            gate=self.gate,
            options=options or None,
            on_insufficient=self.on_insufficient,
            on_error=self.on_error,
            on_unavailable=self._gate.on_unavailable,
            timeout=self._gate.timeout,
            on_review=self._gate.on_review,
            metadata_keys=list(self.metadata_keys),
        )

    def _described_judge(self) -> dict[str, typing.Any]:
        """What ``to_dict`` writes for the judge: never its engine, never a client's key."""
        described: dict[str, typing.Any] = {"kind": type(self._judge).__name__, "gate": self.gate}
        base_url = getattr(self._judge, "base_url", None)  # a client's; an engine's settings stay unwritten
        if isinstance(base_url, str):
            described["base_url"] = base_url
        return described
