import subprocess

import pytest

from suffice.exceptions import ModelNotFoundError
from suffice.serving.weights import embedded_model, local_model, resolve_model
from tests.setup_or_fail import need


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
    need(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    monkeypatch.setenv("SUFFICE_CACHE", str(mount))
    try:
        with pytest.raises(ModelNotFoundError, match="set SUFFICE_CACHE to a writable folder"):
            embedded_model()
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


GGUF_BAR = "Converting and de-quantizing GGUF tensors"


def _draw_gguf_bar() -> None:
    """What transformers' GGUF loader does with each tensor: iterate under its module's ``tqdm``."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    for _ in gguf_utils.tqdm(range(3), desc=GGUF_BAR + "..."):
        pass


def test_the_gguf_loader_draws_its_bar_through_the_name_suffice_switches_off():
    """The switch replaces the module's ``tqdm``: it works only while the loader looks that name up."""
    import inspect

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    assert "tqdm(reader.tensors" in inspect.getsource(gguf_utils.load_gguf_checkpoint)


def test_the_gguf_conversion_bar_is_hidden_unless_verbose(capsys):
    from suffice.serving.weights import _gguf_bar

    with _gguf_bar(False):
        _draw_gguf_bar()
    assert GGUF_BAR not in capsys.readouterr().err


def test_the_gguf_conversion_bar_is_shown_when_verbose(capsys):
    from suffice.serving.weights import _gguf_bar

    with _gguf_bar(True):
        _draw_gguf_bar()
    assert GGUF_BAR in capsys.readouterr().err


@pytest.mark.engine
def test_a_real_conversion_shows_no_bar_without_verbose(tmp_path, monkeypatch, capfd):
    """The embedded model converted for real into an empty cache (about 20 s), as a first run does."""
    monkeypatch.setenv("SUFFICE_CACHE", str(tmp_path))
    embedded_model()
    assert GGUF_BAR not in capfd.readouterr().err
