"""LlamaIndex: :class:`SufficiencyPostprocessor`, a node postprocessor that lets through the nodes a
suffice gate's verdict names useful, for ``index.as_query_engine(node_postprocessors=[...])``, and
:class:`ResponseCheck`, which checks a query engine's ``Response`` against its own source nodes with a
post-generation gate and returns a :class:`CheckedAnswer` (the route, and on a delivery the answer with
``[CITATION:node_id]`` inline).

It imports llama-index-core only (``pip install "suffice[llama-index]"``).  What it does around the
judge (ids, an insufficient or a failed verdict, a judge or a client, the async path) is
:mod:`suffice.integrations.gating`'s; this module turns nodes into evidence and kept indices back
into nodes.

Offline: nothing here tokenizes, embeds or downloads.  The query engine around it loads LlamaIndex's
default tokenizer (tiktoken's ``cl100k_base``) and, for long texts, NLTK's sentence splitter: both
ship inside llama-index-core (``llama_index/core/_static``) and load from there, unless the
environment points ``TIKTOKEN_CACHE_DIR`` or ``NLTK_DATA`` at a folder without them.
"""

from collections.abc import Sequence as _Sequence
from typing import Unpack as _Unpack

from suffice.config import JudgeProtocol as _JudgeProtocol
from suffice.exceptions import ConfigError as _ConfigError
from suffice.exceptions import InputError as _InputError
from suffice.integrations import gating

try:
    from llama_index.core import schema
    from llama_index.core.base.response import schema as _response
    from llama_index.core.postprocessor import types as _types
except ImportError as _missing:  # the extra names the one package this module needs
    raise ImportError(
        'suffice.integrations.llama_index needs llama-index-core: pip install "suffice[llama-index]"'
    ) from _missing

__all__ = ["CheckedAnswer", "ResponseCheck", "SufficiencyPostprocessor"]

#: What :class:`ResponseCheck` returns (the class every integration's check returns: see
#: :class:`suffice.integrations.gating.CheckedAnswer`).
CheckedAnswer = gating.CheckedAnswer

#: What :class:`ResponseCheck` takes: the question, the query engine's response, the nodes the answer came from.
_Query = str | schema.QueryBundle
_Response = _response.RESPONSE_TYPE | None
_Nodes = _Sequence[schema.NodeWithScore] | None


class SufficiencyPostprocessor(_types.BaseNodePostprocessor):
    """A LlamaIndex node postprocessor that keeps the nodes a suffice gate's verdict names useful.

    ``judge``: any :class:`~suffice.JudgeProtocol`: an in-process :class:`~suffice.Judge`, a
    :class:`~suffice.Client` or :class:`~suffice.AsyncClient` of ``suffice serve``; ``gate`` and ``options``:
    which gate and its options; ``on_insufficient`` (``"raise"``, ``"empty"``, ``"keep"``) and
    ``on_error`` (``"raise"``, ``"keep"``), ``on_unavailable`` (``"raise"``, ``"keep"``, ``"empty"``) and
    ``timeout`` (seconds a call to the service may take): see :mod:`suffice.integrations.gating`;
    ``metadata_keys``: the node metadata keys shown to the judge (none by default).

    The question is the query bundle's ``query_str``; each node's text (without its metadata), its
    ``node_id`` as the chunk id and its score as the chunk's score reach the judge.  Kept nodes
    are copies, in the order given, with the verdict at ``metadata["suffice"]``, a key left out of
    the text LlamaIndex gives the LLM and the embedding model; the caller's nodes are not changed.
    Under ``on_error="keep"`` a node the gate could not judge comes back as given, without the key.
    """

    metadata_keys: tuple[str, ...] = ()
    _gate: gating.DocumentGate

    def __init__(self, judge: _JudgeProtocol, **settings: _Unpack[gating.GateSettings]) -> None:
        super().__init__()
        self._gate = gating.DocumentGate(judge, **settings)
        self.metadata_keys = self._gate.metadata_keys

    @classmethod
    def class_name(cls) -> str:
        return "SufficiencyPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[schema.NodeWithScore], query_bundle: schema.QueryBundle | None = None
    ) -> list[schema.NodeWithScore]:
        question = _question(query_bundle)
        kept, outcome = self._gate.select(question, _evidence(nodes, self.metadata_keys))
        return _kept(nodes, kept, outcome)

    async def _apostprocess_nodes(
        self, nodes: list[schema.NodeWithScore], query_bundle: schema.QueryBundle | None = None
    ) -> list[schema.NodeWithScore]:
        question = _question(query_bundle)
        kept, outcome = await self._gate.aselect(question, _evidence(nodes, self.metadata_keys))
        return _kept(nodes, kept, outcome)


def _evidence(nodes: _Sequence[schema.NodeWithScore], metadata_keys: _Sequence[str]) -> list[gating.Evidence]:
    """The nodes as the judge sees them: each node's text without its metadata, its ``node_id`` as the chunk
    id (and so the source id a citation names), its score and the chosen metadata keys."""
    return [
        gating.Evidence(
            text=scored.node.get_content(metadata_mode=schema.MetadataMode.NONE),
            id=scored.node.node_id,
            score=scored.score,
            metadata=gating.scalar_metadata(scored.node.metadata, metadata_keys),
        )
        for scored in nodes
    ]


def _question(query_bundle: schema.QueryBundle | None) -> str:
    if query_bundle is None:
        raise _ConfigError(
            "query_bundle", None, "the gate judges the nodes against the question: give query_bundle or query_str"
        )
    return query_bundle.query_str


def _kept(
    nodes: _Sequence[schema.NodeWithScore], kept: list[int], outcome: gating.GateOutcome | None
) -> list[schema.NodeWithScore]:
    if outcome is None:  # on_error / on_unavailable "keep": through unjudged, as given
        return [nodes[i] for i in kept]
    return [_with_verdict(nodes[i], outcome) for i in kept]


def _with_verdict(scored: schema.NodeWithScore, outcome: gating.GateOutcome) -> schema.NodeWithScore:
    """A copy of ``scored`` carrying the verdict; LlamaIndex renders a node's metadata into the LLM's
    prompt and the embedded text unless a key is excluded, so the verdict's key is excluded from both."""
    node = scored.node
    copy = node.model_copy(
        update={
            "metadata": {**node.metadata, gating.METADATA_KEY: outcome.metadata()},
            "excluded_llm_metadata_keys": _with_key(node.excluded_llm_metadata_keys),
            "excluded_embed_metadata_keys": _with_key(node.excluded_embed_metadata_keys),
        }
    )
    return scored.model_copy(update={"node": copy})


def _with_key(keys: list[str]) -> list[str]:
    return keys if gating.METADATA_KEY in keys else [*keys, gating.METADATA_KEY]


class ResponseCheck:
    """Checks a generated answer against the nodes it was generated from with a post-generation gate (default:
    the recovery gate) and routes it: :meth:`check` returns a :class:`CheckedAnswer`.

    ``check(query, response)`` reads a query engine's ``Response``: its text is the answer and its
    ``source_nodes`` the evidence (what the LLM was shown); ``check(query, nodes=..., answer=...)`` takes them
    apart.  On ``deliver``, ``delivered`` is the answer byte for byte with ``[CITATION:node_id]`` after each
    segment the nodes support (and, under a threshold that accepts partial support, the gate's unsupported
    marker after each segment they do not); ``segments`` holds each segment's label and sources; a negative
    verdict is routed, never raised, with ``gap`` and ``queries``.

    The settings are :class:`SufficiencyPostprocessor`'s less ``on_insufficient`` and ``on_review``:
    ``on_error="raise"`` (the default) raises :class:`~suffice.GateFailedError` when the gate gives no verdict,
    ``"keep"`` delivers the answer unchecked; when the service does not answer, ``on_unavailable="keep"``
    delivers it unchecked and ``"empty"`` routes it to ``"abstain"``.  :meth:`acheck` awaits the judge's
    ``ajudge``.
    """

    def __init__(self, judge: _JudgeProtocol, **settings: _Unpack[gating.CheckSettings]) -> None:
        self._gate = gating.AnswerGate(judge, owner="ResponseCheck", **settings)

    @property
    def gate(self) -> str:
        """The name of the gate this check runs."""
        return self._gate.gate_name

    def check(
        self, query: _Query, response: _Response = None, *, nodes: _Nodes = None, answer: str | None = None
    ) -> gating.CheckedAnswer:
        """Check the answer for ``query`` (a string or a query bundle) against its nodes (blocking).  An
        :class:`~suffice.InputError` names what is missing or mistyped."""
        return self._gate.check(*self._read(query, response, nodes, answer))

    async def acheck(
        self, query: _Query, response: _Response = None, *, nodes: _Nodes = None, answer: str | None = None
    ) -> gating.CheckedAnswer:
        """:meth:`check`, awaited on the judge's ``ajudge`` (see
        :meth:`suffice.integrations.gating.DocumentGate.ajudge`), not the blocking call on a thread."""
        return await self._gate.acheck(*self._read(query, response, nodes, answer))

    def _read(
        self, query: object, response: object, nodes: _Nodes, answer: object
    ) -> tuple[str, list[gating.Evidence], str]:
        if isinstance(query, schema.QueryBundle):
            query = query.query_str
        if not isinstance(query, str):
            raise _InputError("query", f"must be a string or a QueryBundle, not {type(query).__name__}")
        if response is not None:
            if nodes is not None or answer is not None:
                raise _InputError(
                    "nodes" if nodes is not None else "answer",
                    "is read from the response (its source nodes and text): give a response or nodes and answer",
                )
            if not isinstance(response, _response.Response):
                raise _InputError(
                    "response",
                    f"must be a LlamaIndex Response, not {type(response).__name__} "
                    "(a streaming response: check its get_response() once it is whole)",
                )
            nodes, answer = response.source_nodes, response.response
            if not isinstance(answer, str):
                raise _InputError("response", "holds no answer text to check")
        elif nodes is None or answer is None:
            raise _InputError(
                "response" if nodes is None and answer is None else ("nodes" if nodes is None else "answer"),
                "give the response to check, or its nodes and answer",
            )
        if not isinstance(answer, str):
            raise _InputError("answer", f"must be a string, not {type(answer).__name__}")
        if not isinstance(nodes, _Sequence) or not all(isinstance(n, schema.NodeWithScore) for n in nodes):
            raise _InputError("nodes", "must be a list of LlamaIndex NodeWithScore objects")
        return query, _evidence(nodes, self._gate.metadata_keys), answer
