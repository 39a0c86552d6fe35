"""What `pip install suffice` (no extra: the client, the integrations, the pytest plugin) costs an application:
the disk it adds to a virtual environment and the time `import suffice` plus the client take, side by side for the
light client ("after": Parquet and the server are extras) and the same wheel with what the core used to pull in
("before": pyarrow, fastapi, uvicorn and prometheus_client).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_install.py [--repeats 7]

Both environments are installed with ``--no-index`` from a wheelhouse repacked from this checkout's own virtual
environment (no network).  Prints a table and writes benchmarks/results/install.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from tests.packaging.wheelhouse import build_project, closure, repack

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "install.json"
#: What the core dependencies held before the client was made light.
FORMER_CORE = ("pyarrow", "fastapi", "uvicorn", "prometheus_client")
IMPORT = "import suffice, suffice.client, suffice.integrations.gating, suffice.testing"


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_CONSTRAINT", "PIP_FIND_LINKS")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return done  # type: ignore[no-any-return]


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _venv(folder: Path) -> tuple[Path, Path]:
    _run([sys.executable, "-m", "venv", str(folder)])
    site = next((folder / "lib").glob("python*/site-packages"))
    return folder / "bin" / "python", site


def _import_seconds(python: Path, cwd: Path, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _run([str(python), "-c", IMPORT], cwd=cwd)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(work: Path, wheels: Path, extra: tuple[str, ...], repeats: int) -> dict[str, float]:
    python, site = _venv(work / "venv")
    bare = _size(site)
    _run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels), "suffice", *extra])
    baseline = statistics.median([_timed(lambda: _run([str(python), "-c", "pass"], cwd=work)) for _ in range(repeats)])
    return {
        "install_mb": round((_size(site) - bare) / 1e6, 1),
        "import_s": round(_import_seconds(python, work, repeats) - baseline, 3),
    }


def _timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        build_project(wheels)
        for dist in closure(["suffice", *FORMER_CORE]):
            if canonicalize_name(dist.metadata["Name"]) != "suffice":
                repack(dist, wheels)
        rows = {}
        for name, extra in (("before", FORMER_CORE), ("after", ())):
            (Path(tmp) / name).mkdir()
            rows[name] = measure(Path(tmp) / name, wheels, extra, args.repeats)
    ratio = {key: round(rows["after"][key] / rows["before"][key], 2) for key in rows["after"]}
    print(f"{'client install':<16}{'MB added':>10}{'import s':>10}")
    for name, row in rows.items():
        print(f"{name:<16}{row['install_mb']:>10}{row['import_s']:>10}")
    print(f"{'after/before':<16}{ratio['install_mb']:>10}{ratio['import_s']:>10}")
    RESULTS.write_text(json.dumps({"import": IMPORT, **rows, "ratio": ratio}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
