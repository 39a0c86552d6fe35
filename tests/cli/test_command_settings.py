"""``judge`` and ``calibrate`` read their settings as ``serve`` does (one reader, suffice.cli.serve_settings): a
flag, then a ``SUFFICE_*`` variable, then the ``--config`` TOML file, then the default; every setting each way."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from suffice.cli.judge_cmd import read_settings
from suffice.cli.main import build_parser, main
from suffice.cli.serve_settings import Setting
from suffice.exceptions import EXIT_USAGE
from tests.cli.test_serve_settings import sample, toml

COMMANDS = {"judge": ["in.jsonl", "-o", "out.jsonl"], "calibrate": ["golden.jsonl", "-o", "report"]}


def parsed(command: str, *argv: str) -> argparse.Namespace:
    return build_parser().parse_args([command, *COMMANDS[command], *argv])


def settings(command: str) -> list[Setting]:
    return list(parsed(command).command_settings.settings.values())


@pytest.mark.parametrize(
    ("command", "setting"),
    [(command, setting) for command in COMMANDS for setting in settings(command)],
    ids=lambda value: value if isinstance(value, str) else value.key,
)
def test_every_flag_is_a_variable_and_a_key_of_the_file(tmp_path: Path, command: str, setting: Setting) -> None:
    argv, text, written, value = sample(setting)
    file = toml(tmp_path / "s.toml", f"{setting.key} = {written}\n")
    found = []
    for args, env in [
        (parsed(command, *argv), {}),
        (parsed(command), {setting.variable: text}),
        (parsed(command, "--config", str(file)), {}),
    ]:
        read_settings(args, env)
        found.append(getattr(args, setting.dest))
    assert found == [value, value, value]


def test_the_engine_settings_and_the_batch_size_are_settings_of_both() -> None:
    for command in COMMANDS:
        keys = {setting.key for setting in settings(command)}
        assert {"engine", "model", "max_model_len", "compile", "batch_size", "detail", "gate"} <= keys
        assert "output" not in keys  # a required flag is not a setting


def test_a_flag_wins_over_a_variable_even_at_the_default_value(tmp_path: Path) -> None:
    file = toml(tmp_path / "s.toml", "batch_size = 8\n")
    args = parsed("judge", "--batch-size", "256", "--config", str(file))
    read_settings(args, {"SUFFICE_BATCH_SIZE": "32"})
    assert args.batch_size == 256
    args = parsed("judge", "--config", str(file))
    read_settings(args, {"SUFFICE_BATCH_SIZE": "32"})
    assert args.batch_size == 32
    args = parsed("judge", "--config", str(file))
    read_settings(args, {})
    assert args.batch_size == 8
    args = parsed("judge")
    read_settings(args, {})
    assert args.batch_size == 256


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SUFFICE_BATCH_SIZE": "0"}, "SUFFICE_BATCH_SIZE=0: must be at least 1"),
        ({"SUFFICE_MAX_MODEL_LEN": "12"}, "SUFFICE_MAX_MODEL_LEN=12: must be at least 1024"),
        ({"SUFFICE_ENGINE": "tgi"}, "SUFFICE_ENGINE='tgi': must be one of"),
        ({"SUFFICE_COMPILE": "maybe"}, "SUFFICE_COMPILE='maybe'"),
    ],
)
def test_judge_with_a_bad_variable_is_a_usage_error_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    named: str,
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    for variable, text in env.items():
        monkeypatch.setenv(variable, text)
    assert main(["judge", str(source), "-o", str(tmp_path / "out.jsonl")]) == EXIT_USAGE
    assert named in capsys.readouterr().err


def test_calibrate_takes_a_setting_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = toml(tmp_path / "s.toml", "precision_target = 2.0\n")
    assert (
        main(["calibrate", str(tmp_path / "g.jsonl"), "-o", str(tmp_path / "r"), "--config", str(file)]) == EXIT_USAGE
    )
    assert "precision_target=2.0: must be more than 0 and at most 1 (set as precision_target in" in (
        capsys.readouterr().err
    )


def test_an_unknown_key_of_judges_file_names_the_command(tmp_path: Path) -> None:
    from suffice.exceptions import ConfigError

    args = parsed("judge", "--config", str(toml(tmp_path / "s.toml", "max_items = 64\n")))
    with pytest.raises(ConfigError, match="not a setting of suffice judge") as caught:
        read_settings(args, {})
    assert caught.value.parameter == "max_items"


def test_with_server_an_engine_setting_from_the_environment_is_left_alone_and_its_flag_refused() -> None:
    """A deployment's SUFFICE_VERDICT_CACHE (or a settings file's model) is for runs that start an engine."""
    from suffice.cli.judge_cmd import in_process_setting

    args = parsed("judge", "--server", "http://127.0.0.1:9")
    read_settings(args, {"SUFFICE_VERDICT_CACHE": "off", "SUFFICE_MODEL": "/m"})
    assert in_process_setting(args) is None
    args = parsed("judge", "--server", "http://127.0.0.1:9", "--model", "/m")
    read_settings(args, {})
    assert in_process_setting(args) == ("model", "--model")


@pytest.mark.parametrize("command", ["judge", "calibrate", "serve"])
def test_every_command_that_judges_reads_a_setting_in_the_same_order(tmp_path: Path, command: str) -> None:
    """A flag (even at the default), then a variable, then the file, then the default: the same in all three."""
    base = [command, *COMMANDS.get(command, [])]
    file = toml(tmp_path / "s.toml", 'detail = "decision"\n')
    ladder = [
        (["--detail", "full", "--config", str(file)], {"SUFFICE_DETAIL": "auto"}, "full"),
        (["--config", str(file)], {"SUFFICE_DETAIL": "auto"}, "auto"),
        ([], {"SUFFICE_CONFIG": str(file)}, "decision"),
        ([], {}, "full"),
    ]
    found = []
    for argv, env, _ in ladder:
        args = build_parser().parse_args([*base, *argv])
        read_settings(args, env)
        found.append(args.detail)
    assert found == [want for _, _, want in ladder]
    if command == "serve":  # and what serve runs on is what it read
        from suffice.cli.serve_cmd import config_from_args

        args = build_parser().parse_args([*base, "--config", str(file)])
        assert config_from_args(args, {"SUFFICE_DETAIL": "auto"}).judge.detail == "auto"


def test_calibrate_save_without_a_path_wins_over_the_variable() -> None:
    """--save without a path, given, is not replaced by SUFFICE_SAVE."""
    args = parsed("calibrate", "--save")
    read_settings(args, {"SUFFICE_SAVE": "elsewhere.json"})
    assert args.save == Path()
    args = parsed("calibrate")
    read_settings(args, {"SUFFICE_SAVE": "elsewhere.json"})
    assert args.save == Path("elsewhere.json")
