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
