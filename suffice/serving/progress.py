"""The progress bar of ``suffice judge``, ``calibrate`` and ``demo``, and of ``judge_batch(progress=True)``: whole
records, with a rate and an ETA.

- It counts records, never parts of one.  The engine reports prompts read (prefill done) apart from records finished
  (:meth:`~suffice.serving.base.Progress.read`); they show after the bar ("prompts read 37"), so a large batch that
  is still reading its prompts moves the line without moving the count.
- The rate and the ETA are measured from the engine's first sign of work (a prompt read, or else the first records
  finished, which are then left out of the rate), so the engine's start-up (tens of seconds) is not in them; and
  they are shown only once a record has finished since then, as before that there is nothing to measure them by.
- Records answered without the engine (a row from an earlier run, a repeated id:
  :meth:`~suffice.serving.base.Progress.skipped`) advance the count but are not in the rate.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from tqdm import tqdm

from suffice.serving.base import Progress, checked_progress

#: The bar's layout; ``postfix`` is this module's (rate, ETA, prompts read), not tqdm's own rate and ETA, which
#: would count from the bar's start, engine start-up included.
_KNOWN_TOTAL = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
_UNKNOWN_TOTAL = "{n_fmt} rec [{elapsed}{postfix}]"


class RecordBar:
    """A tqdm bar on ``file`` (stderr) for ``total`` records (``None``: unknown), ``done`` of them already done.

    A :class:`~suffice.serving.base.Progress`: called with records finished, told prompts read and records
    answered without the engine.  ``clock``
    (seconds) measures the rate; ``mininterval`` is the least time between redraws.
    """

    def __init__(
        self,
        total: int | None,
        done: int = 0,
        *,
        file: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        mininterval: float = 0.1,
    ) -> None:
        self._clock = clock
        self._mininterval = mininterval
        #: When the engine first showed work (``None``: not yet).
        self._started: float | None = None
        #: Records finished since then, and prompts read.
        self._judged = 0
        self._prompts = 0
        self._drawn = 0.0
        self._bar = tqdm(
            total=total,
            initial=done,
            unit="rec",
            file=file if file is not None else sys.stderr,
            dynamic_ncols=True,
            mininterval=mininterval,
            miniters=1,
            bar_format=_KNOWN_TOTAL if total is not None else _UNKNOWN_TOTAL,
        )

    @property
    def count(self) -> int:
        """Records done so far (every one, skipped ones included)."""
        return int(self._bar.n)

    def postfix(self, coming: int = 0) -> str:
        """What follows the elapsed time once ``coming`` more records are counted: the rate and the ETA once they
        can be measured, and the prompts read."""
        parts = []
        if self._started is not None and self._judged > 0:
            seconds = self._clock() - self._started
            if seconds > 0:
                rate = self._judged / seconds
                parts.append(f"{rate:.2f} rec/s" if rate < 100 else f"{rate:.0f} rec/s")
                total = self._bar.total
                if total is not None:
                    left = max(total - self.count - coming, 0)
                    parts.append("ETA " + tqdm.format_interval(left / rate))
        if self._prompts:
            parts.append(f"prompts read {self._prompts}")
        return ", ".join(parts)

    def __call__(self, records: int) -> None:
        """``records`` more records finished."""
        if self._started is None:
            # No prompt was reported read: the clock starts at these records, which it cannot time.
            self._started = self._clock()
        else:
            self._judged += records
        self._advance(records)

    def read(self, prompts: int) -> None:
        """``prompts`` more prompts have been read by the engine."""
        if self._started is None:
            self._started = self._clock()
        self._prompts += prompts
        self._advance(0)

    def skipped(self, records: int) -> None:
        """``records`` more records were answered without the engine."""
        self._advance(records)

    def _advance(self, records: int) -> None:
        self._bar.set_postfix_str(self.postfix(records), refresh=False)
        if records:
            self._bar.update(records)  # redraws at most every mininterval
            self._drawn = time.monotonic()
        elif time.monotonic() - self._drawn >= self._mininterval:
            self._bar.refresh()
            self._drawn = time.monotonic()

    def close(self) -> None:
        """Draw the last state and end the line."""
        self._bar.set_postfix_str(self.postfix(), refresh=False)
        self._bar.close()


@contextlib.contextmanager
def progress_of(progress: object, total: int) -> Iterator[Progress | None]:
    """What a ``judge_batch`` call reports to: ``True``, a :class:`RecordBar` on stderr for its ``total`` records
    (closed when the call ends); ``None`` or ``False``, nothing (the default: a library prints nothing unasked); or the
    caller's own :class:`~suffice.serving.base.Progress` (anything else is refused by
    :func:`~suffice.serving.base.checked_progress`)."""
    if progress is True:
        bar = RecordBar(total)
        try:
            yield bar
        finally:
            bar.close()
    else:
        yield None if progress is False else checked_progress(progress)


def progress_bar(total: int | None, done: int) -> tuple[RecordBar, Callable[[], None]]:
    """A :class:`RecordBar` on stderr and the function that closes it (a ``ProgressFactory`` of the runner)."""
    bar = RecordBar(total, done)
    return bar, bar.close
