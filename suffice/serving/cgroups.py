"""The memory and CPU a container (a cgroup, v1 or v2) allows this process: in a container ``/proc/meminfo`` and
the affinity mask describe the host.

The tightest limit on the way up from the process's cgroup counts, found via ``/proc/self/mountinfo`` and
``/proc/self/cgroup`` (with or without a cgroup namespace); anything unreadable means "no limit known".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

#: Above this a v1 ``memory.limit_in_bytes`` means "no limit" (the kernel writes a page below 2**63).
_NO_LIMIT = 1 << 62


@dataclass(frozen=True)
class CgroupLimits:
    #: Bytes the tightest memory limit leaves: limit minus usage, inactive file cache counted as free.
    memory_free: int | None = None
    #: That limit, in bytes.
    memory_limit: int | None = None
    #: CPUs the tightest quota allows (quota over period; 1.5 is one and a half).
    cpus: float | None = None


@dataclass(frozen=True)
class _Mount:
    version: int
    root: str
    point: Path
    controllers: frozenset[str]


def _unescape(field: str) -> str:
    """mountinfo writes a space as ``\\040`` (and tab, newline, backslash likewise)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _mounts(mountinfo: str) -> list[_Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 5 or len(fields) < dash + 4:
            continue
        fstype, options = fields[dash + 1], fields[dash + 3]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        version = 2 if fstype == "cgroup2" else 1
        controllers = frozenset(options.split(",")) if version == 1 else frozenset()
        mounts.append(_Mount(version, _unescape(fields[3]), Path(_unescape(fields[4])), controllers))
    return mounts


def _memberships(cgroup: str) -> tuple[dict[str, str], str | None]:
    """(v1 controller -> cgroup path, the v2 cgroup path) from ``/proc/self/cgroup``."""
    v1: dict[str, str] = {}
    v2 = None
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        for controller in controllers.split(","):
            if controller:
                v1[controller] = path
    return v1, v2


def _levels(mount: _Mount, path: str) -> list[Path]:
    """The process's cgroup folder and each one above it up to the mount point."""
    if path == mount.root or path.startswith(mount.root.rstrip("/") + "/"):
        relative = path[len(mount.root) :].strip("/")
        folder = mount.point / relative if relative else mount.point
    else:
        folder = mount.point
    if not folder.is_dir():  # the hierarchy's root is this container's cgroup
        folder = mount.point
    levels = [folder]
    while levels[-1] != mount.point and mount.point in levels[-1].parents:
        levels.append(levels[-1].parent)
    return levels


def _read(folder: Path, name: str) -> str | None:
    try:
        return (folder / name).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _stat(folder: Path, key: str) -> int:
    for line in (_read(folder, "memory.stat") or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _int(value) or 0
    return 0


def _memory(folder: Path, version: int) -> tuple[int, int] | None:
    """(free, limit) at one level, or ``None`` where it sets no limit."""
    if version == 2:
        limit = _int(_read(folder, "memory.max"))  # "max": no limit
        usage = _int(_read(folder, "memory.current"))
        cache = _stat(folder, "inactive_file")
    else:
        limit = _int(_read(folder, "memory.limit_in_bytes"))
        usage = _int(_read(folder, "memory.usage_in_bytes"))
        cache = _stat(folder, "total_inactive_file")
    if limit is None or limit >= _NO_LIMIT:
        return None
    used = max((usage or 0) - cache, 0)
    return max(limit - used, 0), limit


def _cpus(folder: Path, version: int) -> float | None:
    if version == 2:
        quota_text, _, period_text = (_read(folder, "cpu.max") or "").partition(" ")
        quota, period = _int(quota_text), _int(period_text)
    else:
        quota, period = _int(_read(folder, "cpu.cfs_quota_us")), _int(_read(folder, "cpu.cfs_period_us"))
    if quota is None or quota <= 0 or not period:
        return None
    return quota / period


def cgroup_limits(proc: Path = Path("/proc/self")) -> CgroupLimits:
    """The tightest memory limit and CPU quota over the process's cgroups (``proc``: for tests)."""
    try:
        mountinfo = (proc / "mountinfo").read_text()
        cgroup = (proc / "cgroup").read_text()
    except (OSError, UnicodeDecodeError):
        return CgroupLimits()
    v1, v2 = _memberships(cgroup)
    memory: tuple[int, int] | None = None
    cpus: float | None = None
    for mount in _mounts(mountinfo):
        if mount.version == 2:
            path = v2
            wanted = {"memory", "cpu"}
        else:
            wanted = {"memory", "cpu"} & mount.controllers
            path = next((v1[c] for c in wanted if c in v1), None)
        if path is None or not wanted:
            continue
        for folder in _levels(mount, path):
            if "memory" in wanted:
                level = _memory(folder, mount.version)
                if level is not None and (memory is None or level[0] < memory[0]):
                    memory = level
            if "cpu" in wanted:
                quota = _cpus(folder, mount.version)
                if quota is not None and (cpus is None or quota < cpus):
                    cpus = quota
    return CgroupLimits(
        memory_free=memory[0] if memory else None,
        memory_limit=memory[1] if memory else None,
        cpus=cpus if cpus is not None and math.isfinite(cpus) else None,
    )
