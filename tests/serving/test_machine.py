"""Engine settings read off the machine, and the engine's output kept off the terminal."""

import os
import subprocess
import sys
import tempfile

import pytest

from suffice.exceptions import ConfigError
from suffice.serving import machine
from suffice.serving.engine_config import EngineConfig
from suffice.serving.machine import core_ranges, engine_output, machine_config, parse_cores
from tests.setup_or_fail import need


def test_cores_round_trip():
    assert parse_cores("0-3,6") == (0, 1, 2, 3, 6)
    assert core_ranges([0, 1, 2, 3, 6]) == "0-3,6"
    assert core_ranges([1]) == "1"


@pytest.mark.parametrize("spec", ["a-b", "3-1", "-1", ""])
def test_bad_cores_name_the_parameter(spec):
    with pytest.raises(ConfigError) as info:
        parse_cores(spec)
    assert info.value.parameter == "cores"


def test_defaults_come_from_the_affinity_mask_and_available_memory(monkeypatch):
    monkeypatch.setattr(machine, "available_memory_gib", lambda: 20.0)
    settings = machine_config(EngineConfig())
    assert settings.cores == tuple(sorted(os.sched_getaffinity(0)))
    assert settings.kv_cache_gib == 4  # 20 % of 20 GiB
    assert "available" in settings.kv_from


def test_kv_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(machine, "available_memory_gib", lambda: 400.0)
    assert machine_config(EngineConfig()).kv_cache_gib == machine.KV_MAX_GIB
    monkeypatch.setattr(machine, "available_memory_gib", lambda: 2.0)
    assert machine_config(EngineConfig()).kv_cache_gib == machine.KV_MIN_GIB


def test_overrides_win():
    first = min(os.sched_getaffinity(0))
    settings = machine_config(EngineConfig(cores=str(first), kv_cache_gib=3))
    assert settings.cores == (first,)
    assert settings.kv_cache_gib == 3


def test_cores_outside_the_affinity_mask_are_refused():
    with pytest.raises(ConfigError) as info:
        machine_config(EngineConfig(cores="4096"))
    assert info.value.parameter == "cores"


def _sorted(flags: set[str]) -> str:
    """A set's id in a stable order: str() of a set follows the process's hash seed, and pytest-xdist's workers must
    collect the same ids."""
    return "+".join(sorted(flags)) or "none"


@pytest.mark.parametrize(
    "flags", [{"avx512f", "avx512_bf16"}, {"amx_bf16", "amx_tile"}, {"avx512_bf16", "amx_bf16"}], ids=_sorted
)
def test_a_cpu_with_native_bfloat16_computes_in_it_by_default(monkeypatch, flags):
    monkeypatch.setattr(machine, "cpu_flags", lambda: flags)
    assert machine.compute_dtype(gpu=False)[0] == "bfloat16"


@pytest.mark.parametrize("flags", [{"avx2", "fma"}, {"avx512f", "avx512bw"}, set()], ids=_sorted)
def test_a_cpu_without_native_bfloat16_computes_in_float32_by_default(monkeypatch, flags):
    # Emulated bfloat16 took twice float32's time.
    monkeypatch.setattr(machine, "cpu_flags", lambda: flags)
    assert machine.compute_dtype(gpu=False)[0] == "float32"


def test_a_gpu_with_bfloat16_computes_in_it_by_default(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(machine, "gpu_bf16", lambda: True)
    assert machine.compute_dtype(gpu=True)[0] == "bfloat16"


def test_a_gpu_without_bfloat16_keeps_the_weights_dtype(monkeypatch):
    monkeypatch.setattr(machine, "gpu_bf16", lambda: False)
    assert machine.compute_dtype(gpu=True)[0] == "auto"


def test_the_gpu_bfloat16_check_asks_torch(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert machine.gpu_bf16() is True
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert machine.gpu_bf16() is False


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("native", [False, True], ids=["no-bf16", "bf16"])
def test_an_explicit_float32_always_wins(monkeypatch, gpu, native):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512_bf16"} if native else {"avx2"})
    monkeypatch.setattr(machine, "gpu_bf16", lambda: native)
    assert machine.compute_dtype(gpu=gpu, requested="float32")[0] == "float32"


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_an_explicit_bfloat16_always_wins(monkeypatch, gpu):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(machine, "gpu_bf16", lambda: False)
    assert machine.compute_dtype(gpu=gpu, requested="bfloat16")[0] == "bfloat16"


def test_the_default_dtype_reaches_the_machine_settings(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512_bf16"})
    assert machine_config(EngineConfig()).dtype == "bfloat16"


def test_float32_asked_for_reaches_the_machine_settings_on_a_bfloat16_cpu(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    assert machine_config(EngineConfig(dtype="float32")).dtype == "float32"


def test_bfloat16_is_used_when_asked_for(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert machine_config(EngineConfig(dtype="bfloat16")).dtype == "bfloat16"


def test_bfloat16_asked_for_on_a_cpu_without_it_says_it_is_emulated(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2", "fma"})
    assert "emulated" in machine.compute_dtype(gpu=False, requested="bfloat16")[1]


def test_a_dtype_that_is_not_offered_is_a_config_error_naming_dtype():
    with pytest.raises(ConfigError) as info:
        EngineConfig(dtype="float16")
    assert info.value.parameter == "dtype"


def test_a_child_process_started_while_hidden_writes_to_the_log(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path))
    with engine_output(verbose=False) as log:
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('engine says hi'); sys.stderr.write('warn\\n')"]
        )
        child.wait()
    print("after")
    out, err = capfd.readouterr()
    assert log is not None
    assert "engine says hi" in log.read_text()
    assert "warn" in log.read_text()
    assert "engine says hi" not in out
    assert "warn" not in err
    assert "after" in out


def test_verbose_redirects_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path))
    with engine_output(verbose=True) as log:
        assert log is None


@pytest.mark.engine
def test_an_engine_that_cannot_start_quotes_its_log(tmp_path, monkeypatch):
    from suffice.exceptions import EngineError
    from suffice.serving.vllm.engine import VLLMEngine
    from suffice.serving.weights import ModelRef

    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(EngineError) as info:
        VLLMEngine(EngineConfig(), ModelRef(broken, "broken"))
    assert str(broken) in str(info.value)


def test_on_a_gpu_the_cpu_settings_are_neither_described_nor_applied(monkeypatch):
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_LOGGING_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("VLLM_REGEX_COMPILATION_TIMEOUT_S", "TRANSFORMERS_VERBOSITY", "TORCH_CPP_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(machine, "gpu_bf16", lambda: False)
    settings = machine_config(EngineConfig(), gpu=True)
    assert settings.block_size is None and settings.dtype == "auto"
    assert "GPU" in settings.describe() and "cores" not in settings.describe()
    machine.apply_machine_config(settings)
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ
    assert os.environ["VLLM_LOGGING_LEVEL"] == "ERROR"


@pytest.fixture
def read_only_folder(tmp_path):
    """A tmpfs mounted read-only (even root gets EROFS there), where this machine lets
    the test mount one; skipped elsewhere."""
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mount)], capture_output=True)
    need(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_read_only_cache_puts_the_engine_log_in_the_temporary_folder(read_only_folder, tmp_path, monkeypatch):
    """A container with a read-only root filesystem: the start raised OSError for a log."""
    monkeypatch.setenv("SUFFICE_CACHE", str(read_only_folder))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with engine_output(verbose=False) as log:
        pass
    assert log is not None
    assert log.parent == tmp_path / "tmp" / "suffice-logs"


def test_no_writable_folder_for_the_log_warns_and_hides_nothing(read_only_folder, monkeypatch):
    monkeypatch.setenv("SUFFICE_CACHE", str(read_only_folder))
    monkeypatch.setattr(tempfile, "tempdir", str(read_only_folder))
    with pytest.warns(UserWarning, match="engine's log cannot be written"), engine_output(verbose=False) as log:
        pass
    assert log is None
