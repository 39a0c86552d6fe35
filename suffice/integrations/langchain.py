"""LangChain: a document compressor that keeps what the gate's verdict names useful, and a runnable
that checks a generated answer (``pip install "suffice[langchain]"``).

:class:`SufficiencyCompressor` is a ``BaseDocumentCompressor``: inside a
``ContextualCompressionRetriever`` (``langchain-classic``) or called on a retriever's documents in
an LCEL chain, it returns the documents the verdict names useful, in their order, each a copy with
the verdict at ``metadata["suffice"]``.  :class:`RecoveryCheck` is a ``Runnable`` that runs the
post-generation gate on ``{"question", "documents", "answer"}`` and returns a :class:`CheckedAnswer`
whose ``route`` a chain branches on.  Both build on :mod:`suffice.integrations.gating`.

Only ``langchain-core`` is imported.  It sends nothing anywhere unless the application's environment
turns LangSmith tracing on (``LANGSMITH_TRACING``); suffice neither turns it on nor off, since that
choice covers the application's whole chain, not suffice's part of it.

Names are imported as modules here: this module's namespace holds its public names only.
"""

import typing
from collections import abc

try:
    from langchain_core import callbacks as lc_callbacks
    from langchain_core import documents as lc_documents
    from langchain_core import messages as lc_messages
    from langchain_core import runnables as lc_runnables
except ImportError as missing:  # the extra is not installed
    raise ImportError(
        'suffice.integrations.langchain needs langchain-core: pip install "suffice[langchain]"'
    ) from missing
import pydantic

import suffice.config
from suffice import exceptions
from suffice.integrations import gating

__all__ = ["DEFAULT_SCORE_KEYS", "CheckedAnswer", "RecoveryCheck", "SufficiencyCompressor"]

#: The metadata keys read as a document's retriever score, the first holding a number wins:
#: LangChain's rerankers write ``relevance_score``; a vector store's score is often put at ``score``.
DEFAULT_SCORE_KEYS: tuple[str, ...] = ("relevance_score", "score")

_JudgeLike = suffice.config.JudgeProtocol


def _evidence(
    documents: abc.Sequence[lc_documents.Document], metadata_keys: abc.Sequence[str], score_keys: abc.Sequence[str]
) -> list[gating.Evidence]:
    """The documents as the judge sees them: text, id (``None``: its position stands in), the
    retriever's score and the chosen metadata keys."""
    evidence = []
    for doc in documents:
        score = next(
            (
                float(value)
                for key in score_keys
                if isinstance(value := doc.metadata.get(key), int | float) and not isinstance(value, bool)
            ),
            None,
        )
        evidence.append(
            gating.Evidence(
                doc.page_content, doc.id, score=score, metadata=gating.scalar_metadata(doc.metadata, metadata_keys)
            )
        )
    return evidence


class SufficiencyCompressor(lc_documents.BaseDocumentCompressor):
    """A ``BaseDocumentCompressor`` that keeps the documents the gate's verdict names useful.

    ``judge``: any :class:`suffice.JudgeProtocol` (a :class:`suffice.Judge`, :class:`suffice.Client`,
    :class:`suffice.AsyncClient`);
    ``gate`` / ``options``: which gate and its options (default: the judge's own gate);
    ``on_insufficient``: ``"raise"`` (:class:`suffice.InsufficientContextError`), ``"empty"`` or
    ``"keep"``; ``on_error``: ``"raise"`` (:class:`suffice.GateFailedError`) or ``"keep"`` (every
    document, unjudged); ``on_unavailable``: ``"raise"`` (the client's :class:`suffice.ServiceUnavailableError`
    or :class:`suffice.ServiceTimeoutError`), ``"keep"`` (every document, unjudged) or ``"empty"`` when the
    service does not answer within ``timeout`` seconds (see :mod:`suffice.integrations.gating`);
    ``metadata_keys``: the metadata keys shown to the judge; ``score_keys``: the
    metadata keys read as the document's retriever score (see :data:`DEFAULT_SCORE_KEYS`).

    A document's ``id`` is its chunk id (``None``: its position).  Returned documents are copies,
    in the order given, with the verdict at ``metadata["suffice"]``; the caller's are not changed.
    ``acompress_documents`` awaits the judge's ``ajudge`` (an :class:`~suffice.AsyncClient` natively, an
    in-process judge on a worker thread whose generation stops when the task is cancelled).
    """

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

    judge: _JudgeLike
    gate: str | None = None
    options: dict[str, typing.Any] | None = None
    on_insufficient: gating.OnInsufficient = "raise"
    on_error: gating.OnError = "raise"
    on_unavailable: gating.OnUnavailable = "raise"
    timeout: float | None = None
    on_review: gating.OnReview | None = None
    metadata_keys: tuple[str, ...] = ()
    score_keys: tuple[str, ...] = DEFAULT_SCORE_KEYS
    _gate: gating.DocumentGate = pydantic.PrivateAttr()

    def __init__(
        self,
        judge: _JudgeLike,
        *,
        score_keys: abc.Sequence[str] = DEFAULT_SCORE_KEYS,
        **settings: typing.Unpack[gating.GateSettings],
    ) -> None:
        # Built first: a bad setting is a ConfigError naming it, before pydantic sees the fields.
        document_gate = gating.DocumentGate(judge, **settings)
        # The fields as the gate settled them; a dict: the base's typed __init__ names none of them.
        settled = ("on_insufficient", "on_error", "on_unavailable", "timeout", "on_review", "metadata_keys")
        fields: dict[str, typing.Any] = {name: getattr(document_gate, name) for name in settled}
        fields.update(judge=judge, gate=document_gate.gate_name, options=document_gate.options or None)
        fields["score_keys"] = tuple(score_keys)
        super().__init__(**fields)
        self._gate = document_gate

    def compress_documents(
        self,
        documents: abc.Sequence[lc_documents.Document],
        query: str,
        callbacks: lc_callbacks.Callbacks | None = None,
    ) -> abc.Sequence[lc_documents.Document]:
        """The documents to keep for ``query`` (see the class docstring); raises
        :class:`~suffice.InsufficientContextError` or :class:`~suffice.GateFailedError` as set."""
        kept, outcome = self._gate.select(query, _evidence(documents, self.metadata_keys, self.score_keys))
        return _kept(documents, kept, outcome)

    async def acompress_documents(
        self,
        documents: abc.Sequence[lc_documents.Document],
        query: str,
        callbacks: lc_callbacks.Callbacks | None = None,
    ) -> abc.Sequence[lc_documents.Document]:
        """:meth:`compress_documents`, awaited on the judge itself (not the blocking call on a thread)."""
        kept, outcome = await self._gate.aselect(query, _evidence(documents, self.metadata_keys, self.score_keys))
        return _kept(documents, kept, outcome)


def _kept(
    documents: abc.Sequence[lc_documents.Document], kept: list[int], outcome: gating.GateOutcome | None
) -> list[lc_documents.Document]:
    """Copies of the kept documents, the verdict (when there is one) in each one's metadata."""
    verdict: dict[str, typing.Any] = {} if outcome is None else {gating.METADATA_KEY: outcome.metadata()}
    return [documents[i].model_copy(update={"metadata": {**documents[i].metadata, **verdict}}) for i in kept]


#: What :class:`RecoveryCheck` returns (the one class every integration's check returns: see
#: :class:`suffice.integrations.gating.CheckedAnswer`).
CheckedAnswer = gating.CheckedAnswer


class RecoveryCheck(lc_runnables.Runnable[abc.Mapping[str, typing.Any], CheckedAnswer]):
    """A ``Runnable`` that checks a generated answer against its documents with a post-generation
    gate (default: the recovery gate) and returns a :class:`CheckedAnswer`.

    Input: a mapping with ``"question"`` (str), ``"documents"`` (LangChain ``Document`` objects) and
    ``"answer"`` (str, or a message whose text is the answer).  A negative verdict is routed, never
    raised: the chain branches on ``route``.  The parameters are :class:`SufficiencyCompressor`'s,
    less ``on_insufficient``; ``on_error="raise"`` (the default) raises :class:`~suffice.GateFailedError`
    when the gate gives no verdict, ``"keep"`` delivers the answer unchecked; when the service does not
    answer, ``on_unavailable="keep"`` delivers it unchecked and ``"empty"`` routes it to ``"abstain"``.
    """

    def __init__(
        self,
        judge: _JudgeLike,
        *,
        score_keys: abc.Sequence[str] = DEFAULT_SCORE_KEYS,
        **settings: typing.Unpack[gating.CheckSettings],
    ) -> None:
        self._gate = gating.AnswerGate(judge, owner="RecoveryCheck", **settings)
        self.gate = self._gate.gate_name
        self.score_keys = tuple(score_keys)

    def invoke(
        self,
        input: abc.Mapping[str, typing.Any],
        config: lc_runnables.RunnableConfig | None = None,
        **kwargs: typing.Any,
    ) -> CheckedAnswer:
        """Check ``input["answer"]`` (blocking)."""
        return self._call_with_config(self._check, input, config, run_type="chain")

    async def ainvoke(
        self,
        input: abc.Mapping[str, typing.Any],
        config: lc_runnables.RunnableConfig | None = None,
        **kwargs: typing.Any,
    ) -> CheckedAnswer:
        """Check ``input["answer"]``, awaited on the judge itself (see
        :meth:`suffice.integrations.gating.DocumentGate.ajudge`), not the blocking call on a thread."""
        return await self._acall_with_config(self._acheck, input, config, run_type="chain")

    def _check(self, input: abc.Mapping[str, typing.Any]) -> CheckedAnswer:
        return self._gate.check(*self._read(input))

    async def _acheck(self, input: abc.Mapping[str, typing.Any]) -> CheckedAnswer:
        return await self._gate.acheck(*self._read(input))

    def _read(self, input: abc.Mapping[str, typing.Any]) -> tuple[str, list[gating.Evidence], str]:
        """The question, documents and answer of one input; a missing or mistyped one is an
        :class:`~suffice.exceptions.InputError` naming it."""
        if not isinstance(input, abc.Mapping):
            raise exceptions.InputError("input", "must be a mapping with 'question', 'documents' and 'answer'")
        question = input.get("question")
        if not isinstance(question, str):
            raise exceptions.InputError("question", f"must be a string, not {type(question).__name__}")
        documents = input.get("documents")
        if not isinstance(documents, abc.Sequence) or not all(
            isinstance(doc, lc_documents.Document) for doc in documents
        ):
            raise exceptions.InputError("documents", "must be a list of LangChain Document objects")
        answer = input.get("answer")
        if isinstance(answer, lc_messages.BaseMessage):
            answer = answer.text
        if not isinstance(answer, str):
            raise exceptions.InputError("answer", f"must be a string or a message, not {type(answer).__name__}")
        return question, _evidence(documents, self._gate.metadata_keys, self.score_keys), answer
