"""One noun per concept: the table in docs/layout.md is true for every class name in the package.

Every class whose name ends in a noun of the table (``...Settings``, ``...Options``, ``...Config``, ``...Request``,
``...Answer``, ``SettingSources``) is one of that noun; none ends in a synonym the table rules out (``Flags``,
``Params``...); and every class the table gives as an example exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import suffice

PACKAGE = Path(suffice.__file__).parent
LAYOUT = Path(__file__).parent.parent / "docs" / "layout.md"
SYNONYMS = ("Flags", "Params", "Parameters", "Opts", "Conf", "Cfg", "Args", "Arguments", "Prefs", "Preferences")
#: The table's nouns, as the ends of class names.
SUFFIXES = {"setting": ("Settings",), "option": ("Options",), "config": ("Config",), "setting sources": ("Sources",),
            "request / answer": ("Request", "Answer")}  # fmt: skip


def class_names() -> dict[str, str]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found[node.name] = str(path.relative_to(PACKAGE))
    return found


def table() -> dict[str, list[str]]:
    """Noun -> the class names its row gives as examples."""
    rows = {}
    for line in LAYOUT.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in SUFFIXES:
            rows[cells[0]] = [name for name in re.findall(r"`([A-Z]\w+)`", cells[2])]
    return rows


def test_the_table_names_every_noun_and_its_examples_exist():
    rows = table()
    assert set(rows) == set(SUFFIXES)
    names = class_names()
    missing = [name for examples in rows.values() for name in examples if name not in names]
    assert missing == []


def test_no_class_is_named_for_a_synonym_of_a_noun():
    offenders = {name: where for name, where in class_names().items() if name.endswith(SYNONYMS)}
    assert offenders == {}


def test_a_class_named_for_a_noun_is_one_of_it():
    """A ``...Sources`` class is the setting sources; the other nouns' classes are many (a gate's options, a
    command's settings), each checked by its suffix alone."""
    sources = [name for name in class_names() if name.endswith("Sources")]
    assert sources == ["SettingSources"]
