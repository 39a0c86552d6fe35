"""Prompt templates are files, versioned by folder: ``<folder>/<version>/`` (a gate keeps
its own in ``templates/`` beside its code).

Each version holds ``system.j2`` (the instructions, identical for every item, so
vLLM's prefix cache computes them once) and ``user.j2`` (the per-item text).
Rendering uses ``StrictUndefined``: a missing variable is an error, never an
empty string in a prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from suffice.exceptions import ConfigError
from suffice.text import defuse

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

#: Chat-template markers of common model families, broken wherever the user text
#: spells them (``<|`` covers ChatML's ``<|im_end|>``, Llama 3's ``<|eot_id|>``, Phi's
#: ``<|end|>``...).  A local tokenizer also defuses its own list
#: (:meth:`suffice.serving.base.TokenizerMixin.chat_text`); this one holds where the
#: server applies the chat template (the openai engine without ``--tokenizer``).
#: A line of user text that reads like the prompt's own structure: a chunk label
#: (``3:`` in sufficiency's list, ``ID: 3`` in the others'), a source line, or one of
#: the templates' section headings.  A chunk holding a line ``1: ...`` looked exactly
#: like chunk 1, so a model citing label 1 for it named the caller's chunk 1.
_STRUCTURE = re.compile(
    r"^(?=[ \t]*[*#]*[ \t]*(?:\d+[ \t]*:|ID[ \t]*:|Source[ \t]*:|(?:User )?[Qq]uestion|Retrieved [Cc]ont"
    r"|Generated [Aa]nswer))",
    re.MULTILINE,
)
#: Put before such a line: the templates' own structure starts at the line's start.
STRUCTURE_INDENT = "  "


#: Breaks a model may read as a new line besides ``\n``: a lone carriage return, the
#: Unicode line and paragraph separators, NEL, vertical tab and form feed.
_OTHER_BREAKS = re.compile("\r\n?|[\u2028\u2029\x85\x0b\x0c]")


def indent_structure(text: str) -> str:
    """``text`` with each line that reads like the prompt's structure indented (every
    kind of line break made ``\n`` first, so none hides such a line)."""
    return _STRUCTURE.sub(STRUCTURE_INDENT, _OTHER_BREAKS.sub("\n", text))


MARKERS = ("<<SYS>>", "<</SYS>>", "<start_of_turn>", "<end_of_turn>", "[/INST]", "[INST]", "</s>", "<s>", "<|")


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

    def render(self, system_context: dict[str, Any], user_context: dict[str, Any]) -> tuple[Message, ...]:
        return (
            {"role": "system", "content": self.system.render(**system_context).strip()},
            {"role": "user", "content": defuse(self.user.render(**user_context).strip(), MARKERS)},
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
