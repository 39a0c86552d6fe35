"""The public API is what the package tops export: every name in ``__all__`` is there,
documented, and nothing else public leaks (modules behind the names are internal)."""

from __future__ import annotations

import importlib
import inspect
import re
import types
from pathlib import Path

import pytest

PUBLIC = (
    "suffice",
    "suffice.batch",
    "suffice.grammars",
    "suffice.integrations.haystack",
    "suffice.integrations.langchain",
    "suffice.integrations.llama_index",
)
ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _public(module: types.ModuleType) -> list[str]:
    return sorted(
        (
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        ),
        key=str.casefold,
    )


def _exported(name: str) -> list[tuple[str, str]]:
    module = importlib.import_module(name)
    return [(name, member) for member in module.__all__ if member != "__version__"]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_lists_every_public_member_and_nothing_more(name):
    module = importlib.import_module(name)
    assert sorted((m for m in module.__all__ if m != "__version__"), key=str.casefold) == _public(module)


@pytest.mark.parametrize(("module", "member"), [pair for name in PUBLIC for pair in _exported(name)])
def test_every_exported_class_and_function_has_a_docstring(module, member):
    value = getattr(importlib.import_module(module), member)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{module}.{member}"


@pytest.mark.parametrize(("module", "member"), [pair for name in PUBLIC for pair in _exported(name)])
def test_every_exported_name_is_named_in_the_docs(module, member):
    assert re.search(rf"\b{re.escape(member)}\b", DOCS), f"{module}.{member} is in no README/docs page"
