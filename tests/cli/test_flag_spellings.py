"""Every flag a command took before its flags were derived from declarations (issue 39) still parses, into the same
argument, and is listed by the command's ``--help``.

``old_flags.json`` is each command's arguments as argparse held them when they were written by hand: their
spellings, destination, action, type and choices.  A command may gain flags; it may not lose or rename one, except
with the option it sets: the recovery gate's ``--max-claims`` and ``--max-cited-sentences`` went with their options
(recovery v4, issue 49: every segment of the response is judged, so no claim list or cited answer is bounded), and
are refused rather than ignored.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from suffice.cli.main import build_parser

OLD: dict[str, list[dict[str, Any]]] = json.loads((Path(__file__).parent / "old_flags.json").read_text())
_CONVERT = {"Path": Path, "int": int, "float": float, None: str}


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def _sample(action: dict[str, Any]) -> str:
    if action["choices"]:
        return str(action["choices"][0])
    return {"int": "3", "float": "0.5"}.get(action["type"], "x")


def _base(command: str) -> list[str]:
    """The command with what it requires: its arguments and required flags, each a sample value."""
    argv = command.split()
    for action in OLD[command]:
        if not action["opts"]:
            argv.append(_sample(action))
        elif action["required"]:
            argv += [action["opts"][-1], _sample(action)]
    return argv


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for name in command.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


CASES = [
    (command, action, spelling)
    for command, actions in OLD.items()
    for action in actions
    for spelling in action["opts"] or [None]
]


@pytest.mark.parametrize(
    ("command", "action", "spelling"),
    CASES,
    ids=[f"{c} {s or a['dest']}" for c, a, s in CASES],
)
def test_an_old_spelling_parses_into_the_same_argument(
    parser: argparse.ArgumentParser, command: str, action: dict[str, Any], spelling: str | None
) -> None:
    base = _base(command)
    if spelling is None:  # an argument: the base gave it its sample
        expected: Any = _CONVERT[action["type"]](_sample(action))
        assert getattr(parser.parse_args(base), action["dest"]) == expected
        return
    kind = action["action"]
    if kind == "storetrue":
        argv, expected = [spelling], True
    elif kind == "storeconst":
        argv, expected = [spelling], None
    else:
        text = _sample(action)
        argv, expected = [spelling, text], _CONVERT[action["type"]](text)
        if kind == "append":
            expected = [expected]
    parsed = getattr(parser.parse_args(base + argv), action["dest"])
    if kind == "storeconst":  # its own constant, whatever it is: not what the command holds without it
        assert parsed != getattr(parser.parse_args(base), action["dest"])
    else:
        assert parsed == expected


@pytest.mark.parametrize("command", list(OLD))
def test_help_lists_every_old_flag(parser: argparse.ArgumentParser, command: str) -> None:
    text = _subparser(parser, command).format_help()
    listed = set(re.findall(r"(?<![\w-])(--?[\w][\w-]*)", text))
    old = {spelling for action in OLD[command] for spelling in action["opts"]}
    assert old <= listed, sorted(old - listed)


#: Flags removed with the recovery options they set (recovery v4), and the option that bounds what the model writes
#: for the response now.
REMOVED = ("--max-claims", "--max-cited-sentences")
REPLACEMENT = "--max-sources-per-segment"


@pytest.mark.parametrize("command", ["judge", "calibrate", "serve"])
@pytest.mark.parametrize("spelling", REMOVED)
def test_a_flag_removed_with_its_option_is_refused_not_ignored(
    parser: argparse.ArgumentParser, command: str, spelling: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _base(command)
    with pytest.raises(SystemExit):
        parser.parse_args([*base, spelling, "3"])
    assert spelling in capsys.readouterr().err
    assert parser.parse_args([*base, REPLACEMENT, "3"]).gate_option_max_sources_per_segment == "3"
