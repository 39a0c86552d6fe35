"""Where format names are written in suffice's code: every string constant equal to a verdict format's name
(``seed``, ``ragflow``) or a file format's (``jsonl``, ``parquet``, ``csv``), by file.  ``suffice`` is left out (also
the package's name) and so is ``seed`` under ``serving/`` (the engines' sampling seed).  Run on any checkout to
compare: ``python benchmarks/format_names.py [ROOT]``.

Prints a table and writes ``benchmarks/results/format_names.json``.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

NAMES = {"seed": "verdict", "ragflow": "verdict", "jsonl": "file", "parquet": "file", "csv": "file"}


def occurrences(root: Path) -> Counter[tuple[str, str]]:
    """(file under suffice/, name) -> string constants equal to the name there (docstrings are whole sentences,
    so never equal to a bare name)."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted((root / "suffice").rglob("*.py")):
        relative = "/".join(path.relative_to(root / "suffice").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                if node.value == "seed" and relative.startswith("serving/"):
                    continue
                found[(relative, node.value)] += 1
    return found


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    found = occurrences(root)
    files = sorted({file for file, _ in found})
    print(f"{'file':44} " + " ".join(f"{n:>8}" for n in NAMES))
    for file in files:
        print(f"{file:44} " + " ".join(f"{found[(file, n)]:>8}" for n in NAMES))
    by_kind = {
        kind: {
            "occurrences": sum(c for (f, n), c in found.items() if NAMES[n] == kind),
            "files": sorted({f for (f, n) in found if NAMES[n] == kind}),
        }
        for kind in ("verdict", "file")
    }
    for kind, counted in by_kind.items():
        print(f"{kind} format names: {counted['occurrences']} in {len(counted['files'])} files")
    out = Path(__file__).resolve().parent / "results" / "format_names.json"
    out.parent.mkdir(exist_ok=True)
    rows = [{"file": f, "name": n, "count": c} for (f, n), c in sorted(found.items())]
    out.write_text(json.dumps({"by_kind": by_kind, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
