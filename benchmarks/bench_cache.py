"""What the verdict cache saves: the same file judged twice, side by side in one run.

One engine; the items are judged once into an empty cache (every verdict generated and kept), then again (every
verdict read back), then a third time with the cache off (to show the engine's speed did not change between the
legs).  The rows of the second leg must be the first's, but for the ``cached`` mark: the benchmark fails if not.

    .venv/bin/python benchmarks/bench_cache.py --items 24
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import load_items, report, write_json

from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.rows.shaping import result_row
from suffice.serving.engine_config import EngineConfig
from suffice.serving.vllm.engine import VLLMEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--detail", choices=("full", "decision"), default="full")
    parser.add_argument("--serve", type=int, default=0, metavar="N", help="then N repeated requests to suffice serve")
    parser.add_argument(
        "--no-off-leg",
        action="store_true",
        help="skip the third leg (cache off): on 240 items it is another full run of the first's cost",
    )
    args = parser.parse_args()
    items = load_items(args.items + (1 if args.serve else 0))
    unseen = items.pop() if args.serve else None
    with tempfile.TemporaryDirectory() as folder:
        engine = VLLMEngine(EngineConfig())
        try:
            cached = JudgeConfig(detail=args.detail, cache=Path(folder) / "verdicts.sqlite3")
            legs = []
            outputs = {}
            runs = [("first (empty cache)", cached), ("second (same file)", cached)]
            if not args.no_off_leg:
                runs.append(("cache off", JudgeConfig(detail=args.detail, cache=False)))
            for leg, config in runs:
                judge = Judge(engine, config=config)
                start = time.perf_counter()
                results = judge.judge_batch(items)
                seconds = time.perf_counter() - start
                outputs[leg] = [result_row(r, judge.gate, "suffice", i) for i, r in enumerate(results, 1)]
                legs.append(
                    {
                        "leg": leg,
                        "items": len(items),
                        "seconds": seconds,
                        "verdicts_per_s": len(items) / seconds,
                        "hits": sum(r.cached is not None for r in results),
                    }
                )
        finally:
            engine.close()
        # The legs' table first: the serve part starts a server, which can fail on its own.
        first, second = outputs["first (empty cache)"], outputs["second (same file)"]
        stripped = [{k: v for k, v in row.items() if k != "cached"} for row in second]
        if stripped != first:
            raise SystemExit("the cached rows differ from the rows first judged")
        base = legs[0]["seconds"]
        for leg in legs:
            leg["speed_up"] = base / leg["seconds"]
        report(
            "cache.json",
            legs,
            [
                ("leg", "leg", ""),
                ("items", "items", ""),
                ("seconds", "seconds", ".3f"),
                ("verdicts_per_s", "verdicts/s", ".2f"),
                ("hits", "hits", ""),
                ("speed_up", "x first leg", ".1f"),
            ],
            detail=args.detail,
            identical_rows=True,
        )
        if args.serve and unseen is not None:
            served = serve_repeats(Path(folder), items[0], unseen, args.serve, args.detail)
    if args.serve:
        print(
            f"suffice serve, one cached record asked {served['repeats']} times: p50 {served['p50_ms']:.1f} ms, "
            f"p95 {served['p95_ms']:.1f} ms ({served['hits']} hits); a record not seen: {served['miss_ms']:.0f} ms"
        )
        print(f"written to {write_json('cache-serve.json', served)}", file=sys.stderr)


def serve_repeats(
    folder: Path, seen: dict[str, Any], unseen: dict[str, Any], repeats: int, detail: str
) -> dict[str, Any]:
    """A ``suffice serve`` over the cache the legs filled: one record they judged, asked ``repeats`` times."""
    import httpx

    from suffice.client import Client

    key_file = folder / "key"
    key_file.write_text("bench-cache-key-0123456789abcdef\n")
    key_file.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "suffice.cli.main", "serve", "--port", str(port), "--api-key-file", str(key_file)]
    # The detail is the server's (a request cannot choose it: the typed answer in its OpenAPI document follows it).
    command += ["--cache", str(folder / "verdicts.sqlite3"), "--detail", detail]
    with (folder / "serve.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"suffice serve did not become ready:\n{(folder / 'serve.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        client = Client(url, api_key="bench-cache-key-0123456789abcdef", timeout=600)
        start = time.perf_counter()
        client.judge(unseen)
        miss = time.perf_counter() - start
        times, hits = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            result = client.judge(seen)
            times.append(time.perf_counter() - start)
            hits += getattr(result, "cached", None) is not None
    finally:
        process.terminate()
        process.wait(60)
    times.sort()
    return {
        "repeats": repeats,
        "hits": hits,
        "p50_ms": 1000 * statistics.median(times),
        "p95_ms": 1000 * times[min(len(times) - 1, int(0.95 * len(times)))],
        "miss_ms": 1000 * miss,
    }


if __name__ == "__main__":
    main()
