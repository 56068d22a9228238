"""Lesson 00, setup: which backend the first all-reduce uses on this machine, and what its launch cost."""

from __future__ import annotations

from ..tables import Table


def backend_reason(gpu_count: int, world_size: int, backend: str) -> str:
    """Why ``backend`` was chosen for ``world_size`` ranks on a machine with ``gpu_count`` GPUs
    (``course_lib.dist.choose_backend``: NCCL needs one GPU per rank)."""
    if backend == "nccl":
        return f"{gpu_count} GPU(s) for {world_size} ranks: one GPU per rank"
    if gpu_count:
        return "no GPU per rank available, so the ranks run on the CPU"
    return "no GPU visible, so the ranks run on the CPU"


def _how(start_method: str, world_size: int, first: bool) -> str:
    """How a launch's workers started (``course_lib.dist.launcher.worker_start_method``)."""
    if start_method != "forkserver":
        return f"{world_size} fresh processes, each importing torch"
    if first:
        return f"started the fork server (imports torch once), forked {world_size} workers from it"
    return f"{world_size} workers forked from the running fork server"


def launch_table(launch_s: float, world_size: int, start_method: str, first: bool = True,
                 again_s: float | None = None) -> Table:
    """The timed launches of lesson 00: the first (``first``: the kernel's first launch, which starts the fork
    server) and, with ``again_s``, a second right after it, which is what every later launch costs. With the fork
    server torch is imported once, by the server, and each worker still imports the worker function's module;
    spawned workers each import torch at every launch."""
    t = Table(["launch", "how the workers started", "seconds"], title="Launching the ranks on this machine")
    t.add(launch="this one", **{"how the workers started": _how(start_method, world_size, first),
                                "seconds": round(launch_s, 2)})
    if again_s is not None:
        t.add(launch="the next", **{"how the workers started": _how(start_method, world_size, False),
                                    "seconds": round(again_s, 2)})
    return t
