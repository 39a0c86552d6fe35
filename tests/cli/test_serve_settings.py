"""``suffice serve``'s settings from ``SUFFICE_*`` variables and a TOML file: a flag wins over a
variable, a variable over the file, the file over the default; every setting is reachable each
way; a bad value or an unknown key is a usage error naming the variable, or the key and the file."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest

from suffice.audit.keys import write_key_file
from suffice.cli.main import build_parser, main
from suffice.cli.serve_cmd import config_from_args
from suffice.cli.serve_settings import Setting
from suffice.exceptions import EXIT_USAGE, ConfigError
from suffice.server.config import ServeConfig


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def config(*argv: str, env: dict[str, str] | None = None) -> ServeConfig:
    return config_from_args(parsed(*argv), env or {})


def toml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---- precedence --------------------------------------------------------------------------------


def test_a_file_sets_what_nothing_else_sets(tmp_path: Path) -> None:
    assert config("--config", str(toml(tmp_path / "s.toml", "max_items = 64\n"))).max_items == 64


def test_a_variable_wins_over_the_file(tmp_path: Path) -> None:
    file = toml(tmp_path / "s.toml", "max_items = 64\n")
    assert config("--config", str(file), env={"SUFFICE_MAX_ITEMS": "32"}).max_items == 32


def test_a_flag_wins_over_a_variable_even_at_the_default_value() -> None:
    assert config("--max-items", "1024", env={"SUFFICE_MAX_ITEMS": "32"}).max_items == 1024


def test_the_default_stands_where_nothing_sets_it() -> None:
    assert config().max_items == ServeConfig().max_items


def test_suffice_config_names_the_file(tmp_path: Path) -> None:
    file = toml(tmp_path / "s.toml", "max_items = 64\n")
    assert config(env={"SUFFICE_CONFIG": str(file)}).max_items == 64


def test_the_config_flag_wins_over_suffice_config(tmp_path: Path) -> None:
    mine, theirs = toml(tmp_path / "a.toml", "max_items = 64\n"), toml(tmp_path / "b.toml", "max_items = 8\n")
    assert config("--config", str(mine), env={"SUFFICE_CONFIG": str(theirs)}).max_items == 64


def test_a_relative_path_in_the_file_is_read_from_the_files_folder(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    file = toml(tmp_path / "etc" / "s.toml", 'api_key_file = "client.key"\n')
    assert config("--config", str(file)).api_key_file == tmp_path / "etc" / "client.key"


def test_a_variable_switches_off_what_the_file_switched_on(tmp_path: Path) -> None:
    file = toml(tmp_path / "s.toml", "metrics_without_auth = true\n")
    assert config("--config", str(file), env={"SUFFICE_METRICS_WITHOUT_AUTH": "false"}).metrics_without_auth is False


def test_a_list_in_a_variable_is_comma_separated() -> None:
    assert config(env={"SUFFICE_GATE": "sufficiency, recovery"}).gates == ("sufficiency", "recovery")


def test_a_list_in_the_file_is_an_array(tmp_path: Path) -> None:
    file = toml(tmp_path / "s.toml", 'gate = ["recovery"]\nthreshold = "loose"\n')
    assert config("--config", str(file)).options == {"threshold": "loose"}


def test_a_gates_option_in_the_file_may_be_a_table(tmp_path: Path) -> None:
    file = toml(tmp_path / "s.toml", 'gate = ["recovery"]\nthreshold = { min_passages = 1 }\n')
    assert config("--config", str(file)).options == {"threshold": {"min_passages": 1}}


def test_flags_replace_a_variables_list_whole() -> None:
    assert config("--gate", "recovery", env={"SUFFICE_GATE": "sufficiency"}).gates == ("recovery",)


# ---- every setting, each way -------------------------------------------------------------------


def serve_settings() -> list[Setting]:
    return list(parsed().serve_settings.settings.values())


def sample(setting: Setting) -> tuple[list[str], str, str, Any]:
    """A value other than the default for ``setting``: as flags, as a variable, as TOML, and as parsed."""
    flag = "--" + setting.key.replace("_", "-")
    if setting.shape == "switch":
        return [flag], "true", "true", True
    if setting.choices:
        value: Any = next(choice for choice in reversed(setting.choices) if choice != setting.default)
        text, written = str(value), f'"{value}"'
    elif setting.convert is int:
        value, text, written = 7, "7", "7"
    elif setting.convert is float:
        value, text, written = 0.5, "0.5", "0.5"
    elif setting.convert is Path:
        value, text, written = Path("/srv/x"), "/srv/x", '"/srv/x"'
    else:
        value, text, written = "k=v", "k=v", '"k=v"'
    if setting.shape == "list":
        return [flag, text], text, f"[{written}]", [value]
    return [flag, text], text, written, value


@pytest.mark.parametrize("setting", serve_settings(), ids=lambda s: s.key)
def test_every_flag_is_a_variable_and_a_key_of_the_file(tmp_path: Path, setting: Setting) -> None:
    argv, text, written, value = sample(setting)
    file = toml(tmp_path / "s.toml", f"{setting.key} = {written}\n")
    found = []
    for args, env in [(parsed(*argv), {}), (parsed(), {setting.variable: text}), (parsed("--config", str(file)), {})]:
        args.serve_settings.resolve(args, env)
        found.append(getattr(args, setting.dest))
    assert found == [value, value, value]


@pytest.fixture
def everything(tmp_path: Path) -> dict[str, str]:
    """A variable for every field of ServeConfig, each away from its default."""
    (tmp_path / "client.key").write_text("t" * 32)
    write_key_file(tmp_path / "audit.key")
    return {
        "SUFFICE_GATE": "recovery,adequacy",
        "SUFFICE_DETAIL": "decision",
        "SUFFICE_THRESHOLD": "loose",
        "SUFFICE_HOST": "0.0.0.0",
        "SUFFICE_PORT": "9100",
        "SUFFICE_API_KEY_FILE": str(tmp_path / "client.key"),
        "SUFFICE_AUDIT_DB": str(tmp_path / "audit.db"),
        "SUFFICE_AUDIT_KEY": str(tmp_path / "audit.key"),
        "SUFFICE_ANCHOR_FILE": str(tmp_path / "anchor.json"),
        "SUFFICE_REVIEWER_KEYS": str(tmp_path / "reviewers"),
        "SUFFICE_MAX_BODY_BYTES": "4096",
        "SUFFICE_MAX_ITEMS": "8",
        "SUFFICE_MAX_CHUNKS_PER_ITEM": "16",
        "SUFFICE_MAX_FIELD_CHARS": "100",
        "SUFFICE_REQUEST_TIMEOUT": "5",
        "SUFFICE_MAX_PENDING_CHUNKS": "64",
        "SUFFICE_MAX_CONNECTIONS": "32",
        "SUFFICE_HEADER_TIMEOUT": "3",
        "SUFFICE_JUDGE_CACHE_SIZE": "4",
        "SUFFICE_ALLOWED_HOST": "gate.internal",
        "SUFFICE_INSECURE_NO_AUTH": "yes",
        "SUFFICE_METRICS_WITHOUT_AUTH": "on",
        "SUFFICE_VERBOSE": "1",
    }


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ServeConfig)])
def test_every_serve_config_field_is_reachable_from_the_environment(everything: dict[str, str], field: str) -> None:
    assert getattr(config(env=everything), field) != getattr(ServeConfig(), field)


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {"SUFFICE_PORT": "eighty"},
        {"SUFFICE_MAX_ITEMS": "0"},
        {"SUFFICE_GATE": "no-such-gate"},
        {"SUFFICE_INSECURE_NO_AUTH": "maybe"},
        {"SUFFICE_REQUEST_TIMEOUT": "inf"},
        {"SUFFICE_MAX_MODEL_LEN": "12"},
    ],
    ids=lambda env: next(iter(env)),
)
def test_a_bad_variable_is_refused_naming_it(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        config(env=env)
    assert caught.value.parameter == next(iter(env))


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('port = "eighty"\n', "port"),
        ("max_items = 0\n", "max_items"),
        ("max_items = true\n", "max_items"),
        ('gate = "sufficiency"\n', "gate"),
        ('insecure_no_auth = "yes"\n', "insecure_no_auth"),
        ("prot = 80\n", "prot"),
        ("[engine]\nmodel = 'x'\n", "engine"),
    ],
)
def test_a_bad_key_of_the_file_is_refused_naming_it(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config("--config", str(toml(tmp_path / "s.toml", text)))
    assert caught.value.parameter == key


@pytest.mark.parametrize("text", ['port = "eighty"\n', "max_items = 0\n", "prot = 80\n"])
def test_a_bad_key_of_the_file_is_refused_naming_the_file(tmp_path: Path, text: str) -> None:
    file = toml(tmp_path / "s.toml", text)
    with pytest.raises(ConfigError, match=str(file)):
        config("--config", str(file))


@pytest.mark.parametrize("text", [None, "port = \n"], ids=["missing", "not-toml"])
def test_a_file_that_cannot_be_read_is_refused_naming_it(tmp_path: Path, text: str | None) -> None:
    file = tmp_path / "s.toml"
    if text is not None:
        file.write_text(text)
    with pytest.raises(ConfigError) as caught:
        config("--config", str(file))
    assert (caught.value.parameter, caught.value.value) == ("config", str(file))


def test_serve_with_a_bad_variable_is_a_usage_error_before_the_engine_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import suffice.server.service as service

    def no_engine(config: object) -> None:
        raise AssertionError("the engine was started")

    monkeypatch.setattr(service, "make_engine", no_engine)
    monkeypatch.setenv("SUFFICE_MAX_ITEMS", "0")
    assert main(["serve", "--port", "0"]) == EXIT_USAGE
    assert "SUFFICE_MAX_ITEMS" in capsys.readouterr().err


def test_an_unknown_variable_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="suffice"):
        config(env={"SUFFICE_PROT": "80"})
    assert "SUFFICE_PROT" in caplog.text


def test_suffices_other_variables_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="suffice"):
        config(env={"SUFFICE_CACHE": "/tmp", "SUFFICE_FENCE_SECRET": "ab" * 16})
    assert caplog.text == ""


def test_serve_help_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """A gate option's description with a % sign broke argparse's help."""
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--help"])
    assert caught.value.code == 0
