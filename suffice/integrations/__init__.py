"""The gate inside a RAG application's own retrieval code.

One module per framework, each importing only its framework's core package (installed by the
extra of the same name): :mod:`suffice.integrations.langchain` (``suffice[langchain]``),
:mod:`suffice.integrations.llama_index` (``suffice[llama-index]``) and
:mod:`suffice.integrations.haystack` (``suffice[haystack]``).  What they share (documents to a
record, ids to chunk ids and back, what to do with an insufficient verdict or a failed one) is
:mod:`suffice.integrations.gating`; importing this package imports no framework.
"""
