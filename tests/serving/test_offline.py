"""Offline where suffice loads, not on import (issue 50): the hub variables are set while an engine, a model or a
tokenizer is loaded, and the process's own are put back after, an application's ``HF_HUB_OFFLINE=0`` included.

That importing changes nothing is tests/test_import_side_effects.py; that the loads try no address off the machine
is proven under strace (tests/test_no_network.py, tests/cli/test_faults.py, tests/batch/test_cluster_engine.py); a
Ray instance's start is tests/serving/test_secrets_and_proxies.py.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from suffice.exceptions import ConfigError, EngineError
from suffice.serving import machine
from suffice.serving.engine_config import EngineConfig
from suffice.serving.offline import OFFLINE_ENV, environment, offline
from suffice.serving.openai.tokens import LocalTokenizer
from suffice.serving.transformers_engine import TransformersEngine
from suffice.serving.vllm.engine import VLLMEngine


def offline_now() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in OFFLINE_ENV}


@pytest.fixture
def application(monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """The environment of an application that fetches from its own hub mirror: ``HF_HUB_OFFLINE=0``, none of the
    other variables; what :func:`offline_now` should read again after every load."""
    for name in OFFLINE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    return offline_now()


class Stop(Exception):
    """Raised by a fake loader once it has seen the environment."""


def test_a_window_sets_the_variables_and_puts_the_applications_back(application):
    with offline():
        assert offline_now() == OFFLINE_ENV
        with offline():  # a model converted inside an engine's start
            assert offline_now() == OFFLINE_ENV
        assert offline_now() == OFFLINE_ENV
    assert offline_now() == application == {**dict.fromkeys(OFFLINE_ENV), "HF_HUB_OFFLINE": "0"}


def test_a_load_that_fails_puts_the_variables_back_too(application):
    with pytest.raises(Stop), offline():
        raise Stop
    assert offline_now() == application


def test_windows_in_several_threads_put_the_variables_back_when_the_last_closes(application):
    inside, release = threading.Barrier(2), threading.Event()

    def load() -> None:
        with offline():
            inside.wait(10)
            release.wait(10)

    other = threading.Thread(target=load)
    other.start()
    with offline():
        inside.wait(10)
    assert offline_now() == OFFLINE_ENV  # the other thread's load is still going on
    release.set()
    other.join(10)
    assert offline_now() == application


def test_an_environment_block_puts_back_what_was_there(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SUFFICE_TEST_KEPT", "mine")
    monkeypatch.delenv("SUFFICE_TEST_UNSET", raising=False)
    with environment({"SUFFICE_TEST_KEPT": "theirs", "SUFFICE_TEST_UNSET": "x"}):
        assert (os.environ["SUFFICE_TEST_KEPT"], os.environ["SUFFICE_TEST_UNSET"]) == ("theirs", "x")
    assert os.environ["SUFFICE_TEST_KEPT"] == "mine" and "SUFFICE_TEST_UNSET" not in os.environ


def _model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_the_vllm_engine_starts_offline_and_leaves_the_environment_as_it_was(application, monkeypatch, tmp_path):
    """vLLM's engine processes inherit the environment of the ``LLM``'s start: offline then, the application's after."""
    seen: dict[str, Any] = {}

    def llm(**kwargs: object) -> None:
        seen.update(offline_now())
        raise Stop("not started in this test")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=llm))
    monkeypatch.setattr(machine, "gpu_build", lambda: True)  # no CPU variables to set
    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(EngineError, match="not started in this test"):
        VLLMEngine(EngineConfig(model=_model_folder(tmp_path)))
    assert seen == OFFLINE_ENV
    assert offline_now() == application


def _fake_transformers(seen: dict[str, Any]) -> types.SimpleNamespace:
    def from_pretrained(*args: object, **kwargs: object) -> None:
        seen.update(offline_now(), local_files_only=kwargs.get("local_files_only"))
        raise Stop("not loaded in this test")

    loader = types.SimpleNamespace(from_pretrained=from_pretrained)
    return types.SimpleNamespace(AutoTokenizer=loader, AutoModelForCausalLM=loader)


def test_the_transformers_engine_loads_offline_and_local_only(application, monkeypatch, tmp_path):
    seen: dict[str, Any] = {}
    monkeypatch.setitem(sys.modules, "transformers", _fake_transformers(seen))
    monkeypatch.setitem(sys.modules, "outlines", types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())
    with pytest.raises(EngineError, match="not loaded in this test"):
        TransformersEngine(EngineConfig(kind="transformers", model=_model_folder(tmp_path)))
    assert seen == {**OFFLINE_ENV, "local_files_only": True}
    assert offline_now() == application


def test_a_local_tokenizer_loads_offline_and_local_only(application, monkeypatch, tmp_path):
    seen: dict[str, Any] = {}
    monkeypatch.setitem(sys.modules, "transformers", _fake_transformers(seen))
    with pytest.raises(ConfigError, match="not loaded in this test"):
        LocalTokenizer(tmp_path)
    assert seen == {**OFFLINE_ENV, "local_files_only": True}
    assert offline_now() == application
