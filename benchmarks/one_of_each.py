"""The "two ways to do one thing" of issue 39, counted in suffice's code: how many places do each thing.  One place
each is the aim.  Run on any checkout to compare: ``python benchmarks/one_of_each.py [ROOT]``.

Prints a table and writes ``benchmarks/results/one_of_each.json``.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

Module = tuple[str, ast.Module]


def modules(root: Path) -> list[Module]:
    return [
        ("/".join(path.relative_to(root / "suffice").parts), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted((root / "suffice").rglob("*.py"))
    ]


def functions(mods: list[Module]) -> Iterator[tuple[str, ast.FunctionDef]]:
    for name, tree in mods:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                yield name, node


def source_of(node: ast.AST) -> str:
    return ast.unparse(node)


def defs(predicate: Callable[[ast.FunctionDef], bool]) -> Callable[[list[Module]], list[str]]:
    return lambda mods: [f"{m}:{f.name}" for m, f in functions(mods) if predicate(f)]


def _reads_version(f: ast.FunctionDef) -> bool:
    return "metadata.version('suffice')" in source_of(f)


def _parses_retry_after(f: ast.FunctionDef) -> bool:
    return "retry_after" in f.name.lower()


def _reads_a_key_file(f: ast.FunctionDef) -> bool:
    body = source_of(f)
    opens = "read_bytes()" in body or "read_text(" in body or "os.open(" in body
    return opens and "key" in f.name.lower()


def _eos(f: ast.FunctionDef) -> bool:
    return "tokenizer.eos_token_id" in source_of(f)


def _merges_logprobs(f: ast.FunctionDef) -> bool:
    """Builds top log-probabilities by text itself: adds alike ones, or copies a server's into a new dict."""
    body = source_of(f)
    return "logaddexp" in body or any(
        isinstance(n, ast.DictComp) and "top.items()" in source_of(n) for n in ast.walk(f)
    )


def _is_loopback(f: ast.FunctionDef) -> bool:
    return "loopback" in f.name


def detail_checks(mods: list[Module]) -> list[str]:
    return [
        f"{m}:{node.lineno}"
        for m, tree in mods
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, ast.NotIn) for op in node.ops)
        and "DETAILS" in source_of(node)
    ]


def aggregations(mods: list[Module]) -> list[str]:
    """Places that feed judged results to statistics of their own by hand (a judge's outcome counters, a run's
    summary, the service's metrics), not through the results stream."""
    outcomes = {"items", "verdicts", "errors"}
    found = []
    for m, tree in mods:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver, name = source_of(node.func.value), node.func.attr
            first = node.args[0] if node.args else None
            counts_an_outcome = isinstance(first, ast.Constant) and first.value in outcomes
            if (
                (name == "add" and receiver.endswith("summary"))
                or (name == "add" and receiver.endswith("stats") and counts_an_outcome)
                or (name == "observe" and receiver.endswith("metrics"))
            ):
                found.append(f"{m}:{node.lineno}")
    return found


def publishes(mods: list[Module]) -> list[str]:
    """Places that publish judged results to a results stream (what a judge, a run and the service count)."""
    return [
        f"{m}:{node.lineno}"
        for m, tree in mods
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "publish"
        and "Judged(" in source_of(node)
    ]


def optional_progress(mods: list[Module]) -> list[str]:
    """``isinstance`` checks for a progress callback's optional methods."""
    return [
        f"{m}:{node.lineno}"
        for m, tree in mods
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and source_of(node.func) == "isinstance" and "Progress" in source_of(node.args[1])
    ]


def hand_mapped_errors(mods: list[Module]) -> list[str]:
    """``except`` clauses under ``cli/`` that turn an error into an ``EXIT_*`` status themselves."""
    errors = {
        node.name
        for m, tree in mods
        if m == "exceptions.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    found = []
    for m, tree in mods:
        if not m.startswith("cli/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ExceptHandler)
                and node.type is not None
                and any(isinstance(n, ast.Name) and n.id in errors for n in ast.walk(node.type))
            ) and any(isinstance(n, ast.Name) and n.id.startswith("EXIT_") for s in node.body for n in ast.walk(s)):
                found.append(f"{m}:{node.lineno}")
    return found


def exit_returns(mods: list[Module]) -> list[str]:
    """``return EXIT_*`` under ``cli/`` (a command's outcomes: also the ones that are not errors)."""
    return [
        f"{m}:{node.lineno}"
        for m, tree in mods
        if m.startswith("cli/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id.startswith("EXIT_")
    ]


COUNTS: dict[str, Callable[[list[Module]], list[str]]] = {
    "is_loopback": defs(_is_loopback),
    "Retry-After parsers": defs(_parses_retry_after),
    "key-file readers": defs(_reads_a_key_file),
    "version() lookups": defs(_reads_version),
    "results fed to an aggregate by hand": aggregations,
    "results stream publishes": publishes,
    "logprob merges": defs(_merges_logprobs),
    "EOS look-ups": defs(_eos),
    "detail checks": detail_checks,
    "progress isinstance checks": optional_progress,
    "errors mapped to an exit status by hand (cli/)": hand_mapped_errors,
    "return EXIT_* (cli/)": exit_returns,
}


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    mods = modules(root)
    found = {name: count(mods) for name, count in COUNTS.items()}
    print(f"{'what':50} {'places':>6}")
    for name, places in found.items():
        print(f"{name:50} {len(places):>6}")
    out = Path(__file__).resolve().parent / "results" / "one_of_each.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"places": found}, indent=2) + "\n")


if __name__ == "__main__":
    main()
