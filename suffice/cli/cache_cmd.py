"""The verdict cache on the command line: ``--verdict-cache`` / ``--no-verdict-cache`` for ``judge``, ``calibrate``
and ``serve``, and ``suffice cache stats | clear``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from suffice.cache import DEFAULT_MAX_BYTES, VerdictCache
from suffice.cli.errors import command
from suffice.config import CACHE_ENV, JudgeConfig
from suffice.exceptions import EXIT_OK, ConfigError
from suffice.records.text import terminal_text
from suffice.settings import add_flags, check, from_args, setting

_MIB = 1 << 20


@dataclass(frozen=True)
class CacheSettings:
    """The verdict cache's settings of ``judge``, ``calibrate`` and ``serve`` (``JudgeConfig``'s ``cache`` and
    ``cache_max_bytes`` as a command line says them)."""

    verdict_cache: str | None = setting(
        None,
        "the verdict cache file: a record judged before under the same model, settings and prompt is answered "
        f"from it (default: ${CACHE_ENV}, else verdicts.sqlite3 in suffice's cache folder; off: none)",
        metavar="PATH",
        in_process=True,
    )
    no_verdict_cache: bool = setting(False, "judge every record", in_process=True)
    verdict_cache_mib: int = setting(
        DEFAULT_MAX_BYTES // _MIB,
        f"the cache's bound; past it the least recently used verdicts go (default {DEFAULT_MAX_BYTES // _MIB})",
        minimum=1,
        unit=" MiB",
        metavar="MIB",
    )

    def __post_init__(self) -> None:
        check(self)
        if self.no_verdict_cache and self.verdict_cache is not None:
            raise ConfigError("no_verdict_cache", True, "--no-verdict-cache and --verdict-cache PATH contradict")

    def judge_settings(self) -> dict[str, Any]:
        """``JudgeConfig``'s ``cache`` and ``cache_max_bytes``."""
        cache = False if self.no_verdict_cache else self.verdict_cache
        return {"cache": cache, "cache_max_bytes": self.verdict_cache_mib * _MIB}


def add_cache_args(p: argparse.ArgumentParser) -> None:
    """The verdict cache's flags (:class:`CacheSettings`) of the commands that judge."""
    add_flags(p, CacheSettings)


def cache_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``JudgeConfig``'s ``cache`` and ``cache_max_bytes`` from the flags."""
    flags: CacheSettings = from_args(CacheSettings, args)
    return flags.judge_settings()


@dataclass(frozen=True)
class CacheCommandSettings:
    """``suffice cache``'s own argument (its file is :class:`CacheSettings`' ``--verdict-cache``)."""

    action: str | None = setting(
        None, "stats: entries, bytes, hits (JSON); clear: empty it", positional=True, choices=("stats", "clear")
    )


def add_parser(sub: Any) -> None:
    p = command(sub, "cache", run, CacheCommandSettings, help="the verdict cache: stats, clear")
    add_flags(p, CacheSettings, only=("verdict_cache",))


def run(args: argparse.Namespace) -> int:
    """Look into or empty the verdict cache."""
    path = JudgeConfig(cache=args.verdict_cache).cache_path()
    if path is None:
        raise ConfigError("cache", args.verdict_cache, "is off here; name the cache file with --verdict-cache PATH")
    if args.action == "stats" and not path.exists():
        print(json.dumps({"path": str(path), "entries": 0, "bytes": 0, "exists": False}))
        return EXIT_OK
    cache = VerdictCache(path)
    try:
        if args.action == "stats":
            print(json.dumps(cache.stats()))
        else:
            n = cache.clear()
            print(f"removed {n} verdicts from {terminal_text(path)}", file=sys.stderr)
    finally:
        cache.close()
    return EXIT_OK
