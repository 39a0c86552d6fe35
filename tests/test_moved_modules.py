"""The modules that moved into ``suffice.records`` and ``suffice.rows`` keep their old paths for one release: each
old path gives the same objects with a DeprecationWarning naming the new one, and nothing in this repository uses an
old path (so no such warning fires in the suite)."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import suffice

ROOT = Path(__file__).parent.parent
#: Old module path -> the module it is now.
MOVED_MODULES = {
    "suffice.compressed": "suffice.records.compressed",
    "suffice.fields": "suffice.records.fields",
    "suffice.jsonl": "suffice.records.jsonl",
    "suffice.row_models": "suffice.rows.models",
    "suffice.tables": "suffice.rows.tables",
}
#: A module that became a package of the same name -> the module its names are in now.
MOVED_NAMES = {"suffice.records": "suffice.records.item", "suffice.rows": "suffice.rows.shaping"}


def defined_names(module: ModuleType) -> list[str]:
    """The public names ``module``'s own source defines at its top level (not the ones it imports)."""
    assert module.__file__ is not None
    names = []
    for node in ast.parse(Path(module.__file__).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


@pytest.mark.parametrize(("old", "new"), MOVED_MODULES.items())
def test_an_old_module_path_warns_and_gives_the_new_module(old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} moved to {new} ")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    name = defined_names(module)[0]
    scope: dict[str, object] = {}
    exec(f"from {old} import {name}", scope)
    assert scope[name] is getattr(module, name)


@pytest.mark.parametrize(("old", "new"), MOVED_NAMES.items())
def test_an_old_modules_names_resolve_from_its_package_with_a_warning(old: str, new: str) -> None:
    package, module = importlib.import_module(old), importlib.import_module(new)
    names = defined_names(module)
    assert len(names) >= 4
    for name in names:
        vars(package).pop(name, None)  # a name once resolved is kept, and warns no more
        with pytest.warns(DeprecationWarning, match=re.escape(f"{old}.{name} moved to {new}.{name} ")):
            assert getattr(package, name) is getattr(module, name)
        vars(package).pop(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope: dict[str, object] = {}
        exec(f"from {old} import {names[0]}", scope)
    assert scope[names[0]] is getattr(module, names[0])
    assert [str(w.message) for w in caught] == [
        f"{old}.{names[0]} moved to {new}.{names[0]} (the old name goes in the next release)"
    ]
    vars(package).pop(names[0])


def test_a_package_gives_its_own_modules_without_a_warning_and_refuses_unknown_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from suffice.records import compressed, fields, item, jsonl
        from suffice.rows import models, shaping, tables
    assert [m.__name__ for m in (compressed, fields, item, jsonl, models, shaping, tables)] == [
        "suffice.records.compressed",
        "suffice.records.fields",
        "suffice.records.item",
        "suffice.records.jsonl",
        "suffice.rows.models",
        "suffice.rows.shaping",
        "suffice.rows.tables",
    ]
    for package in (suffice.records, suffice.rows):
        with pytest.raises(AttributeError, match="no_such_name"):
            _ = package.no_such_name


def old_imports(source: str) -> list[str]:
    """Every import in ``source`` of an old path: a moved module, or a moved name from its package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in MOVED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module in MOVED_MODULES:
                found.append(node.module)
            elif node.module in MOVED_NAMES:
                parts = {p.stem for p in (ROOT / node.module.replace(".", "/")).iterdir()}
                found += [f"{node.module}.{a.name}" for a in node.names if a.name not in parts]
            elif node.module == "suffice":
                found += [f"suffice.{a.name}" for a in node.names if f"suffice.{a.name}" in MOVED_MODULES]
    return found


def test_nothing_here_imports_an_old_path() -> None:
    aliases = {ROOT / (old.replace(".", "/") + ".py") for old in MOVED_MODULES}
    found = {
        str(path.relative_to(ROOT)): old_imports(path.read_text(encoding="utf-8"))
        for folder in ("suffice", "tests", "benchmarks", "examples", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in aliases and path != Path(__file__)
    }
    assert {path: old for path, old in found.items() if old} == {}


def test_the_old_path_check_finds_each_kind() -> None:
    source = (
        "import suffice.jsonl\nfrom suffice.tables import iter_parquet\nfrom suffice import fields, results\n"
        "from suffice.records import Item, jsonl\nfrom suffice.rows.shaping import result_row\n"
    )
    assert old_imports(source) == ["suffice.jsonl", "suffice.tables", "suffice.fields", "suffice.records.Item"]
