"""No network, proven (issue 29): every ``connect`` of every process a command starts, watched with strace.

``suffice judge`` (in process: the rerun of tests/cli/test_faults.py; on a local Ray instance: the Ray run of
tests/batch/test_cluster_engine.py; through a loopback vLLM server), ``suffice calibrate`` and
``suffice serve`` (through that server) try no address but loopback (127.0.0.0/8, ::1) and Unix sockets.  The
in-process and Ray runs also run in a network namespace with only loopback (``unshare -rn``) where this machine
allows one, so an address off the machine could not be reached even if one were tried; the server's runs cannot
(the server is in this one).

Measured before the fix (2026-12-03): a ``--ray local`` run tried 169.254.169.254:80 (twice; Ray's dashboard
asking cloud metadata), DNS at 8.8.8.8:53 and at the resolver (Ray finding its node's address; metadata
.google.internal), and its node's own address off loopback; the in-process vLLM engine connected a UDP socket to
8.8.8.8:80 (vLLM's ``get_ip``).  One engine start per command; about four minutes on two cores.

Needs ``strace`` and, for the namespace, ``unshare`` and ``ip``: without them a test skips (strace) or runs
without the namespace (strace alone); in CI either fails (:mod:`tests.setup_or_fail`), and .ci/run installs them.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import psutil
import pytest

from suffice.exceptions import EXIT_OK
from suffice.serving.offline import OFFLINE_ENV
from tests.conftest import load_records
from tests.setup_or_fail import need
from tests.vllm_server import free_port, through

STRACE = shutil.which("strace")
#: Seconds one command may take (an engine start is about a minute on two cores).
COMMAND_TIMEOUT = 420
#: Families that never leave the machine: Unix sockets, the kernel's netlink, and AF_UNSPEC (which disconnects a
#: datagram socket).
LOCAL_FAMILIES = frozenset({"AF_UNIX", "AF_LOCAL", "AF_NETLINK", "AF_UNSPEC"})
#: What the suffice under test must set itself, so none comes from this test's environment.
SET_BY_SUFFICE = (
    *OFFLINE_ENV,
    "VLLM_HOST_IP",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
    "grpc_proxy",
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
)

_CONNECT = re.compile(r"\bconnect\((\d+), (.*)")
_FAMILY = re.compile(r"\{sa_family=(\w+)")
_ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6?, "([^"]+)"')


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def off_machine(trace: str) -> list[str]:
    """The ``connect`` calls in an strace log whose address is neither loopback nor a local family (one strace
    could not decode counts as off the machine)."""
    found = []
    for line in trace.splitlines():
        call = _CONNECT.search(line)
        if call is None:
            continue
        family = _FAMILY.match(call.group(2))
        if family is not None and family.group(1) in LOCAL_FAMILIES:
            continue
        address = _ADDRESS.search(call.group(2))
        if family is None or address is None or not is_loopback(address.group(1) or address.group(2)):
            found.append(line.strip())
    return found


def test_a_connect_off_the_machine_is_found():
    trace = "\n".join(
        [
            '12 connect(3, {sa_family=AF_UNIX, sun_path="/tmp/ray/s"}, 110) = 0',
            '12 connect(4, {sa_family=AF_INET, sin_port=htons(41), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
            "12 connect(5, {sa_family=AF_INET6, sin6_port=htons(41), sin6_flowinfo=htonl(0), "
            'inet_pton(AF_INET6, "::ffff:127.0.0.1", &sin6_addr), sin6_scope_id=0}, 28) = 0',
            '13 connect(6, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("8.8.8.8")}, 16 <unfinished ...>',
            "13 <... connect resumed>) = 0",
            '14 connect(7, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16) = -1',
            "15 connect(8, {sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), "
            'inet_pton(AF_INET6, "2001:4860:4860::8888", &sin6_addr), sin6_scope_id=0}, 28) = -1',
            "16 connect(9, 0x7ffd3c, 16) = -1 EFAULT",
            '17 connect(9, {sa_family=AF_INET6, sin6_port=htons(1), inet_pton(AF_INET6, "::1", &sin6_addr)}, 28) = 0',
        ]
    )
    assert [line.split()[0] for line in off_machine(trace)] == ["13", "14", "15", "16"]


# -- the commands, watched ----------------------------------------------------------------------------------------


@functools.cache
def strace_works() -> str | None:
    """Why strace cannot watch a command here, or ``None``."""
    if STRACE is None:
        return "strace is not installed (apt-get install strace; .ci/run installs it): it watches every connect"
    try:
        proc = subprocess.run([STRACE, "-f", "-qq", "-e", "trace=connect", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"strace does not run here: {exc}"
    return None if proc.returncode == 0 else f"strace cannot trace here (ptrace refused?): {proc.stderr[-300:]!r}"


@functools.cache
def jail_prefix() -> tuple[str, ...]:
    """A network namespace with only loopback (up), where this machine allows one; else nothing (strace alone)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return ()
    prefix = ("unshare", "--user", "--map-root-user", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "jail")
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else ()


@pytest.fixture
def strace() -> str:
    reason = strace_works()
    need(reason is None and STRACE is not None, reason or "no strace")
    assert STRACE is not None
    return STRACE


def suffice_env() -> dict[str, str]:
    """This test's environment less what suffice must set itself (and any proxy)."""
    return {name: value for name, value in os.environ.items() if name not in SET_BY_SUFFICE}


def command_line(strace: str, trace: Path, args: Sequence[str], *, jail: bool) -> list[str]:
    watch = [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-e", "signal=none", "-o", str(trace)]
    return [*(jailed() if jail else ()), *watch, sys.executable, "-m", "suffice.cli.main", *args]


def jailed() -> tuple[str, ...]:
    """The network namespace's prefix; where none can be made, strace alone watches (in CI that is a failure)."""
    prefix = jail_prefix()
    need(
        prefix,
        "no network namespace with only loopback here (unshare from util-linux, ip from iproute2)",
        or_weaker=True,
    )
    return prefix


def _suffice(strace: str, trace: Path, *args: str, jail: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command_line(strace, trace, args, jail=jail),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        env=suffice_env(),
    )


def _records(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in load_records("squad2.jsonl", count)))
    return path


def assert_on_the_machine(proc: subprocess.CompletedProcess[str] | None, trace: Path) -> None:
    if proc is not None:
        assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    text = trace.read_text(errors="replace")
    assert "connect(" in text, "strace saw no connect at all: is it watching?"
    assert off_machine(text) == []


def test_a_connect_off_the_machine_is_seen(strace: str, tmp_path: Path):
    """The watch itself: a process that tries 8.8.8.8 is caught (in the namespace too, where it fails)."""
    trace = tmp_path / "trace"
    probe = (
        "import socket\n"
        "try:\n"
        "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(('8.8.8.8', 80))\n"
        "except OSError:\n"
        "    pass"
    )
    command = command_line(strace, trace, [], jail=True)
    subprocess.run([*command[: command.index(sys.executable) + 1], "-c", probe], check=True, timeout=60)
    assert any("8.8.8.8" in line for line in off_machine(trace.read_text()))


# The in-process proof watches tests/cli/test_faults.py's rerun (an engine start is
# about a minute of CI): test_faults.py::test_judge_in_process_tries_no_address_off_the_machine.


# The Ray proof watches tests/batch/test_cluster_engine.py's Ray run (an engine start is about a minute of CI):
# test_cluster_engine.py::test_judge_on_a_local_ray_instance_tries_no_address_off_the_machine.


@pytest.mark.engine
def test_judge_through_a_loopback_server_tries_no_address_off_the_machine(
    strace: str, tmp_path: Path, vllm_server: str
):
    trace = tmp_path / "trace"
    out = tmp_path / "out.jsonl"
    proc = _suffice(
        strace, trace, "judge", str(_records(tmp_path)), "-o", str(out), *through(vllm_server), "--no-progress"
    )
    assert_on_the_machine(proc, trace)
    assert len(out.read_text().splitlines()) == 3


@pytest.mark.engine
def test_calibrate_tries_no_address_off_the_machine(strace: str, tmp_path: Path, vllm_server: str):
    records = load_records("squad2.jsonl", 8)
    golden = tmp_path / "golden.jsonl"
    chosen = [r for r in records if r["sufficient"]][:2] + [r for r in records if not r["sufficient"]][:2]
    golden.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    trace = tmp_path / "trace"
    proc = _suffice(
        strace, trace, "calibrate", str(golden), "-o", str(tmp_path / "calib"), *through(vllm_server), "--no-progress"
    )
    assert_on_the_machine(proc, trace)
    assert (tmp_path / "calib" / "report.json").exists()


@pytest.mark.engine
def test_serve_tries_no_address_off_the_machine(strace: str, tmp_path: Path, vllm_server: str):
    key = tmp_path / "clients.key"
    key.write_text("a-key-for-this-test-only-0123456789\n")
    key.chmod(0o600)  # serve refuses a key file others may read
    port = free_port()
    trace, log = tmp_path / "trace", tmp_path / "serve.log"
    args = ["serve", "--port", str(port), "--api-key-file", str(key), *through(vllm_server)]
    with log.open("wb") as sink:
        watcher = subprocess.Popen(
            command_line(strace, trace, args, jail=False), stdout=sink, stderr=subprocess.STDOUT, env=suffice_env()
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while True:
            assert watcher.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "suffice serve was not ready in time"
            try:
                if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        headers = {"Authorization": "Bearer a-key-for-this-test-only-0123456789"}
        response = httpx.post(
            f"{url}/v1/judge/sufficiency", json=load_records("squad2.jsonl", 2), headers=headers, timeout=300
        )
        assert response.status_code == 200, response.text[:500]
        assert [row["error"] for row in response.json()["results"]] == [None, None]
    finally:
        # strace passes no signal on: the server itself (its child) is stopped, and strace ends with it.
        for child in psutil.Process(watcher.pid).children():
            child.send_signal(signal.SIGTERM)
        try:
            watcher.wait(120)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
    assert_on_the_machine(None, trace)
