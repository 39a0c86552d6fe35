"""One rule for a test that needs something of the machine to set itself up (strace, a tmpfs mount, a network
namespace, a writable cgroup, ``/dev/full``): where it is missing the test skips on a developer's machine, but in CI
(``CI`` set to ``true``, as ``.ci/run`` does) it fails.  A proof that cannot run must not leave CI green: the
security, no-network, full-disk and read-only tests are the ones that prove what docs/security.md promises, and
``.ci/run`` installs what they need."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` is ``true``, ``1`` or ``yes``, as CI services and ``.ci/run`` set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def need(condition: object, why: str, *, or_weaker: bool = False) -> bool:
    """Go on when ``condition`` holds.  Otherwise fail in CI, naming ``why``; elsewhere skip, or with ``or_weaker``
    return False so the test runs a weaker form of itself (strace without a network namespace)."""
    if condition:
        return True
    if in_ci():
        pytest.fail(f"cannot set this test up in CI: {why} (.ci/run installs what these tests need)", pytrace=False)
    if or_weaker:
        return False
    pytest.skip(why)
