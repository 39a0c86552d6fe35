"""How big a gate is: the base class's own methods (properties included) and attributes, the names kept on it
one release only as deprecated aliases, and the lines of the citation example, at the working tree and at any
git revisions named.

    python benchmarks/bench_gate_core.py [REV ...]

No engine: it reads the sources (``git show REV:PATH`` for a revision).  Writes
``benchmarks/results/gate_core.json``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "suffice/gates/base.py"
EXAMPLE = "examples/citation-gate/citation_gate/__init__.py"


def source(path: str, rev: str | None) -> str:
    if rev is None:
        return (ROOT / path).read_text(encoding="utf-8")
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def measure(rev: str | None) -> dict[str, object]:
    tree = ast.parse(source(BASE, rev))
    gate = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Gate")
    methods = [n.name for n in gate.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    moved, attributes = [], []
    for node in gate.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        value = node.value
        is_moved = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Moved"
        (moved if is_moved else attributes).append(target.id)
    deprecated = [
        n.name
        for n in gate.body
        if isinstance(n, ast.FunctionDef) and (ast.get_docstring(n) or "").startswith("Deprecated")
    ]
    core = [m for m in methods if m not in deprecated]
    abstract = [
        n.name
        for n in gate.body
        if isinstance(n, ast.FunctionDef) and any(getattr(d, "id", None) == "abstractmethod" for d in n.decorator_list)
    ]
    return {
        "rev": rev or "working tree",
        "methods": len(dict.fromkeys(core)),
        "abstract": len(abstract),
        "attributes": len(attributes),
        "deprecated_names": len(moved) + len(deprecated),
        "example_lines": len(source(EXAMPLE, rev).splitlines()),
    }


def main(revs: list[str]) -> None:
    rows = [measure(rev) for rev in [*revs, None]]
    header = ("rev", "methods", "abstract", "attributes", "deprecated_names", "example_lines")
    print(" | ".join(f"{h:>16}" for h in header))
    for row in rows:
        print(" | ".join(f"{row[h]!s:>16}" for h in header))
    out = ROOT / "benchmarks" / "results" / "gate_core.json"
    out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
