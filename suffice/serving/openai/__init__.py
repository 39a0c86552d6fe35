"""The openai engine: judging through an existing OpenAI-compatible vLLM server.

Why a server at all: a team that already runs vLLM (a GPU box, a shared endpoint)
should not start a second copy of the model in every judging process.  Everything
that makes a verdict valid stays on the client: the prompt is fitted and templated
with the model's tokenizer, and each request's constraint is generated segment by
segment like the in-process engine does, every answer checked against it.
"""

from suffice.serving.openai.engine import OpenAIEngine

__all__ = ["OpenAIEngine"]
