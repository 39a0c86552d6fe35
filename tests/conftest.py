from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# ``--ci-phases PATH``: where a run's time goes (benchmarks/ci_phases.py reads the record).
from tests.phases import (  # noqa: F401
    pytest_addoption,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_protocol,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_unconfigure,
)

# One fence secret for the session and every process it starts: a verdict compared across two
# processes (a resumed run, --server against in process) must come from one prompt.
os.environ.setdefault("SUFFICE_FENCE_SECRET", "5e" * 32)
# Tests judge the same records again on purpose (determinism, batching, dtypes, resume): the verdict cache would
# answer them without the engine.  Off for the whole session and its subprocesses; tests/test_cache.py turns it on.
os.environ["SUFFICE_VERDICT_CACHE"] = "off"

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SAMPLE = Path(__file__).resolve().parents[1] / "suffice" / "data" / "sample.jsonl"


def load_records(name: str, limit: int) -> list[dict[str, object]]:
    """Records from ../shared/data when present, else from the bundled sample."""
    path = DATA / name
    if not path.exists():
        path = SAMPLE
    out = []
    with path.open() as handle:
        for line in handle:
            out.append(json.loads(line))
            if len(out) >= limit:
                break
    return out


@pytest.fixture
def squad_records() -> list[dict[str, object]]:
    return load_records("squad2.jsonl", 6)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An engine-matrix test marked ``any_backend`` runs on the default backend only.
    What a backend enforces is the grammar it compiles: tests/grammars/test_backends.py
    compiles every gate's constraint with each backend and the real tokenizer, and
    ``test_one_small_generation_per_backend`` keeps one real generation per backend.
    Why: the matrix took 25 of the engine tests' 66 minutes on two cores (2026-12-01).

    Then the modules whose tests use the session's vLLM server (``vllm_server``) go
    last, in their order: the server lives from its first user to the session's end, and
    should not hold its memory (about 3 GB) beside the engines other tests start.
    ``trylast``: after pytest has grouped the tests by their session parameters."""
    from suffice.serving.engine_config import DEFAULT_BACKEND

    dropped = [
        item
        for item in items
        if item.get_closest_marker("any_backend") is not None
        and (callspec := getattr(item, "callspec", None)) is not None
        and callspec.params.get("engine", DEFAULT_BACKEND) != DEFAULT_BACKEND
    ]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]
    # A whole module moves with its users: a test that reaches the server through ``request.getfixturevalue`` does
    # not name it, and a module split in two builds its module-scoped verdicts twice.
    modules = {item.nodeid.split("::")[0] for item in items if "vllm_server" in getattr(item, "fixturenames", ())}
    server = [item for item in items if item.nodeid.split("::")[0] in modules]
    if server:
        users = {id(item) for item in server}
        items[:] = [item for item in items if id(item) not in users] + server


@pytest.fixture(scope="session", params=["outlines", "xgrammar", "guidance"])
def engine(request):
    """One real vLLM engine per structured-output backend, shared by every gate's tests.

    Session-scoped and parametrized: pytest groups the tests by backend and closes
    each engine before the next starts.  The transformers engine has its own, smaller
    module (tests/serving/test_transformers_engine.py): in this matrix it took 17.6 of
    the suite's 55 minutes on two cores (it re-encodes the whole prompt per segment).
    """
    from suffice.serving.engine_config import EngineConfig
    from suffice.serving.vllm.engine import VLLMEngine

    built = VLLMEngine(EngineConfig(backend=request.param))
    yield built
    built.close()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of one real vLLM server for the session (tests/vllm_server.py).

    One for the session, not one per module: a start is about a minute on two cores,
    and the command-line tests judge through it instead of starting an engine per
    process (calibrate, the gates on data and judge's resume: 632 s -> 199 s)."""
    from tests.vllm_server import running_server

    with running_server(tmp_path_factory.mktemp("vllm-server")) as url:
        yield url


@pytest.fixture(scope="session")
def suffice_server(vllm_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of one real ``suffice serve`` for the session, judging through ``vllm_server``
    (its key: ``tests.vllm_server.SERVE_KEY``).  The integrations and ``judge --server`` share it."""
    from tests.vllm_server import running_suffice_serve

    with running_suffice_serve(tmp_path_factory.mktemp("suffice-serve"), vllm_server) as url:
        yield url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many of the docs' examples ran (tests/docs/test_examples.py), when any did."""
    from tests.docs.blocks import summary_line

    line = summary_line(terminalreporter.stats.get("passed", []))
    if line is not None:
        terminalreporter.write_line(line)


class _KeepModules:
    def restore(self) -> None:
        """Nothing: a module a pytester test imported stays imported."""


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's ``pytester``, less its clean-up of ``sys.modules``: it drops every module a test imported, and a C
    extension (numpy, pyarrow, pandas) dropped and imported again by a later test in the same worker crashes it."""
    pytester._sys_modules_snapshot = _KeepModules()  # type: ignore[assignment]
    return pytester
