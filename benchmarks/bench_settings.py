"""How many places a setting is written in: hand-written checks in the config dataclasses, hand-written argparse
flags (``add_argument`` calls) and range checks in ``suffice/cli``, and the files and lines that name one engine
option, at a git ref ("before") and in the working tree ("after").  Then, for the working tree: the declarations
of each kind of knob, the surfaces derived from them, and the files one must touch to add a knob of each kind.

    PYTHONPATH=. python benchmarks/bench_settings.py [BEFORE_REF]   # default: 6bff9d5 (main before issue 39)

Prints the tables and writes benchmarks/results/settings.json.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Helpers that are one range check each when called in a ``__post_init__``.
CHECK_CALLS = {"whole_number", "finite_number", "check_url", "refuse_plain_http"}
#: The files that declare, check, parse or pass on engine, serve and batch settings.
SETTINGS_FILES = (
    "suffice/settings.py",
    "suffice/serving/engine_config.py",
    "suffice/serving/machine.py",
    "suffice/serving/vllm/engine.py",
    "suffice/serving/vllm/lifecycle.py",
    "suffice/serving/base.py",
    "suffice/serving/openai/engine.py",
    "suffice/server/config.py",
    "suffice/batch/options.py",
    "suffice/cli/engine_args.py",
    "suffice/cli/judge_cmd.py",
    "suffice/cli/calibrate_cmd.py",
    "suffice/cli/serve_cmd.py",
    "suffice/cli/serve_settings.py",
)
#: Engine options whose every mention is counted.
OPTIONS = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len")


def files(ref: str | None) -> dict[str, str]:
    """``suffice/**/*.py`` at ``ref`` (``None``: the working tree), path -> source."""
    if ref is None:
        return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "suffice").rglob("*.py")}
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, "suffice"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {
        name: subprocess.run(["git", "show", f"{ref}:{name}"], cwd=ROOT, capture_output=True, text=True).stdout
        for name in names
        if name.endswith(".py")
    }


def checks(sources: dict[str, str]) -> dict[str, int]:
    """Hand-written checks (``raise ConfigError`` and check helpers) in each ``__post_init__``, by class."""
    found: dict[str, int] = {}
    for path, source in sources.items():
        for cls in ast.walk(ast.parse(source)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__post_init__":
                    count = 0
                    for node in ast.walk(fn):
                        raises = isinstance(node, ast.Raise) and "ConfigError" in ast.unparse(node.exc or node)
                        calls = isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in CHECK_CALLS
                        count += raises or calls
                    if count:
                        found[f"{path}:{cls.name}"] = count
    return found


def cli_flags(sources: dict[str, str]) -> int:
    """``add_argument(`` calls written in ``suffice/cli`` (``grep -c``): flags not derived from a declaration."""
    return sum(src.count("add_argument(") for path, src in sources.items() if path.startswith("suffice/cli/"))


def cli_range_checks(sources: dict[str, str]) -> int:
    """Range checks written in ``suffice/cli``: comparisons of a value with a number (``args.beta > 0``,
    ``0 < args.timeout < float("inf")``) and ``isfinite`` calls."""
    count = 0
    for path, source in sources.items():
        if not path.startswith("suffice/cli/"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Lt | ast.Gt | ast.LtE | ast.GtE) for op in node.ops
            ):
                operands = [node.left, *node.comparators]
                numbers = [
                    o
                    for o in operands
                    if (isinstance(o, ast.Constant) and type(o.value) in (int, float))
                    or ast.unparse(o) == "float('inf')"
                ]
                count += bool(numbers)
            elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "isfinite":
                count += 1
    return count


def mentions(sources: dict[str, str], name: str) -> tuple[int, int]:
    """(files, lines) of ``suffice/`` that name ``name``."""
    hits = {path: sum(name in line for line in src.splitlines()) for path, src in sources.items()}
    hits = {path: n for path, n in hits.items() if n}
    return len(hits), sum(hits.values())


def knob_kinds() -> dict[str, tuple[type, ...]]:
    """Each kind of knob and the classes that declare it (imported: the declarations are read, not grepped)."""
    from suffice.batch.options import BatchOptions, RayOptions
    from suffice.config import JudgeConfig
    from suffice.gates import gate_class
    from suffice.server.config import ServeConfig
    from suffice.serving.engine_config import EngineConfig

    gates = tuple(gate_class(name).options_model for name in ("sufficiency", "recovery", "adequacy"))
    return {
        "engine option": (EngineConfig,),
        "judge setting": (JudgeConfig,),
        "batch option": (BatchOptions, RayOptions),
        "serve setting": (ServeConfig,),
        "gate option": gates,
        "per-request option": (JudgeConfig, *gates),
    }


def declarations() -> dict[str, dict[str, int]]:
    """Per kind of knob: its ``setting()`` declarations, the other ways it is declared (pydantic ``Field`` options,
    hand-copied fields), and how many of the declarations reach each surface."""
    from suffice.settings import declared

    out: dict[str, dict[str, int]] = {}
    for kind, classes in knob_kinds().items():
        found = [d for cls in classes for d in declared(cls)]
        if kind == "per-request option":
            found = [d for d in found if d.spec.per_request]
        plain = sum(
            1
            for cls in classes
            for name in getattr(cls, "__dataclass_fields__", {})
            if name not in {d.name for d in declared(cls)}
        )
        out[kind] = {
            "setting() declarations": len(found),
            # Plain dataclass fields (nested configs, Python-only knobs) and pydantic fields: not derived.
            "declared another way": 0
            if kind == "per-request option"
            else plain + sum(len(getattr(cls, "model_fields", {})) for cls in classes),
            "flag": sum(d.flag is not None or d.spec.positional for d in found),
            "variable and TOML key": sum(d.from_environment for d in found),
            "HTTP parameter and OpenAPI": sum(d.spec.per_request for d in found),
            "resume check": sum(d.spec.verdict or kind in ("gate option", "per-request option") for d in found),
            "docs table": len(found),
            "Python keyword": len(found),
        }
    return out


#: The files one edits to add a knob of each kind, and the test that adds one in a fixture and checks its surfaces
#: (docs/settings.md is regenerated, not written).
FILES_TO_ADD = {
    "engine option": (("suffice/serving/engine_config.py",), "test_a_new_engine_option_*"),
    "batch option": (
        ("suffice/batch/options.py",),
        "test_a_new_batch_setting_is_a_judge_flag_a_variable_and_a_table_row",
    ),
    "judge setting": (("suffice/config.py",), "test_a_new_judge_setting_*"),
    "gate option": (
        ("the gate's module",),
        "test_a_new_gate_option_is_a_flag_a_variable_a_toml_key_and_a_python_option",
    ),
    "per-request option": (("the declaring module (per_request=True)",), "test_a_new_per_request_gate_option_*"),
    "verdict format": (("its module", "pyproject.toml (entry point suffice.verdict_formats)"), "tests/formats"),
    "file format": (("its module", "pyproject.toml (entry point suffice.file_formats)"), "tests/formats"),
    "gate": (("its package", "pyproject.toml (entry point suffice.gates)"), "tests/examples/test_citation_gate.py"),
}


def main(argv: list[str]) -> int:
    before_ref = argv[0] if argv else "6bff9d5"
    result: dict[str, dict[str, object]] = {}
    for label, ref in (("before", before_ref), ("after", None)):
        sources = files(ref)
        found = checks(sources)
        result[label] = {
            "ref": ref or "working tree",
            "hand_written_checks": sum(found.values()),
            "cli_add_argument_calls": cli_flags(sources),
            "cli_range_checks": cli_range_checks(sources),
            "by_class": found,
            **{f"{name}_files_lines": mentions(sources, name) for name in OPTIONS},
            "lines_of_settings_files": sum(len(sources.get(name, "").splitlines()) for name in SETTINGS_FILES),
        }
    print(f"{'measure':40} {'before':>12} {'after':>12}")
    for key in (
        "hand_written_checks",
        "cli_add_argument_calls",
        "cli_range_checks",
        *(f"{n}_files_lines" for n in OPTIONS),
        "lines_of_settings_files",
    ):
        print(f"{key:40} {result['before'][key]!s:>12} {result['after'][key]!s:>12}")
    for label in ("before", "after"):
        print(f"\n{label}: " + ", ".join(f"{k.split(':')[1]} {v}" for k, v in result[label]["by_class"].items()))  # type: ignore[union-attr]
    kinds = declarations()
    surfaces = list(next(iter(kinds.values())))
    print(f"\n{'knob kind':20} " + " ".join(f"{name[:14]:>14}" for name in surfaces))
    for kind, counts in kinds.items():
        print(f"{kind:20} " + " ".join(f"{counts[name]:>14}" for name in surfaces))
    print(f"\n{'to add a':20} {'files':>5}  where (proof)")
    for kind, (where, proof) in FILES_TO_ADD.items():
        print(f"{kind:20} {len(where):>5}  {', '.join(where)} ({proof})")
    result["knobs"] = {"declarations": kinds, "files_to_add": {k: list(w) for k, (w, _) in FILES_TO_ADD.items()}}  # type: ignore[dict-item]
    out = ROOT / "benchmarks" / "results" / "settings.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
