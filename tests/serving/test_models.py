import subprocess

import pytest

from suffice.exceptions import ModelNotFoundError
from suffice.serving.models import embedded_model, local_model, resolve_model


def test_hub_ids_and_missing_paths_are_errors_naming_the_path(tmp_path):
    with pytest.raises(ModelNotFoundError) as info:
        local_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert info.value.path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "never downloads" in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match=r"config\.json"):
        local_model(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelNotFoundError, match="not a folder"):
        local_model(tmp_path / "file")


def test_embedded_model_is_converted_once_into_a_loadable_folder():
    ref = embedded_model()
    assert (ref.path / "config.json").is_file() and (ref.path / "model.safetensors").is_file()
    assert (ref.path / "tokenizer.json").is_file()
    assert "SmolLM2-135M-Instruct" in ref.model_id and "embedded" in ref.model_id
    before = (ref.path / "model.safetensors").stat().st_mtime
    again = resolve_model(None)
    assert again == ref and (ref.path / "model.safetensors").stat().st_mtime == before
    assert local_model(ref.path).path == ref.path


def test_importing_suffice_switches_hub_downloads_off():
    import subprocess
    import sys

    code = "import os, suffice; print(os.environ['HF_HUB_OFFLINE'], os.environ['TRANSFORMERS_OFFLINE'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert out.stdout.split() == ["1", "1"]


def test_embedded_model_is_cached_in_bfloat16():
    import json
    import struct

    ref = embedded_model()
    assert json.loads((ref.path / "config.json").read_text())["dtype"] == "bfloat16"
    with (ref.path / "model.safetensors").open("rb") as handle:
        header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
    dtypes = {meta["dtype"] for name, meta in header.items() if name != "__metadata__"}
    assert dtypes == {"BF16"}


def test_a_read_only_cache_is_a_model_error_saying_what_to_do(tmp_path, monkeypatch):
    """A container with a read-only root filesystem, caused for real on a tmpfs mounted
    read-only: the engine's start raised the OS's own OSError."""
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    monkeypatch.setenv("SUFFICE_CACHE", str(mount))
    try:
        with pytest.raises(ModelNotFoundError, match="set SUFFICE_CACHE to a writable folder"):
            embedded_model()
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
