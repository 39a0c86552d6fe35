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
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from suffice.exceptions import ConfigError
from suffice.text import WORD_JOINER

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

#: Breaks a model may read as a new line besides ``\n``: CR (alone or before LF), vertical
#: tab, form feed, the file/group/record separators, NEL, and the Unicode line and
#: paragraph separators (every break ``str.splitlines`` knows).
_BREAKS = re.compile("\r\n?|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


#: Characters removed from user text: controls but tab and newline (after breaks became
#: newlines) and every format character (Unicode category Cf: soft hyphen, zero-width
#: space and joiners, bidi controls, word joiner, BOM, tags...) up to Unicode 15, as a
#: class because a regex runs in C (tests check it against ``unicodedata``).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)


def _strip_invisible(text: str) -> str:
    return _INVISIBLE.sub("", _BREAKS.sub("\n", text))


def normalise(text: str) -> str:
    """User text as the prompt shows it: NFKC (fullwidth and other compatibility forms
    become their plain letters, NBSP and ideographic spaces a space), every line break a
    ``\n``, no control or invisible format character (:data:`_INVISIBLE`).  Idempotent:
    NFKC makes none of the characters stripped."""
    text = _strip_invisible(text)
    return text if unicodedata.is_normalized("NFKC", text) else _strip_invisible(unicodedata.normalize("NFKC", text))


def fence_seed(texts: Sequence[str | None]) -> str:
    """A digest of ``texts``, all of an item's, to derive its :class:`Fence` from."""
    material = json.dumps(list(texts), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(material).hexdigest()


#: Attribute values a fence's opening line can carry (``None``: left out); a chunk's
#: ``metadata`` is an object of scalars, written as one JSON object.
Attribute = str | int | float | dict[str, str | int | float | bool | None] | None


@dataclass(frozen=True)
class Fence:
    """Delimits each piece of user text in a prompt: a line ``<<kind [label] TOKEN
    [name=JSON]...>>`` opens it, the text follows, a line ``<<end TOKEN>>`` closes it.

    ``TOKEN`` is 16 hex digits of a SHA-256 of all the prompt's user text, taken again
    with a counter while any field contains it: no field holds it, so no field can open
    or close a fence, and text cannot hold the digest of itself, so none can guess it.
    It is deterministic (the same item gives the same prompt, verdicts reproduce).
    Attribute values are JSON, so a source with quotes or line breaks stays on its line.
    """

    token: str

    @classmethod
    def around(cls, fields: Sequence[str], seed: str | None = None) -> Fence:
        """A fence none of ``fields`` contains, derived from ``seed`` (default:
        :func:`fence_seed` of the fields)."""
        seed = fence_seed(fields) if seed is None else seed
        counter = 0
        while True:
            digest = hashlib.sha256(f"{counter}:{seed}".encode()).hexdigest()
            if not any(digest[:16] in field for field in fields):
                return cls(digest[:16])
            counter += 1

    def __call__(self, kind: str, text: str, label: int | None = None, **attributes: Attribute) -> str:
        head = [kind, *([] if label is None else [str(label)]), self.token]
        # An attribute a context does not give (a chunk without ``date``) is left out like ``None``.
        given = {k: v for k, v in attributes.items() if v is not None and not isinstance(v, jinja2.Undefined)}
        head += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in given.items()]
        return f"<<{' '.join(head)}>>\n{text}\n<<end {self.token}>>"


def _normalised(value: Any, strings: list[str]) -> Any:
    """``value`` with every string in it normalised (and collected into ``strings``).

    Any other kind of value is refused: text inside it would reach the prompt unfenced."""
    if isinstance(value, str):
        strings.append(normalise(value))
        return strings[-1]
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_normalised(v, strings) for v in value]
    if isinstance(value, dict):
        return {k: _normalised(v, strings) for k, v in value.items()}
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
    """``text`` with every :data:`MARKERS` match broken by :data:`~suffice.text.WORD_JOINER`."""
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
        strings: list[str] = []
        context = _normalised(user_context, strings)
        user = self.user.render(**context, fence=Fence.around(strings, seed)).strip()
        return (
            {"role": "system", "content": self.system.render(**system_context).strip()},
            {"role": "user", "content": defuse_markers(user)},
        )


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
    return PromptTemplate(
        gate=gate,
        version=version,
        system=_environment(folder).get_template(f"{version}/system.j2"),
        user=_environment(folder).get_template(f"{version}/user.j2"),
    )
