"""EngineConfig: each engine takes only its own settings, and errors name them."""

from __future__ import annotations

from pathlib import Path

import pytest

from suffice.exceptions import ConfigError
from suffice.serving.engine_config import DEFAULT_BACKEND, EngineConfig
from suffice.serving.factory import engine_settings


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
        ({"backend": "lmformatenforcer"}, "backend"),
    ],
)
def test_a_setting_the_engine_does_not_take_names_itself(settings, parameter):
    with pytest.raises(ConfigError) as caught:
        EngineConfig(**settings)
    assert caught.value.parameter == parameter


def test_the_vllm_backend_defaults_to_the_measured_default():
    assert EngineConfig().backend_name == DEFAULT_BACKEND


def test_the_transformers_engine_records_outlines_as_its_backend():
    assert EngineConfig(kind="transformers").backend_name == "outlines-transformers"


def test_an_openai_engine_records_the_server_address_without_connecting():
    settings = engine_settings(EngineConfig(kind="openai", base_url="http://127.0.0.1:9", served_model="m"))
    assert settings["weights"] == "http://127.0.0.1:9"
