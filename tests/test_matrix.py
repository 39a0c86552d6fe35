"""The engine matrix's selection (tests/conftest.py): a test marked ``any_backend``
runs on the default backend only, every other matrix test on all three."""

import pytest

from suffice.serving.engine_config import BACKENDS, DEFAULT_BACKEND

pytest_plugins = ["pytester"]

MATRIX = """
import pytest

@pytest.fixture(scope="session", params={backends!r})
def engine(request):
    return request.param

@pytest.mark.any_backend
def test_harness(engine):
    pass

def test_validity(engine):
    pass

@pytest.mark.any_backend
def test_no_engine():
    pass
"""


@pytest.fixture
def collected(pytester: pytest.Pytester) -> list[str]:
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    pytester.makeini("[pytest]\nmarkers =\n    any_backend: test\n")
    pytester.makepyfile(test_matrix_probe=MATRIX.format(backends=list(BACKENDS)))
    result = pytester.runpytest("--collect-only", "-q")
    return [line.split("::", 1)[1] for line in result.outlines if "::" in line]


def test_a_marked_test_runs_on_the_default_backend_only(collected):
    assert [name for name in collected if name.startswith("test_harness")] == [f"test_harness[{DEFAULT_BACKEND}]"]


def test_an_unmarked_test_runs_on_every_backend(collected):
    assert [name for name in collected if name.startswith("test_validity")] == [
        f"test_validity[{backend}]" for backend in BACKENDS
    ]


def test_a_marked_test_outside_the_matrix_still_runs(collected):
    assert "test_no_engine" in collected
