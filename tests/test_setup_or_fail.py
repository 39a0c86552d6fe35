"""CI cannot go quiet: a test that cannot set itself up (strace, a tmpfs mount, a network namespace, a writable
cgroup, /dev/full) fails in CI and skips elsewhere, through :func:`tests.setup_or_fail.need` alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.setup_or_fail import in_ci, need

TESTS = Path(__file__).resolve().parent
#: What a skip for a missing piece of the machine names.
SETUP_WORDS = re.compile(r"strace|tmpfs|mount|unshare|namespace|cgroup|/dev/full|ptrace", re.IGNORECASE)


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_in_ci_the_missing_piece_fails_the_test_naming_it(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match="cannot set this test up in CI: no strace here"):
        need(False, "no strace here")
    with pytest.raises(pytest.fail.Exception):
        need(False, "no network namespace", or_weaker=True)


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_elsewhere_it_skips_or_runs_the_weaker_form(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match="no strace here"):
        need(False, "no strace here")
    assert need(False, "no network namespace", or_weaker=True) is False
    assert need(True, "unused") is True


def _skips(path: Path) -> list[tuple[int, str]]:
    """(line, source) of every ``pytest.skip(...)`` / ``pytest.mark.skipif(...)`` call in ``path``."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("pytest.skip", "pytest.mark.skipif", "pytest.mark.skip", "skip", "skipif"):
                found.append((node.lineno, ast.get_source_segment(source, node) or name))
    return found


def test_no_test_skips_for_a_missing_piece_of_the_machine_but_through_need():
    direct = [
        f"{path.relative_to(TESTS)}:{line}: {text}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "setup_or_fail.py"
        for line, text in _skips(path)
        if SETUP_WORDS.search(text)
    ]
    assert direct == [], "route these through tests.setup_or_fail.need, so CI fails instead of skipping"
