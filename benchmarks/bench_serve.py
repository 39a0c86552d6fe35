"""``suffice serve`` under N concurrent clients beside the in-process batch, same items, one run.

First the in-process batch: one engine, ``--items`` items in one ``judge_batch``
call after a warm-up (the gate's constraint compiled), then the engine is closed.
Then a ``suffice serve`` process on loopback with the same settings, warmed up the
same way; for each client count (``--clients``, default 1 8 32 64) items are sent as
one-item requests by that many client threads.

Every run gets items of its own (disjoint sets drawn from the same shuffled mix):
the prefix cache keeps what it has seen, and a level that re-sent items another
level had judged would skip their prefill.  (A first version re-sent the same items
to every level and made the service look 2x faster than the batch.)  One client
sends ``--single-items`` items only: its rate is bound by one request's latency.  Per level: wall time,
verdicts/s, p50/p99 request latency, error rows and invalid verdicts, and the ratio
to the in-process batch's verdicts/s (the issue's target: >= 0.8 at 64 clients).

    .venv/bin/python benchmarks/bench_serve.py --items 64
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from common import load_items, report

from suffice.config import BACKENDS, JudgeConfig
from suffice.judge import Judge
from suffice.serving.engine_config import EngineConfig

WARMUP = 4


def in_process(items: list[dict[str, Any]], backend: str | None) -> dict[str, Any]:
    judge = Judge.open(JudgeConfig(engine=EngineConfig(backend=backend)))
    try:
        judge.judge_batch(items[:WARMUP])
        timed = items[WARMUP:]
        began = time.perf_counter()
        results = judge.judge_batch(timed)
        seconds = time.perf_counter() - began
    finally:
        judge.close()
    return {
        "mode": "in-process batch",
        "clients": 0,
        "items": len(timed),
        "seconds": seconds,
        "verdicts_per_s": sum(r.verdict is not None for r in results) / seconds,
        "errors": sum(r.verdict is None for r in results),
        "p50_s": None,
        "p99_s": None,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def start_server(backend: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "suffice.cli.main", "serve", "--port", str(port), "--gate", "sufficiency"]
    if backend:
        command += ["--backend", backend]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"suffice serve exited: {process.stderr.read().decode()[-2000:] if process.stderr else ''}"
            )
        try:
            if httpx.get(url + "/ready", timeout=5).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(1)
    process.kill()
    raise SystemExit("suffice serve did not get ready in 300 s")


def level(url: str, items: list[dict[str, Any]], clients: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    with httpx.Client(timeout=3600, limits=limits) as client:

        def one(item: dict[str, Any]) -> None:
            nonlocal errors
            began = time.perf_counter()
            response = client.post(f"{url}/v1/judge/sufficiency", json=item)
            took = time.perf_counter() - began
            bad = response.status_code != 200 or response.json()["results"][0]["verdict"] is None
            with lock:
                latencies.append(took)
                errors += bad

        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            list(pool.map(one, items))
        seconds = time.perf_counter() - began
    ordered = sorted(latencies)
    return {
        "mode": "serve",
        "clients": clients,
        "items": len(items),
        "seconds": seconds,
        "verdicts_per_s": (len(items) - errors) / seconds,
        "errors": errors,
        "p50_s": statistics.median(ordered),
        "p99_s": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--single-items", type=int, default=8, help="items for the one-client level")
    parser.add_argument("--backend", default=None, choices=BACKENDS)
    args = parser.parse_args()
    sizes = [args.single_items if clients == 1 else args.items for clients in args.clients]
    pool = load_items(WARMUP + args.items + sum(sizes))
    warmup, pool = pool[:WARMUP], pool[WARMUP:]
    batch_items, pool = pool[: args.items], pool[args.items :]
    rows = [in_process(warmup + batch_items, args.backend)]
    process, url = start_server(args.backend)
    try:
        with httpx.Client(timeout=3600) as client:
            client.post(f"{url}/v1/judge/sufficiency", json=warmup)
        for clients, size in zip(args.clients, sizes, strict=True):
            items, pool = pool[:size], pool[size:]
            rows.append(level(url, items, clients))
            print(rows[-1], file=sys.stderr, flush=True)
    finally:
        process.terminate()
        process.wait(120)
    base = rows[0]["verdicts_per_s"]
    for row in rows:
        row["vs_batch"] = row["verdicts_per_s"] / base
    columns = [
        ("mode", "mode", ""),
        ("clients", "clients", "d"),
        ("items", "items", "d"),
        ("seconds", "seconds", ".1f"),
        ("verdicts_per_s", "verdicts/s", ".2f"),
        ("vs_batch", "vs batch", ".2f"),
        ("p50_s", "p50 s", ".1f"),
        ("p99_s", "p99 s", ".1f"),
        ("errors", "errors", "d"),
    ]
    report("serve.json", rows, columns, backend=args.backend or "default")


if __name__ == "__main__":
    main()
