"""The one place a command turns a suffice error into its message and exit status, both read from
:data:`suffice.exceptions.STATUS`, and the one way a command is added (:func:`command`)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from suffice.exceptions import EXIT_FATAL, SufficeError, status_of
from suffice.records.text import terminal_text
from suffice.serving.extras import missing_extra
from suffice.settings import add_flags


def fail(error: SufficeError, results_in: Path | None = None, doing: str = "") -> int:
    """Say ``error`` on stderr, with what the caller can do, and return its exit status.  ``results_in``: the
    output a run that stopped part way has written; named when the run cannot go on (exit 1), not when the command
    must change first.  ``doing``: what failed, said before the error when the command did more than one thing."""
    status = status_of(error)
    text = terminal_text(error if not doing else f"{doing}: {error}")
    if status.exit == EXIT_FATAL and results_in is not None:
        then = f"; {status.then}" if status.then else ""
        print(f"\nerror: {text}\nresults so far are in {terminal_text(results_in)}{then}", file=sys.stderr)
    else:
        print(f"error: {text}" + (f" ({status.then})" if status.then else ""), file=sys.stderr)
    return status.exit


def reports_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``run`` (a command) with any suffice error it raises said by :func:`fail`, its exit status returned; so is a
    module that only an extra installs, found missing (:func:`suffice.serving.extras.missing_extra`: the extra by
    name, not a traceback)."""

    @functools.wraps(run)
    def reporting(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except SufficeError as exc:
            return fail(exc)
        except ModuleNotFoundError as exc:
            said = missing_extra(exc)
            if said is None:
                raise
            return fail(said)

    return reporting


def command(
    sub: Any,
    name: str,
    run: Callable[[argparse.Namespace], int],
    settings: type,
    only: Sequence[str] | None = None,
    **parser: Any,
) -> argparse.ArgumentParser:
    """The subcommand ``name`` added to ``sub`` (``parser``: its help, aliases; its description is ``run``'s
    docstring), with a flag for each setting ``settings`` declares (of those named ``only``), run by ``run`` with its
    errors said by :func:`reports_errors`; the command's other flags go onto the parser returned."""
    p: argparse.ArgumentParser = sub.add_parser(name, description=run.__doc__, **parser)
    add_flags(p, settings, only=only)
    p.set_defaults(run=reports_errors(run))
    return p
