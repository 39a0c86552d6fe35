"""No import cycles between suffice's modules, and no import from a lower layer to a higher one.

Every module's imports are read with ``ast``: at module level and inside functions,
``import x`` and ``from x import y``, relative ones too.  An import names the module
it loads (``from suffice.batch import inputs`` is ``suffice.batch.inputs``); the
packages above it, which Python also initialises, are not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import suffice

LAYOUT = Path(__file__).parent.parent / "docs" / "layout.md"

#: Module prefixes under ``suffice.``, lowest layer first.  A module belongs to the
#: layer of the longest prefix naming it or a package above it, and imports only
#: from its own layer and those below.  The root package (the public facade) is above
#: them all.
LAYERS: list[list[str]] = [
    ["exceptions", "serving.offline"],
    ["files", "network", "records", "results", "rows.tables", "settings"],
    ["grammars"],
    ["serving"],
    ["prompts"],
    ["gates"],
    ["formats"],
    ["client", "config", "rows", "telemetry", "verdicts"],
    ["bundle", "cache"],
    ["judge"],
    ["audit"],
    ["calibration"],
    ["batch"],
    ["harness"],
    ["integrations"],
    ["testing"],
    ["server"],
    ["cli"],
]


def sources(root: Path, package: str) -> dict[str, tuple[str, bool]]:
    """Module name -> (source, is a package) for every module of ``package`` under ``root``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path.read_text(encoding="utf-8"), is_package)
    return found


def imports(name: str, source: str, is_package: bool, modules: Collection[str]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports anywhere in ``source``."""

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    here = name if is_package else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(known(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*package, *([node.module] if node.module else [])])
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base) for a in node.names)
    return {target for target in found if target is not None and target != name}


def layer_of(module: str, layers: Sequence[Sequence[str]], root: str) -> int | None:
    if module == root:
        return len(layers)
    matches = [(len(p), i) for i, layer in enumerate(layers) for p in layer if f"{module}.".startswith(f"{root}.{p}.")]
    return max(matches)[1] if matches else None


def problems(graph: Mapping[str, Collection[str]], layers: Sequence[Sequence[str]], root: str) -> list[str]:
    """Every module without a layer, upward import and cycle in ``graph`` (importer -> imported)."""
    found: list[str] = []

    def named(module: str) -> str:
        layer = layer_of(module, layers, root)
        if layer is None:
            return f"{module} (no layer)"
        return f"{module} (layer {layer}: {', '.join(layers[layer]) if layer < len(layers) else root})"

    for module in sorted(graph):
        layer = layer_of(module, layers, root)
        if layer is None:
            found.append(f"{module} is in no layer: add it to LAYERS")
            continue
        for target in sorted(graph[module]):
            target_layer = layer_of(target, layers, root)
            if target_layer is not None and target_layer > layer:
                found.append(f"upward import: {named(module)} imports {named(target)}")
    found += [f"import cycle: {' -> '.join(named(m) for m in cycle)}" for cycle in cycles(graph)]
    return found


def cycles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """One cycle through each group of modules that import each other (Tarjan's
    strongly connected components; recursion depth at most the module count)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set(stack[stack.index(v) :])
            del stack[stack.index(v) :]
            if len(group) > 1:
                found.append(_cycle_through(graph, group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_through(graph: Mapping[str, Collection[str]], group: set[str]) -> list[str]:
    """The shortest cycle from the group's first module back to it, inside the group."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    for v in queue:
        for w in sorted(set(graph.get(v, ())) & group):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"{sorted(group)} is not strongly connected")


def graph_of(found: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    return {name: imports(name, source, is_package, found) for name, (source, is_package) in found.items()}


def test_suffice_has_no_import_cycle_and_no_upward_import() -> None:
    graph = graph_of(sources(Path(suffice.__file__).parent.parent, "suffice"))
    assert problems(graph, LAYERS, "suffice") == []


def test_every_layer_prefix_names_a_module() -> None:
    modules = sources(Path(suffice.__file__).parent.parent, "suffice")
    assert [p for layer in LAYERS for p in layer if f"suffice.{p}" not in modules] == []


def test_the_check_finds_cycles_upward_imports_and_unlayered_modules() -> None:
    fabricated = {
        "app": ("", True),
        "app.base": ("import json\nfrom app.top import run\n", False),
        "app.mid": ("from .. import base\n", True),
        "app.mid.loop": ("def f() -> None:\n    from ..mid import more\n", False),
        "app.mid.more": ("import app.mid.loop\n", False),
        "app.top": ("from app import mid\nfrom .mid.loop import f\n", False),
        "app.stray": ("", False),
    }
    graph = graph_of(fabricated)
    assert graph["app.mid"] == {"app.base"}
    assert graph["app.mid.loop"] == {"app.mid.more"}
    assert graph["app.top"] == {"app.mid", "app.mid.loop"}
    assert problems(graph, [["base"], ["mid"], ["top"]], "app") == [
        "upward import: app.base (layer 0: base) imports app.top (layer 2: top)",
        "app.stray is in no layer: add it to LAYERS",
        "import cycle: app.mid.loop (layer 1: mid) -> app.mid.more (layer 1: mid) -> app.mid.loop (layer 1: mid)",
        "import cycle: app.base (layer 0: base) -> app.top (layer 2: top) -> app.mid (layer 1: mid) -> app.base "
        "(layer 0: base)",
    ]


def layout_map(text: str) -> dict[str, str]:
    """docs/layout.md's map: each entry (``name.py``, ``name/``, ``package/module.py``) -> the layer written beside
    it or above it (the first column)."""
    block = text.split("```\nlayer  suffice/\n", 1)[1].split("```", 1)[0]
    found: dict[str, str] = {}
    layer = ""
    for line in block.splitlines():
        layer = line[:7].strip() or layer
        if line[7:8].strip():
            entry = line[7:].split()[0]
            found[entry.removesuffix(".py").removesuffix("/").replace("/", ".")] = layer
    return found


def test_the_layout_map_names_every_package_and_module_in_its_layer() -> None:
    root = Path(suffice.__file__).parent
    modules = sources(root.parent, "suffice")
    written = layout_map(LAYOUT.read_text(encoding="utf-8"))
    named = {e: "suffice" if e == "__init__" else f"suffice.{e}" for e in written}
    top = {p.stem for p in root.glob("*.py")} | {
        p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"
    }
    assert sorted(top - set(written)) == [], "add them to docs/layout.md"
    assert sorted({p for layer in LAYERS for p in layer} - set(written)) == [], "add them to docs/layout.md"
    assert sorted(e for e in written if named[e] not in modules and not (root / e).is_dir()) == [], "gone from suffice/"
    layers = {e: written[e] for e in written if named[e] in modules}
    assert layers == {e: "top" if e == "__init__" else str(layer_of(named[e], LAYERS, "suffice")) for e in layers}


def test_the_layout_map_is_read_by_its_columns() -> None:
    text = (
        "# Layout\n```\nlayer  suffice/\n 3     serving/   engines\n                 more words: x.py\n"
        "       x.py       y\n12     a/b.py     c\ntop    __init__.py\n -     data/\n```\nafter.py\n"
    )
    assert layout_map(text) == {"serving": "3", "x": "3", "a.b": "12", "__init__": "top", "data": "-"}
