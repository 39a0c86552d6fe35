"""A container's memory limit and CPU quota, read from its cgroup (v1 and v2).

The folders below are written like the kernel's; one test puts a real process in a
real cgroup where the machine lets it (root, a writable cgroup v1 hierarchy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice.serving.cgroups import cgroup_limits
from tests.setup_or_fail import need

GIB = 1024**3


def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text + "\n")


def proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    folder = tmp_path / "proc"
    write(folder, mountinfo=mountinfo, cgroup=cgroup)
    return folder


def v2(tmp_path: Path, root: str = "/", path: str = "/pod/app") -> tuple[Path, Path]:
    """A cgroup v2 mount at tmp/cg whose root is cgroup ``root``; the process in ``path``."""
    mount = tmp_path / "cg"
    mount.mkdir()
    info = f"41 31 0:38 {root} {mount} rw,relatime - cgroup2 cgroup2 rw\n"
    return proc(tmp_path, info, f"0::{path}\n"), mount


def test_v2_memory_limit_leaves_limit_minus_usage(tmp_path):
    folder, mount = v2(tmp_path)
    write(mount / "pod" / "app", memory__max=str(8 * GIB), memory__current=str(3 * GIB), memory__stat="anon 1")
    assert cgroup_limits(folder).memory_free == 5 * GIB


def test_v2_reclaimable_file_cache_counts_as_free(tmp_path):
    folder, mount = v2(tmp_path)
    stat = f"anon {2 * GIB}\ninactive_file {GIB}"
    write(mount / "pod" / "app", memory__max=str(8 * GIB), memory__current=str(3 * GIB), memory__stat=stat)
    assert cgroup_limits(folder).memory_free == 6 * GIB


def test_v2_the_tightest_limit_on_the_way_up_wins(tmp_path):
    folder, mount = v2(tmp_path)
    write(mount / "pod", memory__max=str(4 * GIB), memory__current=str(GIB))
    write(mount / "pod" / "app", memory__max="max", memory__current=str(GIB))
    assert cgroup_limits(folder).memory_limit == 4 * GIB


def test_v2_no_limit_is_none(tmp_path):
    folder, mount = v2(tmp_path)
    write(mount / "pod" / "app", memory__max="max", memory__current=str(GIB), cpu__max="max 100000")
    assert cgroup_limits(folder).memory_free is None


def test_v2_cpu_quota_is_quota_over_period(tmp_path):
    folder, mount = v2(tmp_path)
    write(mount / "pod" / "app", cpu__max="150000 100000")
    assert cgroup_limits(folder).cpus == 1.5


def test_v2_no_cpu_quota_is_none(tmp_path):
    folder, mount = v2(tmp_path)
    write(mount / "pod" / "app", cpu__max="max 100000")
    assert cgroup_limits(folder).cpus is None


def test_a_cgroup_namespace_puts_the_process_at_the_mounts_root(tmp_path):
    # Inside a container with its own cgroup namespace the process is in "/" and the
    # mount's root is the container's own cgroup.
    folder, mount = v2(tmp_path, root="/", path="/")
    write(mount, memory__max=str(2 * GIB), memory__current="0")
    assert cgroup_limits(folder).memory_free == 2 * GIB


def test_a_path_outside_the_mounts_root_reads_the_mount_itself(tmp_path):
    # Docker without a cgroup namespace: /proc/self/cgroup names the host's path, but
    # only the container's own cgroup is mounted.
    folder, mount = v2(tmp_path, root="/docker/abc", path="/docker/abc")
    write(mount, memory__max=str(2 * GIB), memory__current="0")
    assert cgroup_limits(folder).memory_limit == 2 * GIB


def test_v1_memory_and_cpu_come_from_their_own_hierarchies(tmp_path):
    memory, cpu = tmp_path / "memory", tmp_path / "cpu"
    info = (
        f"32 31 0:29 / {cpu} rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        f"35 31 0:32 / {memory} rw,relatime - cgroup cgroup rw,memory\n"
    )
    folder = proc(tmp_path, info, "4:memory:/job\n1:cpu,cpuacct:/job\n")
    stat = f"cache 5\ntotal_inactive_file {GIB}"
    write(memory / "job", memory__limit_in_bytes=str(6 * GIB), memory__usage_in_bytes=str(2 * GIB), memory__stat=stat)
    write(memory, memory__limit_in_bytes="9223372036854771712", memory__usage_in_bytes=str(50 * GIB))
    write(cpu / "job", cpu__cfs_quota_us="200000", cpu__cfs_period_us="100000")
    write(cpu, cpu__cfs_quota_us="-1", cpu__cfs_period_us="100000")
    limits = cgroup_limits(folder)
    assert limits.memory_free == 5 * GIB
    assert limits.cpus == 2.0


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert cgroup_limits(tmp_path / "nothing").memory_free is None


def test_garbage_in_the_cgroup_files_means_no_limit(tmp_path):
    folder, mount = v2(tmp_path)
    write(mount / "pod" / "app", memory__max="lots", memory__current="some", cpu__max="x y")
    assert cgroup_limits(folder).cpus is None


# -- a real cgroup ---------------------------------------------------------------------------


def _v1_folder(controller: str) -> Path | None:
    """This process's cgroup folder in a writable v1 hierarchy, or None."""
    mount = Path("/sys/fs/cgroup") / controller
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            folder = mount / path.lstrip("/")
            return folder if folder.is_dir() and os.access(folder, os.W_OK) else None
    return None


@pytest.fixture
def limited() -> Iterator[tuple[Path, Path]]:
    """A real v1 memory cgroup (3 GiB) and cpu cgroup (one CPU), made for this test."""
    parents = [_v1_folder("memory"), _v1_folder("cpu")]
    need(None not in parents, "no writable cgroup v1 memory and cpu hierarchies here")
    made = [parent / f"suffice-test-{uuid.uuid4().hex[:8]}" for parent in parents if parent is not None]
    try:
        for folder in made:
            folder.mkdir()
        (made[0] / "memory.limit_in_bytes").write_text(str(3 * GIB))
        (made[1] / "cpu.cfs_quota_us").write_text("100000")
    except OSError as exc:
        for folder in made:
            if folder.exists():
                folder.rmdir()
        need(False, f"cannot make a cgroup here: {exc}")
    yield made[0], made[1]
    for folder in made:
        folder.rmdir()


def test_a_process_in_a_real_limited_cgroup_sizes_its_engine_within_it(limited):
    memory, cpu = limited
    script = (
        "import json; from suffice.serving.engine_config import EngineConfig; "
        "from suffice.serving.machine import machine_config; s = machine_config(EngineConfig()); "
        "print(json.dumps({'cores': len(s.cores), 'available': s.available_gib}))"
    )
    shell = f'echo $$ > {memory}/cgroup.procs && echo $$ > {cpu}/cgroup.procs && exec "$0" -c "$1"'
    run = subprocess.run(["sh", "-c", shell, sys.executable, script], capture_output=True, text=True, check=True)
    settings = json.loads(run.stdout)
    assert settings["available"] <= 3.0
    assert settings["cores"] == 1
