"""How many Ray actors a run gets, with what, and whether the cluster can hold them.

An actor the cluster cannot place waits for ever, and the run with it, saying
nothing; and each actor sits on one node (two nodes of one GPU each cannot hold an
actor of ``--tensor-parallel-size 2``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from suffice.batch.options import RayOptions
from suffice.exceptions import ConfigError, EngineDeadError
from suffice.serving.machine import quota_cores


@dataclass(frozen=True)
class ActorPlan:
    """``count`` actors, each needing ``cpus`` CPUs and ``gpus`` GPUs."""

    count: int
    cpus: float
    gpus: float


def units(amount: float) -> int:
    """``amount`` of a resource in Ray's own units (it counts in 0.0001s): in floats,
    ``1.0 // 0.2`` is 4, while Ray places five actors of 0.2 GPU on one GPU."""
    return round(amount * 10_000)


def placeable(nodes: Sequence[dict[str, Any]], *, cpus: float, gpus: float) -> int:
    """How many actors needing ``cpus`` and ``gpus`` the live ``nodes`` (as ``ray.nodes()``
    lists them) can hold, each actor on one node."""
    total = 0
    for node in nodes:
        if not node.get("Alive", False):
            continue
        have = node.get("Resources", {})
        wanted = [(kind, units(each)) for kind, each in (("CPU", cpus), ("GPU", gpus))]
        counts = [units(float(have.get(kind, 0))) // each for kind, each in wanted if each > 0]
        total += min(counts) if counts else 1_000_000
    return total


def fits(ray: Any, *, cpus: float, gpus: float) -> int | None:
    """:func:`placeable` on the cluster's nodes, or ``None`` when they cannot be listed
    (a client connection without the state API)."""
    try:
        nodes = ray.nodes()
    except Exception:
        return None
    return placeable(nodes, cpus=cpus, gpus=gpus)


def plan_actors(ray: Any, options: RayOptions, tensor_parallel_size: int) -> ActorPlan:
    """The pool ``options`` ask for (default: one actor per ``tensor_parallel_size``
    GPUs, or one on CPUs); :class:`ConfigError` naming ``actors`` if it cannot be placed."""
    resources = ray.cluster_resources()
    gpus = float(resources.get("GPU", 0))
    each_gpus = options.gpus_per_actor
    if each_gpus is None:
        each_gpus = float(tensor_parallel_size) if gpus else 0.0
    count = options.actors or (max(1, units(gpus) // units(each_gpus)) if each_gpus else 1)
    cpus = options.cpus_per_actor if options.cpus_per_actor is not None else 1.0
    for kind, each, have in (("GPU", each_gpus, gpus), ("CPU", cpus, float(resources.get("CPU", 0)))):
        if count * each > have:
            raise ConfigError(
                "actors", count, f"needs {count * each:g} {kind}s ({each:g} per actor), the Ray cluster has {have:g}"
            )
    held = fits(ray, cpus=cpus, gpus=each_gpus)  # None: the sums above are all we know
    if held is not None and count > held:
        raise ConfigError(
            "actors",
            count,
            f"needs {each_gpus:g} GPU and {cpus:g} CPU per actor on one node; the Ray cluster's "
            f"nodes can hold {held} such actor{'s' if held != 1 else ''}",
        )
    return ActorPlan(count, cpus, each_gpus)


def check_capacity(ray: Any, plan: ActorPlan) -> None:
    """Stop the run if the cluster's live nodes can no longer hold the pool (a node
    lost for good).  What was written stays; a rerun resumes."""
    held = fits(ray, cpus=plan.cpus, gpus=plan.gpus)  # None: keep waiting
    if held is not None and held < plan.count:
        raise EngineDeadError(
            f"the Ray cluster lost capacity: {plan.count} actors need {plan.gpus:g} GPU and "
            f"{plan.cpus:g} CPU each on one node, its live nodes hold {held}; "
            "rerun the same command to resume once the nodes are back (or with fewer --actors)"
        )


def split_cores(count: int) -> list[str | None]:
    """This machine's cores (affinity mask within the CPU quota), one slice per local
    actor (two engines on the same cores run slower than one); ``None``: too few."""
    mask = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    mask = list(quota_cores(tuple(mask))[0])
    if count <= 1 or len(mask) < count:
        return [None] * count
    size = len(mask) // count
    return [",".join(str(c) for c in mask[i * size : (i + 1) * size]) for i in range(count)]
