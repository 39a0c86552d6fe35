"""EngineConfig: each engine takes only its own settings, and errors name them."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest

from suffice.cli.engine_args import add_engine_args, engine_config_from_args
from suffice.exceptions import ConfigError, EngineError
from suffice.serving import machine
from suffice.serving.engine_config import DEFAULT_BACKEND, EngineConfig
from suffice.serving.factory import engine_settings
from suffice.serving.machine import check_build
from suffice.serving.offline import OFFLINE_ENV
from suffice.serving.vllm.engine import VLLMEngine


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"kind": "transformers", "backend": "xgrammar"}, "backend"),
        ({"kind": "openai", "base_url": "http://h", "backend": "outlines"}, "backend"),
        ({"kind": "openai", "base_url": "http://h", "model": Path("/m")}, "model"),
        ({"kind": "openai", "base_url": "http://h", "cores": "0"}, "cores"),
        ({"kind": "transformers", "kv_cache_gib": 2}, "kv_cache_gib"),
        ({"kind": "vllm", "base_url": "http://h"}, "base_url"),
        ({"kind": "vllm", "served_model": "m"}, "served_model"),
        ({"kind": "transformers", "tokenizer": Path("/t")}, "tokenizer"),
        ({"kind": "openai"}, "base_url"),
        ({"kind": "openai", "base_url": "127.0.0.1:8000"}, "base_url"),
        ({"kind": "openai", "base_url": "http://h", "enforce_eager": False}, "enforce_eager"),
        ({"kind": "vllm", "max_concurrency": 0}, "max_concurrency"),
        ({"kind": "vllm", "retries": 11}, "retries"),
        ({"kind": "tgi"}, "engine"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"tensor_parallel_size": -2}, "tensor_parallel_size"),
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": -0.5}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.01}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": float("nan")}, "gpu_memory_utilization"),
        ({"kind": "transformers", "tensor_parallel_size": 2}, "tensor_parallel_size"),
        ({"kind": "transformers", "gpu_memory_utilization": 0.9}, "gpu_memory_utilization"),
        ({"kind": "openai", "base_url": "http://h", "tensor_parallel_size": 1}, "tensor_parallel_size"),
        ({"kind": "openai", "base_url": "http://h", "gpu_memory_utilization": 0.9}, "gpu_memory_utilization"),
        ({"backend": "lmformatenforcer"}, "backend"),
    ],
)
def test_a_setting_the_engine_does_not_take_names_itself(settings, parameter):
    with pytest.raises(ConfigError) as caught:
        EngineConfig(**settings)
    assert caught.value.parameter == parameter


@pytest.mark.parametrize(
    "base_url",
    [
        "http://",
        "https://",
        "http://:8000",
        "http://gpu box:8000",
        "http://gpu-box:80OO",
        "http://h:99999",
        "http://[::1",
    ],
)
def test_an_address_without_a_host_or_a_port_is_a_config_error_naming_base_url(base_url: str):
    with pytest.raises(ConfigError) as caught:
        EngineConfig(kind="openai", base_url=base_url)
    assert caught.value.parameter == "base_url"


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:8001", "http://[::1]:8000/v1", "https://gpu-box", "https://h:8000/"]
)
def test_an_address_with_a_host_is_taken(base_url: str):
    assert EngineConfig(kind="openai", base_url=base_url).base_url == base_url


@pytest.mark.parametrize("seconds", [float("inf"), 1e10, 86_401.0])
def test_a_request_timeout_past_a_day_is_a_config_error_naming_it(seconds: float):
    with pytest.raises(ConfigError) as caught:
        EngineConfig(kind="openai", base_url="https://h", request_timeout=seconds)
    assert caught.value.parameter == "request_timeout"


def test_the_vllm_backend_defaults_to_the_measured_default():
    assert EngineConfig().backend_name == DEFAULT_BACKEND


def test_the_transformers_engine_records_outlines_as_its_backend():
    assert EngineConfig(kind="transformers").backend_name == "outlines-transformers"


def test_an_openai_engine_records_the_server_address_without_connecting():
    settings = engine_settings(EngineConfig(kind="openai", base_url="http://127.0.0.1:9", served_model="m"))
    assert settings["weights"] == "http://127.0.0.1:9"


def test_the_error_names_the_parameter_and_its_value():
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=0: must be at least 1"):
        EngineConfig(tensor_parallel_size=0)
    with pytest.raises(ConfigError, match=r"gpu_memory_utilization=1.5: must be more than 0 and at most 1"):
        EngineConfig(gpu_memory_utilization=1.5)


@pytest.mark.parametrize(
    "settings",
    [
        {"tensor_parallel_size": 1},
        {"tensor_parallel_size": 8},
        {"gpu_memory_utilization": 1.0},
        {"gpu_memory_utilization": 0.05},
    ],
)
def test_gpu_settings_in_range_are_taken(settings):
    config = EngineConfig(**settings)
    for name, value in settings.items():
        assert getattr(config, name) == value


def _model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def float32_cpu(monkeypatch):
    """A CPU without native bfloat16 (float32 by default), whatever this machine is."""
    monkeypatch.setattr(machine, "gpu_build", lambda: False)
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2", "fma"})


@pytest.fixture
def bfloat16_cpu(monkeypatch):
    """A CPU with native bfloat16 (bfloat16 by default)."""
    monkeypatch.setattr(machine, "gpu_build", lambda: False)
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512f", "avx512_bf16", "amx_bf16"})


def test_settings_leave_the_gpu_settings_out_when_they_are_not_set(tmp_path, float32_cpu):
    """The settings file of an existing CPU run still matches: no new keys."""
    model = _model_folder(tmp_path)
    settings = engine_settings(EngineConfig(model=model))
    assert set(settings) == {"model", "weights", "engine", "backend", "max_model_len"}


def test_settings_record_bfloat16_chosen_by_default(tmp_path, bfloat16_cpu):
    """A resume on a machine that would compute in float32 is refused: bfloat16 sums give other probabilities."""
    model = _model_folder(tmp_path)
    assert engine_settings(EngineConfig(model=model))["dtype"] == "bfloat16"


def test_settings_record_bfloat16_asked_for_on_a_float32_cpu(tmp_path, float32_cpu):
    model = _model_folder(tmp_path)
    assert engine_settings(EngineConfig(model=model, dtype="bfloat16"))["dtype"] == "bfloat16"


def test_float32_asked_for_on_a_bfloat16_cpu_records_as_the_float32_default_does(tmp_path, bfloat16_cpu, monkeypatch):
    """Outputs written when float32 was every CPU's default record no dtype: asking for float32 resumes them."""
    model = _model_folder(tmp_path)
    asked = engine_settings(EngineConfig(model=model, dtype="float32"))
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2", "fma"})
    assert asked == engine_settings(EngineConfig(model=model))


def test_settings_record_tensor_parallelism_which_can_change_a_verdict(tmp_path):
    model = _model_folder(tmp_path)
    plain = engine_settings(EngineConfig(model=model))
    settings = engine_settings(EngineConfig(model=model, tensor_parallel_size=2))
    assert settings == {**plain, "tensor_parallel_size": "2"}


def test_settings_leave_out_memory_utilisation_which_cannot(tmp_path):
    model = _model_folder(tmp_path)
    plain = engine_settings(EngineConfig(model=model))
    assert engine_settings(EngineConfig(model=model, gpu_memory_utilization=0.85)) == plain


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"tensor_parallel_size": 2}, "tensor_parallel_size"),
        ({"gpu_memory_utilization": 0.9}, "gpu_memory_utilization"),
    ],
)
def test_the_cpu_build_refuses_gpu_settings_and_says_what_to_install(settings, parameter):
    with pytest.raises(ConfigError) as caught:
        check_build(EngineConfig(**settings), gpu=False)
    assert caught.value.parameter == parameter
    assert "suffice[gpu]" in str(caught.value)


@pytest.mark.parametrize(("settings", "parameter"), [({"kv_cache_gib": 2}, "kv_cache_gib"), ({"cores": "0"}, "cores")])
def test_the_gpu_build_refuses_cpu_settings(settings, parameter):
    with pytest.raises(ConfigError) as caught:
        check_build(EngineConfig(**settings), gpu=True)
    assert caught.value.parameter == parameter
    assert "GPU" in str(caught.value)


def test_each_build_takes_its_own_settings():
    check_build(EngineConfig(kv_cache_gib=2, cores="0", tensor_parallel_size=1), gpu=False)
    check_build(EngineConfig(tensor_parallel_size=2, gpu_memory_utilization=0.9), gpu=True)
    check_build(EngineConfig(), gpu=False)
    check_build(EngineConfig(), gpu=True)


def test_a_cpu_build_refuses_tensor_parallel_at_engine_start(monkeypatch):
    monkeypatch.setattr(machine, "gpu_build", lambda: False)
    with pytest.raises(ConfigError) as caught:
        VLLMEngine(EngineConfig(tensor_parallel_size=2))
    assert caught.value.parameter == "tensor_parallel_size"
    assert 'pip install "suffice[gpu]"' in str(caught.value)


def test_a_gpu_build_refuses_a_kv_cache_size_at_engine_start(monkeypatch):
    monkeypatch.setattr(machine, "gpu_build", lambda: True)
    with pytest.raises(ConfigError) as caught:
        VLLMEngine(EngineConfig(kv_cache_gib=2))
    assert caught.value.parameter == "kv_cache_gib"


_ENGINE_ENV = (
    *OFFLINE_ENV,
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_LOGGING_LEVEL",
    "VLLM_REGEX_COMPILATION_TIMEOUT_S",
    "TRANSFORMERS_VERBOSITY",
    "TORCH_CPP_LOG_LEVEL",
)


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """A ``vllm`` module whose ``LLM`` records its arguments and fails, so the engine
    stops right after building them (nothing is started); the environment the engine
    sets is restored afterwards."""
    for name in _ENGINE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path / "cache"))
    seen: dict[str, object] = {}

    def llm(**kwargs: object) -> None:
        seen.update(kwargs)
        raise RuntimeError("not started in this test")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=llm))
    return seen


def test_a_gpu_build_gets_the_gpu_settings_and_no_cpu_environment(monkeypatch, tmp_path, fake_vllm):
    import os

    monkeypatch.setattr(machine, "gpu_build", lambda: True)
    config = EngineConfig(model=_model_folder(tmp_path), tensor_parallel_size=2, gpu_memory_utilization=0.8)
    with pytest.raises(EngineError, match="not started in this test"):
        VLLMEngine(config)
    assert fake_vllm["tensor_parallel_size"] == 2
    assert fake_vllm["gpu_memory_utilization"] == 0.8
    assert "block_size" not in fake_vllm
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ


def test_a_cpu_build_gets_no_gpu_settings_unless_set(monkeypatch, tmp_path, fake_vllm):
    import os

    monkeypatch.setattr(machine, "gpu_build", lambda: False)
    with pytest.raises(EngineError):
        VLLMEngine(EngineConfig(model=_model_folder(tmp_path)))
    assert "tensor_parallel_size" not in fake_vllm
    assert "gpu_memory_utilization" not in fake_vllm
    assert "VLLM_CPU_KVCACHE_SPACE" in os.environ
    assert "VLLM_CPU_OMP_THREADS_BIND" in os.environ


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    return parser.parse_args(list(argv))


def test_the_gpu_options_reach_the_engine_config():
    config = engine_config_from_args(_parse("--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.8"))
    assert (config.tensor_parallel_size, config.gpu_memory_utilization) == (2, 0.8)
    config = engine_config_from_args(_parse())
    assert (config.tensor_parallel_size, config.gpu_memory_utilization) == (None, None)


@pytest.mark.parametrize(
    ("argv", "parameter"),
    [
        (("--tensor-parallel-size", "0"), "tensor_parallel_size"),
        (("--gpu-memory-utilization", "0"), "gpu_memory_utilization"),
        (("--engine", "transformers", "--tensor-parallel-size", "2"), "tensor_parallel_size"),
    ],
)
def test_bad_gpu_options_name_the_parameter(argv, parameter):
    with pytest.raises(ConfigError) as caught:
        engine_config_from_args(_parse(*argv))
    assert caught.value.parameter == parameter


def test_the_dtype_option_reaches_the_engine_config():
    assert engine_config_from_args(_parse("--dtype", "bfloat16")).dtype == "bfloat16"


def test_no_dtype_option_leaves_the_default():
    assert engine_config_from_args(_parse()).dtype is None


def test_a_dtype_given_to_the_openai_engine_is_refused_naming_it():
    with pytest.raises(ConfigError) as info:
        EngineConfig(kind="openai", base_url="http://127.0.0.1:1", dtype="float32")
    assert info.value.parameter == "dtype"
