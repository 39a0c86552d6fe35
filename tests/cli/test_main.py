"""``suffice.cli.main.main`` called from Python, as a test run or a service calls it."""

import signal

from suffice.cli.main import main
from suffice.exceptions import EXIT_OK


def test_main_called_from_python_gives_back_the_callers_sigterm_handler(tmp_path):
    """While it runs, main() turns SIGTERM into a clean exit; once it returns, the calling program's own handler is
    back (a test run or a service calling main() must not have its SIGTERM turned into SystemExit(143))."""
    mine = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        theirs = signal.getsignal(signal.SIGTERM)
        assert main(["audit", "keygen", "-o", str(tmp_path / "k")]) == EXIT_OK
        assert signal.getsignal(signal.SIGTERM) is theirs
    finally:
        signal.signal(signal.SIGTERM, mine)
