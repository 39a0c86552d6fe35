"""Start-up marks: a DEBUG line with the monotonic time when asked for, nothing otherwise."""

from __future__ import annotations

import logging
import re
import time

from suffice.serving import startup


def test_a_mark_logs_the_step_at_the_monotonic_time_now(caplog):
    caplog.set_level(logging.DEBUG, logger=startup.LOGGER)
    before = time.monotonic()
    startup.mark("engine built")
    after = time.monotonic()
    [record] = [r for r in caplog.records if r.name == startup.LOGGER]
    found = re.fullmatch(r"start-up: engine built at (\d+\.\d+)", record.getMessage())
    assert found is not None
    assert before <= float(found.group(1)) <= after + 1e-6


def test_no_mark_is_logged_unless_debug_is_on(caplog):
    caplog.set_level(logging.INFO, logger=startup.LOGGER)
    startup.mark("engine built")
    assert not startup.enabled()
    assert [r for r in caplog.records if r.name == startup.LOGGER] == []
