"""Start-up steps as DEBUG lines with monotonic times, on the logger ``suffice.serving.startup``.

A one-record job spends most of its time before and around its first verdict: imports,
the engine's processes, weights, KV cache, constraint compiles.  Each step's end is
logged here with ``time.monotonic()`` (one clock for every process of the machine), so
a handler on this logger (``benchmarks/bench_startup.py`` adds one) puts the steps in
order and measures them; without one, a mark costs one level check.
"""

from __future__ import annotations

import logging
import time

#: The logger the marks go to (DEBUG; off unless a handler and level are set on it).
LOGGER = "suffice.serving.startup"

_log = logging.getLogger(LOGGER)


def enabled() -> bool:
    """Whether marks are recorded (a caller can skip the bookkeeping a mark needs)."""
    return _log.isEnabledFor(logging.DEBUG)


def mark(step: str) -> None:
    """Log that ``step`` has just ended, at the monotonic time now: ``start-up: STEP at SECONDS``."""
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("start-up: %s at %.6f", step, time.monotonic())
