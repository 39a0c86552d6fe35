"""``suffice.cli.main.main`` called from Python, as a test run or a service calls it."""

import ast
import signal
from pathlib import Path

import suffice
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


def _hand_said_errors(path: Path) -> list[int]:
    """The lines of ``path`` that print a message starting "error" themselves, instead of raising the error."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and node.args):
            continue
        text = node.args[0]
        while isinstance(text, ast.BinOp):  # f"error: {x}" + more
            text = text.left
        if isinstance(text, ast.JoinedStr) and text.values:
            text = text.values[0]
        if isinstance(text, ast.Constant) and str(text.value).lstrip().startswith("error"):
            found.append(node.lineno)
    return found


def test_every_command_error_is_said_by_the_error_table():
    """A command raises a suffice error and ``reports_errors`` says it with the table's exit status
    (``suffice.cli.errors``, the one place that prints "error: ..."), never its own ``print("error: ...")``."""
    package = Path(suffice.__file__).parent
    commands = [p for p in (package / "cli").glob("*.py") if p.name != "errors.py"]
    said = {str(p.relative_to(package)): _hand_said_errors(p) for p in [*commands, *package.glob("gates/*/cli.py")]}
    assert {path: lines for path, lines in said.items() if lines} == {}
    assert len(_hand_said_errors(package / "cli" / "errors.py")) == 2  # the scan finds what it looks for
