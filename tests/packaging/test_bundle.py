"""``suffice bundle`` and ``suffice models verify`` across an air gap: the client-only set bundled from local
wheels, installed into a fresh virtual environment and verified, all with the network cut (a network
namespace with only loopback, ``unshare -rn``); a file changed, removed, added or linked on the way is a non-zero
exit naming it, and so is a manifest rewritten to match, unless the check is given the manifest's digest printed
where the bundle was made, or the key it was signed with."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.wheelhouse import ROOT
from tests.setup_or_fail import need
from tests.test_no_network import jail_prefix as _jail

SUFFICE = [sys.executable, "-m", "suffice.cli.main"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_CONSTRAINT", "PIP_FIND_LINKS", "PIP_INDEX_URL")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _offline(*command: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``command`` in a network namespace with only loopback."""
    jail = _jail()
    need(jail, "no network namespace with only loopback here (unshare from util-linux, ip from iproute2)")
    return subprocess.run([*jail, *map(str, command)], capture_output=True, text=True, timeout=900, env=env or _env())


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local model folder as suffice reads one (config.json and weights; nothing is loaded here)."""
    folder = tmp_path_factory.mktemp("models") / "tiny-model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(os.urandom(1 << 16))
    (folder / "sub" / "tokenizer.json").write_text("{}")
    return folder


def _printed(folder: Path) -> str:
    """The manifest's SHA-256 that `suffice bundle` printed and wrote beside ``folder``."""
    return (folder.parent / f"{folder.name}.manifest.sha256").read_text().split()[0]


def _key(bundle: Path) -> Path:
    """The key the site holds, which signed ``bundle``."""
    return bundle.parent / "site.key"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, client_wheels: Path, model_folder: Path) -> Path:
    """The client-only set and a model, bundled offline from the local wheelhouse and signed with a key."""
    folder = tmp_path_factory.mktemp("bundle") / "air"
    key = _key(folder)
    key.write_text("a-key-only-the-two-sites-hold\n")
    key.chmod(0o600)
    done = _offline(
        *SUFFICE, "bundle", folder, "--no-index", "--find-links", client_wheels, "--source", ROOT,
        "--model", model_folder, "--sign-key", key,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "digests in manifest.json, signed (manifest.json.sig)" in done.stderr
    digest = hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    assert f"manifest.json sha256 {digest}" in done.stderr
    assert (folder.parent / "air.manifest.sha256").read_text() == f"{digest}  air/manifest.json\n"
    return folder


def test_the_manifest_lists_every_file_with_its_digest(bundle: Path):
    manifest = json.loads((bundle / "manifest.json").read_text())
    files = manifest["files"]
    assert manifest["requirement"] == "suffice"
    assert any(path.startswith("wheels/suffice-") for path in files)
    assert not any("vllm" in path or "torch" in path for path in files)
    assert {"model/tiny-model/config.json", "model/tiny-model/model.safetensors"} <= set(files)
    on_disk = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())
    assert sorted(files) == [p for p in on_disk if p not in ("manifest.json", "manifest.json.sig")]
    assert all(len(entry["sha256"]) == 64 for entry in files.values())


def test_the_far_side_verifies_then_installs_with_the_network_cut(bundle: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    script = (
        f"python3 -I {bundle}/verify.py {bundle} --expect-manifest-sha256 {_printed(bundle)} && "
        f"{sys.executable} -m venv {venv} && "
        f"{venv}/bin/pip install -q --no-index --find-links {bundle}/wheels suffice && "
        f"{venv}/bin/suffice models verify {bundle} --key {_key(bundle)} && "
        f"{venv}/bin/python -c 'import suffice, importlib.util as u; suffice.Client; "
        'assert u.find_spec("vllm") is None and u.find_spec("torch") is None\''
    )
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    done = _offline("sh", "-c", script, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("ok: every file") == 2


def _copy(bundle: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", str(bundle), str(target)], check=True)
    return target


def _verify(folder: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``suffice models verify``, given ``folder``'s own printed digest unless ``args`` say otherwise."""
    args = args or ("--expect-manifest-sha256", _printed(folder))
    command = [*SUFFICE, "models", "verify", str(folder), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=_env())


def test_an_intact_bundle_verifies(bundle: Path):
    for done in (_verify(bundle), _verify(bundle, "--key", _key(bundle))):
        assert (done.returncode, "ok: every file" in done.stderr) == (0, True), done.stderr


def test_a_changed_wheel_fails_verification_naming_it(bundle: Path, tmp_path: Path):
    copy = _copy(bundle, tmp_path / "b")
    wheel = next((copy / "wheels").glob("suffice-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    wheel.write_bytes(bytes(data))
    done = _verify(copy, "--expect-manifest-sha256", _printed(bundle))
    assert done.returncode == 4
    assert f"FAILED wheels/{wheel.name}: differs from the manifest (SHA-256)" in done.stderr


def test_a_changed_model_file_fails_verification_naming_it(bundle: Path, tmp_path: Path):
    copy = _copy(bundle, tmp_path / "b")
    (copy / "model" / "tiny-model" / "model.safetensors").write_bytes(b"evil")
    done = _verify(copy, "--expect-manifest-sha256", _printed(bundle))
    assert done.returncode == 4
    assert "FAILED model/tiny-model/model.safetensors: is 4 bytes, the manifest says 65536" in done.stderr


def test_a_missing_and_an_added_file_fail_verification(bundle: Path, tmp_path: Path):
    copy = _copy(bundle, tmp_path / "b")
    (copy / "model" / "tiny-model" / "sub" / "tokenizer.json").unlink()
    (copy / "wheels" / "extra-1.0-py3-none-any.whl").write_bytes(b"planted")
    done = _verify(copy, "--expect-manifest-sha256", _printed(bundle))
    assert done.returncode == 4
    assert "FAILED model/tiny-model/sub/tokenizer.json: is missing" in done.stderr
    assert "FAILED wheels/extra-1.0-py3-none-any.whl: is not in the manifest" in done.stderr


def test_a_folder_without_a_manifest_is_a_usage_error(tmp_path: Path):
    done = _verify(tmp_path, "--expect-manifest-sha256", "0" * 64)
    assert done.returncode == 2
    assert "manifest" in done.stderr


def test_a_bundle_is_not_written_into_a_folder_with_files(tmp_path: Path):
    (tmp_path / "keep.txt").write_text("mine")
    done = subprocess.run([*SUFFICE, "bundle", str(tmp_path)], capture_output=True, text=True, env=_env())
    assert done.returncode == 2
    assert "folder" in done.stderr and "new or empty" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_no_index_without_a_wheel_folder_is_a_usage_error(tmp_path: Path):
    done = subprocess.run(
        [*SUFFICE, "bundle", str(tmp_path / "b"), "--no-index"], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 2
    assert "find_links" in done.stderr


def test_an_extra_that_is_not_a_name_is_a_usage_error(tmp_path: Path):
    done = subprocess.run(
        [*SUFFICE, "bundle", str(tmp_path / "b"), "--extra", "cpu]; rm -rf"], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 2
    assert "extras" in done.stderr


def test_a_converted_models_marker_is_not_carried(model_folder: Path, tmp_path: Path):
    """The embedded model's folder holds the converter's ``.suffice-complete``: a fact of this machine's cache."""
    from suffice.bundle import _copy_model
    from suffice.serving.weights import ModelRef

    converted = tmp_path / "converted"
    _copy(model_folder, converted)
    (converted / ".suffice-complete").write_text("here\n")
    _copy_model(ModelRef(converted, "m"), tmp_path / "out")
    copied = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert copied == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (model_folder / "model.safetensors").read_bytes()


def _bare_verify(folder: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The bundle's own verify.py on an isolated interpreter (``-I``: no suffice, no PYTHONPATH, no site), given
    ``folder``'s own printed digest unless ``args`` say otherwise."""
    args = args or ("--expect-manifest-sha256", _printed(folder))
    command = ["python3", "-I", str(folder / "verify.py"), str(folder), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd="/")


def test_the_bundle_verifies_itself_before_suffice_is_installed(bundle: Path, tmp_path: Path):
    for args in (("--expect-manifest-sha256", _printed(bundle)), ("--key", _key(bundle))):
        intact = _bare_verify(bundle, *args)
        assert intact.returncode == 0, intact.stderr
        assert f"ok: every file of {bundle} matches manifest.json (sha256 {_printed(bundle)}" in intact.stderr
    copy = _copy(bundle, tmp_path / "b")
    (copy / "model" / "tiny-model" / "config.json").write_text('{"model_type": "evil"}')
    changed = _bare_verify(copy, "--key", _key(bundle))
    assert changed.returncode == 4
    assert "FAILED model/tiny-model/config.json" in changed.stderr
    (copy / "manifest.json").unlink()
    assert _bare_verify(copy, "--key", _key(bundle)).returncode == 2


def _swap_wheel_and_model(bundle: Path, target: Path) -> Path:
    """A copy of ``bundle`` with suffice's wheel and the model's weights replaced and manifest.json rewritten to
    match: what whoever can write the medium on the way can do."""
    copy = _copy(bundle, target)
    wheel = next((copy / "wheels").glob("suffice-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"planted")
    (copy / "model" / "tiny-model" / "model.safetensors").write_bytes(b"evil weights")
    manifest = json.loads((copy / "manifest.json").read_text())
    for path in (f"wheels/{wheel.name}", "model/tiny-model/model.safetensors"):
        data = (copy / path).read_bytes()
        manifest["files"][path] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return copy


def test_a_rewritten_manifest_is_refused_with_the_printed_digest(bundle: Path, tmp_path: Path):
    copy = _swap_wheel_and_model(bundle, tmp_path / "b")
    printed = ("--expect-manifest-sha256", _printed(bundle))
    for done in (_bare_verify(copy, *printed), _verify(copy, *printed)):
        assert done.returncode == 4, done.stderr
        assert "FAILED manifest.json: its SHA-256 is" in done.stderr and "not the manifest that left" in done.stderr
        assert "ok: " not in done.stderr


def test_a_rewritten_manifest_is_refused_with_the_key(bundle: Path, tmp_path: Path):
    copy = _swap_wheel_and_model(bundle, tmp_path / "b")
    for done in (_bare_verify(copy, "--key", _key(bundle)), _verify(copy, "--key", _key(bundle))):
        assert done.returncode == 4, done.stderr
        assert (
            "FAILED manifest.json.sig: is not manifest.json's signature under this key: a bad signature" in done.stderr
        )
    (copy / "manifest.json.sig").unlink()  # the signature dropped: an unsigned bundle is not a signed one
    done = _bare_verify(copy, "--key", _key(bundle))
    assert done.returncode == 4
    assert "FAILED manifest.json.sig: cannot be read" in done.stderr and "the bundle is not signed" in done.stderr


def test_a_verify_with_neither_digest_nor_key_is_refused_saying_how_to_give_one(bundle: Path):
    for done in (_bare_verify(bundle, "--"), _verify(bundle, "--")):
        assert done.returncode == 2, done.stderr
        assert "manifest.json is not authenticated: give --expect-manifest-sha256 HEX" in done.stderr
        assert "or --key FILE" in done.stderr and "ok: " not in done.stderr


def test_links_in_a_bundle_are_refused_naming_them(bundle: Path, tmp_path: Path):
    """A link to the original wheel (the same bytes, outside the bundle), to a folder outside it, and a new one."""
    copy = _copy(bundle, tmp_path / "b")
    wheel = next((copy / "wheels").glob("suffice-*.whl"))
    wheel.unlink()
    wheel.symlink_to(bundle / "wheels" / wheel.name)
    (copy / "model" / "tiny-model" / "sub").rename(tmp_path / "sub")
    (copy / "model" / "tiny-model" / "sub").symlink_to(tmp_path / "sub")
    (copy / "wheels" / "evil.pth").symlink_to("/etc/passwd")
    for done in (_bare_verify(copy, "--key", _key(bundle)), _verify(copy, "--key", _key(bundle))):
        assert done.returncode == 4, done.stderr
        assert f"FAILED wheels/{wheel.name}: is a link (to {bundle / 'wheels' / wheel.name})" in done.stderr
        assert f"FAILED model/tiny-model/sub: is a link (to {tmp_path / 'sub'})" in done.stderr
        assert "FAILED wheels/evil.pth: is a link (to /etc/passwd): a bundle holds none" in done.stderr
        assert "ok: " not in done.stderr


def test_an_unlisted_file_is_refused_naming_it(bundle: Path, tmp_path: Path):
    copy = _copy(bundle, tmp_path / "b")
    (copy / "sitecustomize.py").write_text("import os\n")
    done = _bare_verify(copy, "--expect-manifest-sha256", _printed(bundle))
    assert done.returncode == 4
    assert "FAILED sitecustomize.py: is not in the manifest" in done.stderr


def test_an_editable_install_bundles_the_wheel_built_from_its_tree(client_wheels: Path, tmp_path: Path):
    """This environment's suffice is editable (``make dev``): with no ``--source``, its project folder is found from
    the install and the wheel built there, none taken from the wheel folder (it holds suffice's wheel, left out)."""
    deps = tmp_path / "deps"
    deps.mkdir()
    for wheel in client_wheels.glob("*.whl"):
        if not wheel.name.startswith("suffice-"):
            shutil.copy(wheel, deps)
    done = _offline(*SUFFICE, "bundle", tmp_path / "air", "--no-index", "--find-links", deps)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "air" / "wheels").glob("suffice-0.1.0-*.whl"))) == 1
    assert _bare_verify(tmp_path / "air").returncode == 0


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory: pytest.TempPathFactory, client_wheels: Path) -> tuple[Path, Path]:
    """A fresh virtual environment with suffice installed from its wheel (not editable), and a wheelhouse of its
    dependencies alone: suffice's own wheel must come from the installation, as no index holds it."""
    root = tmp_path_factory.mktemp("wheel-install")
    deps = root / "deps"
    deps.mkdir()
    for wheel in client_wheels.glob("*.whl"):
        if not wheel.name.startswith("suffice-"):
            shutil.copy(wheel, deps)
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    made = subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    done = subprocess.run(
        [*pip, "--find-links", str(client_wheels), "suffice"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return root / "venv" / "bin", deps


def test_a_wheel_install_bundles_itself(wheel_install: tuple[Path, Path], tmp_path: Path):
    bin_, deps = wheel_install
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    out = tmp_path / "air"
    done = _offline(bin_ / "suffice", "bundle", out, "--no-index", "--find-links", deps, env=env)
    assert done.returncode == 0, done.stderr
    assert len(list((out / "wheels").glob("suffice-0.1.0-*.whl"))) == 1
    assert _bare_verify(out).returncode == 0
    far = tmp_path / "far"
    script = (
        f"{sys.executable} -m venv {far} && {far}/bin/pip install -q --no-index --find-links {out}/wheels suffice && "
        f"{far}/bin/python -c 'import suffice; suffice.Client' && "
        f"{far}/bin/suffice models verify {out} --expect-manifest-sha256 {_printed(out)}"
    )
    installed = _offline("sh", "-c", script, env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr


def test_building_from_source_without_the_build_tools_names_the_one_to_install(
    wheel_install: tuple[Path, Path], tmp_path: Path
):
    bin_, deps = wheel_install
    found = subprocess.run(
        [bin_ / "python", "-c", "import importlib.metadata as m; print(m.version('setuptools'))"],
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip().startswith("65."), "a fresh 3.11 venv's setuptools (65.5) is older than the project's"
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [bin_ / "suffice", "bundle", tmp_path / "b", "--source", ROOT, "--no-index", "--find-links", deps],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "source" in done.stderr and "setuptools>=68" in done.stderr and "found 65." in done.stderr
    assert "pip install 'setuptools>=68'" in done.stderr
