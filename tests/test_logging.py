"""The library logs, it does not print: only the command-line modules write to the terminal."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import suffice

PACKAGE = Path(suffice.__file__).parent


def is_cli(path: Path) -> bool:
    """``suffice/cli/``, a gate's own ``cli.py`` (``suffice/gates/<gate>/cli.py``) and the script every bundle carries
    (``suffice/bundle/verify.py``, run with ``python3`` before suffice is installed)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] == "cli" or (parts[0] == "gates" and parts[-1] == "cli.py") or parts == ("bundle", "verify.py")


def prints(source: str) -> list[int]:
    """The lines of every ``print(...)`` call in ``source``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]


def test_no_print_outside_the_command_line_modules():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not is_cli(path)
        for line in prints(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_check_finds_a_print_call_and_nothing_else():
    assert prints("x = 1\nprint('a', file=None)\ndef f():\n    print()\nlog.info('print(')\n") == [2, 4]


def test_the_command_line_modules_are_told_apart():
    assert is_cli(PACKAGE / "cli" / "main.py")
    assert is_cli(PACKAGE / "gates" / "adequacy" / "cli.py")
    assert not is_cli(PACKAGE / "serving" / "vllm" / "engine.py")


def test_the_suffice_logger_has_a_null_handler():
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("suffice").handlers)


def test_the_command_shows_the_librarys_warnings_and_with_verbose_its_info(monkeypatch, capsys):
    import argparse

    from suffice.cli import main as cli

    def run(args: argparse.Namespace) -> int:
        logging.getLogger("suffice.somewhere").warning("a warning")
        logging.getLogger("suffice.somewhere").info("some info")
        return 0

    parser = argparse.ArgumentParser()
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(run=run)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    logger = logging.getLogger("suffice")
    before = (list(logger.handlers), logger.level)
    assert cli.main([]) == 0
    assert capsys.readouterr().err == "a warning\n"
    assert cli.main(["-v"]) == 0
    assert capsys.readouterr().err == "a warning\nsome info\n"
    assert (list(logger.handlers), logger.level) == before
