"""Prompt templates are files, versioned by folder: ``<folder>/<version>/`` (a gate keeps
its own in ``templates/`` beside its code).

Each version holds ``system.j2`` (the instructions, identical for every item, so
vLLM's prefix cache computes them once) and ``user.j2`` (the per-item text).
Rendering uses ``StrictUndefined``: a missing variable is an error, never an
empty string in a prompt.  The user template puts every piece of user text inside a
:class:`Fence`, so that no text can pass for the prompt's own structure.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from suffice.exceptions import ConfigError
from suffice.records.text import WORD_JOINER

# Re-exported: user text as the prompt shows it (it lives in suffice.records.text, which checks keys with it).
from suffice.records.text import normalise as normalise

#: The harness's own templates (query rewriting).
TEMPLATE_ROOT = Path(__file__).parent / "templates"


@cache
def _environment(folder: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        keep_trailing_newline=False,
    )


Message = dict[str, str]


def fence_seed(texts: Sequence[str | None]) -> str:
    """A digest of ``texts``, all of an item's, to derive its :class:`Fence` from."""
    material = json.dumps(list(texts), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(material).hexdigest()


#: The environment variable that pins the fence secret (hex, at least 16 bytes), so that
#: two processes render an item alike; unset, each process draws its own.
FENCE_SECRET_ENV = "SUFFICE_FENCE_SECRET"
_SECRET_BYTES_MIN = 16


@cache
def fence_secret() -> bytes:
    """This process's fence secret: ``$SUFFICE_FENCE_SECRET``, else 32 bytes from :mod:`secrets`.

    Drawn once a process, so one item renders alike on every try (retries, fitting, the
    prefix cache) while no one outside the process can compute its fences."""
    value = os.environ.get(FENCE_SECRET_ENV)
    if value is None:
        return secrets.token_bytes(32)
    try:
        secret = bytes.fromhex(value)
    except ValueError:
        secret = b""
    if len(secret) < _SECRET_BYTES_MIN:
        raise ConfigError(FENCE_SECRET_ENV, "***", f"must be at least {_SECRET_BYTES_MIN} bytes written in hex")
    return secret


@cache
def fence_words() -> tuple[str, ...]:
    """The words a fence token is made of (``fence_words.txt``, written by ``scripts/fence_words.py``):
    8192 lowercase words, each one token after a space for the embedded model's tokenizer."""
    words = tuple((Path(__file__).parent / "fence_words.txt").read_text().split())
    if len(words) != FENCE_WORD_COUNT or len(set(words)) != FENCE_WORD_COUNT:
        raise ConfigError("fence_words.txt", str(len(words)), f"must hold {FENCE_WORD_COUNT} distinct words")
    return words


#: Words in a fence token, and the size of the list they are drawn from: 3 x 13 = 39 bits.
FENCE_WORDS = 3
FENCE_WORD_COUNT = 8192
FENCE_BITS = FENCE_WORDS * (FENCE_WORD_COUNT.bit_length() - 1)


def fence_token(seed: str, counter: int = 0, secret: bytes | None = None) -> str:
    """The ``counter``-th candidate token for ``seed``: :data:`FENCE_WORDS` words picked by an
    HMAC-SHA256 keyed with the secret (default: :func:`fence_secret`), 13 bits a word."""
    digest = hmac.new(fence_secret() if secret is None else secret, f"{counter}:{seed}".encode(), "sha256").digest()
    words = fence_words()
    picks = (int.from_bytes(digest[2 * i : 2 * i + 2], "big") % FENCE_WORD_COUNT for i in range(FENCE_WORDS))
    return " ".join(words[n] for n in picks)


#: Attribute values a fence's opening line can carry (``None``: left out); a chunk's
#: ``metadata`` is an object of scalars, written as one JSON object.
Attribute = str | int | float | dict[str, str | int | float | bool | None] | None


@dataclass(frozen=True)
class Fence:
    """Delimits each piece of user text in a prompt: a line ``<<kind [label] TOKEN
    [name=JSON]...>>`` opens it, the text follows, and the part ends at the next line
    carrying the token: a line ``<<end TOKEN>>``, or (for a run of chunks, ``close=False``)
    the next part's opening line.

    ``TOKEN`` is :data:`FENCE_WORDS` words of an HMAC keyed with the process's secret
    (:func:`fence_secret`) over all the item's text, taken again with a counter while any
    field holds it: no field holds it, so no field can open or close a part, and no one
    without the secret can compute it (:data:`FENCE_BITS` bits), not even knowing every
    field.  Whole words cost one token each where 16 hex digits cost up to 16.  Attribute
    values are JSON, so a source with quotes or line breaks stays on its line.
    """

    token: str

    @classmethod
    def around(
        cls, fields: Sequence[str], seed: str | None = None, secret: bytes | None = None, start: int = 0
    ) -> tuple[Fence, int]:
        """The first fence from counter ``start`` on that none of ``fields`` contains, derived
        from ``seed`` (default: :func:`fence_seed` of the fields), and its counter."""
        seed = fence_seed(fields) if seed is None else seed
        tokens = ((fence_token(seed, counter, secret), counter) for counter in itertools.count(start))
        token, counter = next((token, counter) for token, counter in tokens if not any(token in f for f in fields))
        return cls(token), counter

    def __call__(
        self, kind: str, text: str, label: int | None = None, close: bool = True, **attributes: Attribute
    ) -> str:
        head = [kind, *([] if label is None else [str(label)]), self.token]
        # An attribute a context does not give (a chunk without ``date``) is left out like ``None``.
        given = {k: v for k, v in attributes.items() if v is not None and not isinstance(v, jinja2.Undefined)}
        head += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in given.items()]
        opening = f"<<{' '.join(head)}>>\n{text}"
        return f"{opening}\n<<end {self.token}>>" if close else opening


def _normalised(value: Any, strings: list[str]) -> Any:
    """``value`` with every string in it, dict keys too, normalised (and collected into ``strings``).

    Any other kind of value is refused: text inside it would reach the prompt unfenced."""
    if isinstance(value, str):
        strings.append(normalise(value))
        return strings[-1]
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_normalised(v, strings) for v in value]
    if isinstance(value, dict):
        out = {_normalised(str(k), strings): _normalised(v, strings) for k, v in value.items()}
        if len(out) < len(value):
            raise ValueError(f"two keys of {sorted(map(str, value))!r:.200} read alike once normalised")
        return out
    raise TypeError(f"a prompt's user context holds text, numbers, lists and dicts, not {type(value).__name__}")


#: Chat-template markers of common model families, broken wherever the user text spells
#: them.  A local tokenizer also defuses its own list
#: (:meth:`suffice.serving.base.TokenizerMixin.chat_text`); this one holds where the
#: server applies the chat template (the openai engine without ``--tokenizer``).  User
#: text is NFKC-normalised first, so DeepSeek's fullwidth ``<｜User｜>`` reads ``<|User|>``.
MARKERS = re.compile(
    "|".join(
        [
            # ChatML/Qwen, Llama 3 and 4, Phi, Granite, Command-R, gpt-oss, DeepSeek (NFKC):
            # <|im_start|>, <|start_header_id|>, <|end|>, <|START_OF_TURN_TOKEN|>, <|User|>...
            r"<\|",
            "<\uff5c",
            # Llama 2.
            r"<</?SYS>>",
            # Mistral: [INST], [/INST], [SYSTEM_PROMPT], [TOOL_CALLS], [AVAILABLE_TOOLS]...
            r"\[/?[A-Z][A-Z0-9_]+\]",
            # GLM.
            r"\[[gs]MASK\]",
            # Snake-case tags: Gemma's <start_of_turn>, StarCoder's <file_sep> and <fim_prefix>,
            # Qwen's <tool_call>, <tool_response>...
            r"</?[a-z]+(?:_[a-z]+)+>",
            # Short ones: <s>, </s>, Gemma's <bos>/<eos>, reasoning models' <think>, GLM's <sop>.
            r"</?(?:s|bos|eos|pad|unk|mask|think|sop|eop)>",
        ]
    )
)


def defuse_markers(text: str) -> str:
    """``text`` with every :data:`MARKERS` match broken by :data:`~suffice.records.text.WORD_JOINER`."""
    return MARKERS.sub(lambda m: m[0][0] + WORD_JOINER + m[0][1:], text)


@dataclass(frozen=True)
class PromptTemplate:
    gate: str
    version: str
    system: jinja2.Template
    user: jinja2.Template

    @property
    def name(self) -> str:
        """The version string carried into every verdict, e.g. ``sufficiency/v1``."""
        return f"{self.gate}/{self.version}"

    def render(
        self, system_context: dict[str, Any], user_context: dict[str, Any], seed: str | None = None
    ) -> tuple[Message, ...]:
        """The messages; the user template gets the context normalised (:func:`normalise`)
        and a ``fence`` (:class:`Fence`, derived from ``seed`` when given, so that
        renderings of one item with different cuts share one token) to put each field in."""
        return self.render_fenced(system_context, user_context, seed)[0]

    def render_fenced(
        self, system_context: dict[str, Any], user_context: dict[str, Any], seed: str | None = None
    ) -> tuple[tuple[Message, ...], str]:
        """:meth:`render`'s messages and the fence token they carry (what a replay needs)."""
        strings: list[str] = []
        context = _normalised(user_context, strings)
        system = self.system.render(**system_context).strip()
        # The instructions (a rubric's text among them) may not hold the token either.
        fields = [*strings, system]
        counter = 0
        while True:
            fence, counter = Fence.around(fields, seed, start=counter)
            user = defuse_markers(self.user.render(**context, fence=fence).strip())
            # Every line carrying the token is one the template made: a line of user text never
            # does, nor text joined across fields (JSON punctuation always stands between them).
            if all(line.startswith("<<") for line in user.splitlines() if fence.token in line):
                return ({"role": "system", "content": system}, {"role": "user", "content": user}), fence.token
            counter += 1


def available_versions(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


@cache
def load_prompt(folder: Path, gate: str, version: str | None = None) -> PromptTemplate:
    """The template in ``folder/<version>/``, named ``<gate>/<version>``; without
    ``version``, the newest one."""
    versions = available_versions(folder)
    if version is None and versions:
        version = max(versions, key=lambda v: int(v.lstrip("v")) if v.lstrip("v").isdigit() else 0)
    if version is None or version not in versions:
        raise ConfigError("prompt_version", f"{gate}/{version}", f"no such template; have {versions}")
    fence_secret()  # a bad SUFFICE_FENCE_SECRET fails where a gate is made, before any engine starts
    return PromptTemplate(
        gate=gate,
        version=version,
        system=_environment(folder).get_template(f"{version}/system.j2"),
        user=_environment(folder).get_template(f"{version}/user.j2"),
    )
