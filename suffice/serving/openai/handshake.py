"""The openai engine's start-up handshake: which model the server serves, its context
window, and whether the tokenizer in use gives the server's ids."""

from __future__ import annotations

from pathlib import Path

from suffice.exceptions import ConfigError, EngineError, EngineUnreachableError
from suffice.serving.openai.client import Client, ServerError
from suffice.serving.openai.tokens import Tokens

NOT_VLLM = "is this a vLLM OpenAI-compatible server?"
#: What the tokenizer probe compares, local ids against the server's (varied scripts).
_TOKENIZER_PROBE = "suffice: Jane Austen wrote Emma (1815), 東京 — naïve café."


def pick_model(client: Client, served_model: str | None) -> tuple[dict[str, str], int | None]:
    """The model named ``served_model``, or the server's only one: its ``served_model``
    name and ``served_root``, what it loaded (vLLM lists the folder or hub name as
    ``root``: another model behind the same served name shows there); and the server's
    context window for it, where it says."""
    try:
        data = client.call("GET", "/v1/models").json()
        models = [m for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except ServerError as exc:
        raise ConfigError("base_url", client.base_url, f"{exc}: {NOT_VLLM}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("base_url", client.base_url, f"/v1/models did not list models: {NOT_VLLM}") from exc
    names = [str(m["id"]) for m in models]
    server = f"the server at {client.base_url}"
    if served_model is not None:
        if served_model not in names:
            raise ConfigError("served_model", served_model, f"{server} serves {', '.join(names) or 'no model'}")
        chosen = models[names.index(served_model)]
    elif len(models) == 1:
        chosen = models[0]
    elif not models:
        raise ConfigError("base_url", client.base_url, "the server lists no model")
    else:
        raise ConfigError("served_model", None, f"{server} serves several models ({', '.join(names)}): name one")
    length = chosen.get("max_model_len")
    served = {"served_model": str(chosen["id"]), "served_root": str(chosen.get("root") or "")}
    return served, int(length) if isinstance(length, int) and length > 0 else None


def check_tokenizer(client: Client, tokens: Tokens, folder: Path | None) -> None:
    """Without a local tokenizer, fail at start, not per request, when the server has no
    ``/tokenize`` route.  A local tokenizer must give the server's ids: another model's
    ids reach past the server's vocabulary, and every completion is refused.  A server
    whose ``/tokenize`` does not answer (none, refused, a gateway's page) cannot be
    asked: the local tokenizer is then trusted."""
    if tokens.local is None:
        try:
            tokens.server_encode("suffice")
        except ServerError as exc:
            raise ConfigError(
                "base_url", client.base_url, f"{exc}: {NOT_VLLM} (or give a local tokenizer folder with --tokenizer)"
            ) from exc
        return
    try:
        theirs = tokens.server_encode(_TOKENIZER_PROBE)
    except EngineUnreachableError:
        raise
    except EngineError:  # no /tokenize here (a gateway with /v1/* only, a refused route)
        return
    ours = tokens.local.text_ids(_TOKENIZER_PROBE)
    if ours != theirs:
        raise ConfigError(
            "tokenizer",
            str(folder),
            f"does not tokenize as the model the server at {client.base_url} serves ({tokens.model_id}): "
            f"{ours[:8]}... against the server's {theirs[:8]}...; give that model's tokenizer folder",
        )
