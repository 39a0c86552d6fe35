"""Haystack: the gate as a pipeline router, and a check of the generated answer (``pip install "suffice[haystack]"``).

:class:`SufficiencyRouter` is a Haystack component with ``run(query, documents)`` and two outputs,
exactly one of which each run produces, so a pipeline routes on the verdict: ``documents`` (the
documents the verdict names useful, copies with the verdict in ``meta["suffice"]``) when they are
sufficient, ``insufficient`` (a JSON-ready dict of what is missing and what to retrieve, see
:func:`insufficient_payload`) when they are not.

:class:`AnswerCheck` runs after the generator: ``run(query, documents, replies=... | answer=...)`` checks the
answer against the documents with a post-generation gate (default: the recovery gate) and emits exactly one
of ``answer`` (delivered: the answer with ``[CITATION:document_id]`` inline) and ``retrieve_more`` /
``abstain`` / ``human_review`` (a JSON-ready dict with the gap and the queries, see :func:`check_payload`),
beside ``checked`` (that dict) on every run.

Haystack reports usage to PostHog by default.  This module switches that off for the process without editing
its environment: a Haystack not imported yet is imported here with ``HAYSTACK_TELEMETRY_ENABLED=False`` (read once,
then; the variable is put back as the application had it), and importing this module (or building a router) drops
the telemetry object of a Haystack imported earlier, so no pipeline run reports anything.
"""

import dataclasses
import logging
import os
import typing
from collections import abc

import suffice.config
from suffice import exceptions
from suffice.integrations import gating
from suffice.serving.offline import environment as _environment

#: Haystack's own switch, read once when Haystack is first imported.
_TELEMETRY_ENV = "HAYSTACK_TELEMETRY_ENABLED"

try:
    # Off for Haystack's first import only (a no-op where the application imported it already).
    with _environment({_TELEMETRY_ENV: "False"}):
        import haystack
        import haystack.telemetry._telemetry as hs_telemetry
except ImportError as missing:  # the extra is not installed
    raise ImportError(
        'suffice.integrations.haystack needs Haystack (haystack-ai): pip install "suffice[haystack]"'
    ) from missing

__all__ = ["AnswerCheck", "RouterOnInsufficient", "SufficiencyRouter", "check_payload", "insufficient_payload"]

_logger = logging.getLogger("suffice.integrations.haystack")
_JudgeLike = suffice.config.JudgeProtocol

#: What :class:`SufficiencyRouter` does with documents the gate judged insufficient: ``"route"`` (the
#: default) emits the verdict on the ``insufficient`` output; ``"raise"`` raises
#: :class:`~suffice.InsufficientContextError` (as the other integrations do by default); ``"empty"``
#: emits ``documents=[]``; ``"keep"`` emits every document on ``documents``.
RouterOnInsufficient = typing.Literal["route", "raise", "empty", "keep"]
#: What :class:`AnswerCheck` reads the answer from: a generator's replies (strings or chat messages).
_Replies = list[str] | list[haystack.dataclasses.ChatMessage] | None


def _telemetry_off() -> None:
    """No usage report from this process: no telemetry object for a Haystack imported before this module
    (``pipeline_running`` sends nothing when it is ``None``)."""
    if hs_telemetry.telemetry is not None:
        _logger.debug("Haystack's telemetry was on (Haystack imported before suffice): switched off")
    hs_telemetry.telemetry = None


_telemetry_off()


def _refuse_saved_judge(judge: object, component: str) -> None:
    """A judge read back from a saved pipeline is only its description (see ``to_dict``): a
    :class:`~suffice.ConfigError` saying how to give the judge back."""
    if isinstance(judge, abc.Mapping):
        raise exceptions.ConfigError(
            "judge",
            dict(judge),
            f"a saved {component} keeps no judge: give it back with Pipeline.from_dict(data, "
            "callbacks=DeserializationCallbacks(component_pre_init=...)) setting init_params['judge']",
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


class _Component:
    """What the router and the check share: the gate they run, and the judge, which ``to_dict`` only describes
    (never its engine, never a client's key)."""

    def _hold(self, judge: _JudgeLike, gate: gating.DocumentGate) -> None:
        """Keep the judge and the gate (a method, not ``__init__``: Haystack's decorator rebuilds each component
        class, so a ``super()`` in one would not find the class it names)."""
        self._judge = judge
        self._gate = gate
        _telemetry_off()

    @property
    def gate(self) -> str:
        """The name of the gate this component runs."""
        return self._gate.gate_name

    @property
    def on_error(self) -> gating.OnError:
        """What the component does when the gate gives no verdict (see :data:`~suffice.integrations.gating.OnError`)."""
        return self._gate.on_error

    def _evidence(self, documents: abc.Sequence[haystack.Document]) -> list[gating.Evidence]:
        """The documents as the judge sees them: each one's id (a content hash unless the application set one), its
        text (a document without text shows as empty), its retriever's score and the chosen metadata."""
        return [
            gating.Evidence(
                text=document.content or "",
                id=document.id or None,
                score=document.score,
                metadata=gating.scalar_metadata(document.meta, self._gate.metadata_keys),
            )
            for document in documents
        ]

    def to_dict(self) -> dict[str, typing.Any]:
        """The component's settings for ``Pipeline.to_dict``; the judge only described (see the class docstring)."""
        gate = self._gate
        judge: dict[str, typing.Any] = {"kind": type(self._judge).__name__, "gate": self.gate}
        base_url = getattr(self._judge, "base_url", None)  # a client's; an engine's settings stay unwritten
        if isinstance(base_url, str):
            judge["base_url"] = base_url
        # A path option (a gate config file) as its string: a saved pipeline is YAML or JSON.
        options = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in gate.options.items()}
        return haystack.default_to_dict(
            self,
            judge=judge,
            gate=self.gate,
            options=options or None,
            on_error=gate.on_error,
            on_unavailable=gate.on_unavailable,
            timeout=gate.timeout,
            metadata_keys=list(gate.metadata_keys),
            **self._saved(),
        )

    def _saved(self) -> dict[str, typing.Any]:
        """What ``to_dict`` writes besides the settings every component takes."""
        return {}


@haystack.component
class SufficiencyRouter(_Component):
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
        *,
        on_insufficient: RouterOnInsufficient = "route",
        on_review: gating.OnReview | None = None,
        **settings: typing.Unpack[gating.CheckSettings],
    ) -> None:
        _refuse_saved_judge(judge, "SufficiencyRouter")
        if on_insufficient not in ("route", "raise", "empty", "keep"):
            raise exceptions.ConfigError(
                "on_insufficient", on_insufficient, "must be 'route', 'raise', 'empty' or 'keep'"
            )
        self.on_insufficient: RouterOnInsufficient = on_insufficient
        # "route" reads the outcome itself; the gate then keeps every document and never raises.
        policy: gating.OnInsufficient = "keep" if on_insufficient == "route" else on_insufficient
        self._hold(judge, gating.DocumentGate(judge, on_insufficient=policy, on_review=on_review, **settings))

    @haystack.component.output_types(documents=list[haystack.Document], insufficient=dict[str, typing.Any])
    def run(self, query: str, documents: list[haystack.Document]) -> dict[str, typing.Any]:
        """Judge ``documents`` for ``query`` and emit one output (see the class docstring); blocking.
        Raises :class:`~suffice.InsufficientContextError` (``on_insufficient="raise"``),
        :class:`~suffice.GateFailedError` (``on_error="raise"``) and :class:`~suffice.ConfigError` for an
        :class:`~suffice.AsyncClient` called where an event loop runs (use ``run_async``)."""
        kept, outcome = self._gate.select(query, self._evidence(documents))
        return self._route(query, documents, kept, outcome)

    @haystack.component.output_types(documents=list[haystack.Document], insufficient=dict[str, typing.Any])
    async def run_async(self, query: str, documents: list[haystack.Document]) -> dict[str, typing.Any]:
        """:meth:`run`, awaited on the judge's ``ajudge``: an :class:`~suffice.AsyncClient` natively, a
        :class:`~suffice.Judge` on a worker thread (cancelling the task stops its generation), a
        :class:`~suffice.Client` on a thread."""
        kept, outcome = await self._gate.aselect(query, self._evidence(documents))
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

    def _saved(self) -> dict[str, typing.Any]:
        return {"on_insufficient": self.on_insufficient, "on_review": self._gate.on_review}


def check_payload(checked: gating.CheckedAnswer, documents: abc.Sequence[haystack.Document]) -> dict[str, typing.Any]:
    """What :class:`AnswerCheck` emits on ``checked`` and on a negative route: JSON-ready, like
    :func:`insufficient_payload`.

    ``question``; ``answer`` (as given); ``route`` and ``reason`` (the gate's routing; ``reason`` is ``None``
    when no verdict decided); ``delivered`` (what ``answer`` carries on ``deliver``, else ``None``);
    ``cited_answer`` (the answer with ``[CITATION:document_id]`` after each segment that names sources,
    whatever the route); ``caveats``; ``missing`` (the gap: what the documents do not support); ``queries``
    (what to retrieve next); ``segments`` (each segment of the answer with its label and sources);
    ``checked`` (whether a verdict decided); ``gate``; ``verdict`` (the whole verdict as JSON, ``None``
    unchecked); ``document_ids`` (the documents judged, in order)."""
    outcome = checked.outcome
    return {
        "question": checked.question,
        "answer": checked.answer,
        "route": checked.route,
        "reason": None if outcome is None else outcome.routing.reason,
        "delivered": checked.delivered,
        "cited_answer": checked.cited_answer,
        "caveats": list(checked.caveats),
        "missing": list(checked.gap),
        "queries": list(checked.queries),
        "segments": [segment.model_dump(mode="json") for segment in checked.segments],
        "checked": checked.checked,
        "gate": None if outcome is None else outcome.result.gate,
        "verdict": None if outcome is None else outcome.verdict.model_dump(mode="json"),
        "document_ids": [document.id for document in documents],
    }


#: The outputs of :class:`AnswerCheck`, each run emitting ``checked`` and exactly one of the others.
_CHECK_OUTPUTS: dict[str, typing.Any] = {
    "answer": str,
    "retrieve_more": dict[str, typing.Any],
    "abstain": dict[str, typing.Any],
    "human_review": dict[str, typing.Any],
    "checked": dict[str, typing.Any],
}


@haystack.component
class AnswerCheck(_Component):
    """A Haystack component that checks a generated answer against its documents with a post-generation gate
    (default: the recovery gate) and routes it: ``run(query, documents, replies=None, answer=None)``.

    The answer is ``answer`` (a string) or ``replies``, a generator's output (strings, or chat messages whose
    text is read) holding exactly one reply: give one of the two.  Each run emits ``checked``
    (:func:`check_payload`) and exactly one of ``answer`` (the route is ``deliver``: the answer byte for byte
    with ``[CITATION:document_id]`` after each segment the documents support, and under a threshold that accepts
    partial support the gate's unsupported marker after each segment they do not; its caveats are in
    ``checked``), ``retrieve_more``, ``abstain`` and ``human_review`` (each the :func:`check_payload` dict,
    with ``missing`` and ``queries``).  A document's id is its source id in the citations (as
    :class:`SufficiencyRouter` judges it: its Haystack id, a content hash unless the application set one).

    The settings are :class:`SufficiencyRouter`'s less ``on_insufficient`` and ``on_review`` (a negative
    verdict is always routed): ``on_error="raise"`` (the default) raises :class:`~suffice.GateFailedError`
    when the gate gives no verdict, ``"keep"`` delivers the answer unchecked on ``answer``; when the service
    does not answer, ``on_unavailable="keep"`` delivers it unchecked and ``"empty"`` routes it to ``abstain``.
    ``run_async`` awaits the judge's ``ajudge``.  ``to_dict`` describes the judge as the router's does, and
    ``Pipeline.from_dict`` needs it given back the same way.
    """

    _gate: gating.AnswerGate

    def __init__(self, judge: _JudgeLike, **settings: typing.Unpack[gating.CheckSettings]) -> None:
        _refuse_saved_judge(judge, "AnswerCheck")
        self._hold(judge, gating.AnswerGate(judge, owner="AnswerCheck", **settings))

    @haystack.component.output_types(**_CHECK_OUTPUTS)
    def run(
        self, query: str, documents: list[haystack.Document], replies: _Replies = None, answer: str | None = None
    ) -> dict[str, typing.Any]:
        """Check the answer for ``query`` against ``documents`` and emit its route (see the class docstring);
        blocking.  Raises :class:`~suffice.InputError` naming ``replies`` or ``answer`` when neither or both
        are given, or the replies are not one reply with text."""
        checked = self._gate.check(query, self._evidence(documents), _answer(replies, answer))
        return _check_outputs(checked, documents)

    @haystack.component.output_types(**_CHECK_OUTPUTS)
    async def run_async(
        self, query: str, documents: list[haystack.Document], replies: _Replies = None, answer: str | None = None
    ) -> dict[str, typing.Any]:
        """:meth:`run`, awaited on the judge's ``ajudge`` (see :meth:`SufficiencyRouter.run_async`)."""
        checked = await self._gate.acheck(query, self._evidence(documents), _answer(replies, answer))
        return _check_outputs(checked, documents)


def _answer(replies: abc.Sequence[str | haystack.dataclasses.ChatMessage] | None, answer: str | None) -> str:
    """The answer to check, from ``answer`` or the one reply in ``replies``."""
    if (replies is None) == (answer is None):
        both = answer is not None
        raise exceptions.InputError(
            "replies" if both else "answer",
            "give the answer to check once: as answer (a string) or as replies (a generator's), "
            + ("not both" if both else "neither was given"),
        )
    if answer is not None:
        if not isinstance(answer, str):
            raise exceptions.InputError("answer", f"must be a string, not {type(answer).__name__}")
        return answer
    if isinstance(replies, str) or not isinstance(replies, abc.Sequence):
        raise exceptions.InputError("replies", f"must be a list of replies, not {type(replies).__name__}")
    if len(replies) != 1:
        raise exceptions.InputError(
            "replies", f"must hold exactly one reply (the one checked and delivered), not {len(replies)}"
        )
    reply = replies[0]
    text = reply.text if isinstance(reply, haystack.dataclasses.ChatMessage) else reply
    if not isinstance(text, str):
        raise exceptions.InputError("replies", f"the reply must be a string or a chat message with text, not {reply!r}")
    return text


def _check_outputs(checked: gating.CheckedAnswer, documents: abc.Sequence[haystack.Document]) -> dict[str, typing.Any]:
    """``checked`` on every run; ``answer`` on a delivery, else the route's own output."""
    payload = check_payload(checked, documents)
    if checked.route == "deliver":
        assert checked.delivered is not None, "a delivered check carries what it delivers"
        return {"answer": checked.delivered, "checked": payload}
    return {checked.route: payload, "checked": payload}
