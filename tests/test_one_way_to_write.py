"""Every file suffice creates, appends or replaces goes through :mod:`suffice.files` (issue 38): no other module
opens a file for writing, writes one by name, or lets a library create one, so none can follow a planted symlink or
give records a mode others can read."""

from __future__ import annotations

import ast
from pathlib import Path

import suffice

ROOT = Path(suffice.__file__).parent
#: The one module allowed to open files for writing.
HELPER = ROOT / "files.py"
#: Methods that write a file by name (pathlib's, matplotlib's) or make one (a link, an empty file).
WRITES_BY_NAME = {"write_text", "write_bytes", "savefig", "touch", "symlink_to", "hardlink_to", "mkfifo"}
#: ``os.open`` flags that create or change a file.
WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND", "O_TRUNC"}


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode string given to an ``open`` call (positionally at ``position`` or as ``mode=``), if literal."""
    for keyword in call.keywords:
        if keyword.arg == "mode" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return str(call.args[position].value)
    return None


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    # Names bound to an io.BytesIO(): a figure saved into memory, then written through the helper.
    in_memory = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "BytesIO"
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name in WRITES_BY_NAME - {"savefig"}:
            found.append((node.lineno, name))
        elif name == "savefig" and isinstance(node.args[0] if node.args else None, ast.Name):
            if node.args[0].id not in in_memory:  # type: ignore[union-attr]
                found.append((node.lineno, name))
        elif (name == "open" and owner != "os") or name == "fdopen":
            # open(path, mode), gzip/bz2/lzma.open(path, mode), os.fdopen(fd, mode): the mode is second;
            # path.open(mode): first.
            position = 0 if isinstance(func, ast.Attribute) and owner not in ("gzip", "bz2", "lzma", "os", "io") else 1
            mode = _mode(node, position)
            if mode is not None and set(mode) & set("wax+"):
                found.append((node.lineno, f"{name}(..., {mode!r})"))
        elif name == "open" and owner == "os":
            flags = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if flags & WRITE_FLAGS:
                found.append((node.lineno, "os.open(..., " + "|".join(sorted(flags & WRITE_FLAGS)) + ")"))
    return found


def _connects_without_create_private(tree: ast.AST) -> list[int]:
    """``sqlite3.connect`` in a function that did not call ``create_private`` first (SQLite follows a link at the
    name and creates the file 0644)."""
    bad = []
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
        names = [
            (c.lineno, c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")) for c in calls
        ]
        guarded = [line for line, name in names if name == "create_private"]
        for line, name in names:
            if name == "connect" and not any(g < line for g in guarded):
                bad.append(line)
    return bad


def test_no_module_but_the_helper_writes_a_file():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == HELPER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{path.relative_to(ROOT.parent)}:{line}: {what}" for line, what in _writes(tree)]
        offenders += [
            f"{path.relative_to(ROOT.parent)}:{line}: sqlite3.connect"
            for line in _connects_without_create_private(tree)
        ]
    assert not offenders, "write through suffice.files instead:\n" + "\n".join(offenders)


def test_the_check_finds_each_kind_of_write():
    source = """
def f(p, fd):
    open(p, "w"); open(p, mode="ab"); p.open("x"); p.write_text("t"); p.write_bytes(b"")
    gzip.open(p, "wt"); os.fdopen(fd, "wb"); fig.savefig(p); os.open(p, os.O_WRONLY | os.O_CREAT)
    open(p); p.open("rb"); os.open(p, os.O_RDONLY); image = io.BytesIO(); fig.savefig(image)
def g(p):
    sqlite3.connect(p)
def h(p):
    create_private(p)
    sqlite3.connect(p)
"""
    tree = ast.parse(source)
    assert len(_writes(tree)) == 9
    assert _connects_without_create_private(tree) == [7]
