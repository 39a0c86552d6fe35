"""Settings declared once (suffice.settings): what is derived from a declaration, and docs/settings.md read from it.

The fixture ``Extended`` adds one engine option the way a new one is added: one field in the config, nothing
else; its flag, check, engine rule, in-process rule, vLLM keyword, resume record and table row follow."""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

from suffice.cli.engine_args import add_engine_args, engine_config_from_args
from suffice.cli.judge_cmd import IN_PROCESS
from suffice.exceptions import ConfigError
from suffice.serving import machine
from suffice.serving.engine_config import EngineConfig
from suffice.settings import declared, in_process_flags, setting, table, tagged

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Extended(EngineConfig):
    swap_space_gib: float | None = setting(
        None,
        "GPU build only: CPU swap space per GPU in GiB",
        minimum=0,
        maximum=1024,
        engines=("vllm",),
        instead="only an in-process vLLM engine swaps",
        build="gpu",
        in_process=True,
        verdict=True,
        vllm="swap_space",
    )


def _parse(*argv: str, config: type[EngineConfig] = Extended) -> EngineConfig:
    parser = argparse.ArgumentParser()
    add_engine_args(parser, config=config)
    return engine_config_from_args(parser.parse_args(list(argv)), config=config)


def test_a_new_engine_option_gets_its_flag_from_its_field():
    assert _parse("--swap-space-gib", "4").swap_space_gib == 4.0  # type: ignore[attr-defined]
    assert _parse().swap_space_gib is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["-1", "2000", "nan"])
def test_a_new_engine_option_is_checked_by_its_bounds(value: str):
    with pytest.raises(ConfigError, match=r"swap_space_gib=.*: must be between 0 and 1024") as caught:
        _parse("--swap-space-gib", value)
    assert caught.value.parameter == "swap_space_gib"


def test_a_new_engine_option_is_refused_by_an_engine_that_does_not_take_it():
    with pytest.raises(ConfigError, match="not used by the transformers engine: only an in-process vLLM engine swaps"):
        Extended(kind="transformers", swap_space_gib=4)


def test_a_new_engine_option_is_passed_to_vllm_recorded_for_resume_and_refused_off_its_build():
    config = Extended(swap_space_gib=4)
    assert config.vllm_kwargs()["swap_space"] == 4
    assert "swap_space" not in Extended().vllm_kwargs()
    assert config.recorded({})["swap_space_gib"] == "4.0"
    assert "swap_space_gib" not in Extended().recorded({})
    assert ("swap_space_gib", "--swap-space-gib") in in_process_flags(Extended)
    with pytest.raises(ConfigError, match="needs vLLM's GPU build") as caught:
        machine.check_build(config, gpu=False)
    assert caught.value.parameter == "swap_space_gib"


def test_a_new_engine_option_has_its_row_in_the_table():
    row = next(line for line in table(Extended).splitlines() if line.startswith("| `swap_space_gib`"))
    assert "`--swap-space-gib` `SUFFICE_SWAP_SPACE_GIB` `swap_space_gib`" in row
    assert "between 0 and 1024" in row
    assert "in-process, verdict, gpu build" in row


def test_every_engine_setting_with_a_flag_that_sets_this_process_is_refused_with_server():
    flags = {flag for _, flag in IN_PROCESS}
    for d in tagged(EngineConfig, in_process=True):
        assert d.flag in flags
    assert "--verbose" not in flags and "--api-key-file" not in flags


def test_every_verdict_setting_set_is_in_what_a_resume_checks():
    from suffice.serving.factory import engine_settings

    samples = {"vllm": EngineConfig(tensor_parallel_size=2, max_model_len=4096, backend="outlines")}
    samples["openai"] = EngineConfig(kind="openai", base_url="http://127.0.0.1:9", served_model="m")
    recorded = {kind: EngineConfig.recorded(config, {}) for kind, config in samples.items()}
    assert recorded["vllm"]["tensor_parallel_size"] == "2"
    assert recorded["openai"] == {"engine": "openai", "weights": "http://127.0.0.1:9", "model": "m"}
    assert engine_settings(samples["openai"])["model"] == "m"


def test_every_flag_setting_has_help_and_a_type():
    for d in declared(EngineConfig):
        assert d.spec.help, d.name
        assert d.type in (str, int, float, bool, Path), d.name


def test_the_settings_doc_is_the_code():
    spec = importlib.util.spec_from_file_location("settings_table", ROOT / "scripts" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == module.render(), (
        "docs/settings.md differs from the code: run `PYTHONPATH=. python scripts/settings_table.py`"
    )


def test_a_whole_number_for_a_float_setting_is_held_as_a_float():
    """auto_margin is recorded beside an output with repr: 0 and 0.0 must not make two runs differ."""
    from suffice.config import JudgeConfig

    assert repr(JudgeConfig(detail="auto", auto_margin=0).auto_margin) == "0.0"
    assert isinstance(EngineConfig(gpu_memory_utilization=1).gpu_memory_utilization, float)


@pytest.mark.parametrize("value", [True, "0.2", None])
def test_a_value_of_the_wrong_type_is_refused_naming_the_setting(value: object):
    from suffice.config import JudgeConfig

    with pytest.raises(ConfigError) as caught:
        JudgeConfig(auto_margin=value)  # type: ignore[arg-type]
    assert caught.value.parameter == "auto_margin"
