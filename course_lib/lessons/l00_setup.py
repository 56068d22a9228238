"""Lesson 00, setup: which backend the first all-reduce uses on this machine, and why."""

from __future__ import annotations


def backend_reason(gpu_count: int, world_size: int, backend: str) -> str:
    """Why ``backend`` was chosen for ``world_size`` ranks on a machine with ``gpu_count`` GPUs
    (``course_lib.dist.choose_backend``: NCCL needs one GPU per rank)."""
    if backend == "nccl":
        return f"{gpu_count} GPU(s) for {world_size} ranks: one GPU per rank"
    if gpu_count:
        return "no GPU per rank available, so the ranks run on the CPU"
    return "no GPU visible, so the ranks run on the CPU"


def launch_reading(launch_s: float, world_size: int, start_method: str, first: bool = True,
                   again_s: float | None = None) -> str:
    """What the timed launch of lesson 00 paid for (``course_lib.dist.launcher.worker_start_method``): with the
    fork server, torch is imported once, by the server the first launch starts, and the workers are forked from
    it; spawned workers each import torch. ``again_s``: a second launch timed right after it, which is what every
    later launch costs (the fourth read: "a worker starts in a fraction of a second" was not timed)."""
    took = f"the launch took {launch_s:.1f} s on this machine"
    if start_method == "forkserver":
        if first:
            text = (f"{took} (the kernel's first launch: it started the fork server, which imports torch once, "
                    f"and forked {world_size} workers from it)")
        else:
            text = f"{took} ({world_size} workers forked from the running fork server, which had imported torch)"
        if again_s is not None:
            # not "importing nothing": each worker still imports the worker function's module (course_lib.dist here),
            # which the server does not preload (course_lib/_forkserver_preload.py: torch only); cell 14 says so too
            text += (f"; a second launch took {again_s:.1f} s: it forked {world_size} workers from the running "
                     "server, which had imported torch, and set up their process group")
        return text
    text = f"{took} (starting {world_size} fresh processes, each importing torch)"
    if again_s is not None:
        text += f"; a second launch took {again_s:.1f} s: every launch starts fresh processes that import torch again"
    return text
