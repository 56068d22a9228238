"""Lesson 00, setup: which backend the first all-reduce uses on this machine, and what its launch cost."""

from ..tables import Table


def backend_reason(gpu_count: int, world_size: int, backend: str) -> str:
    """Why ``backend`` was chosen (``course_lib.dist.choose_backend``: NCCL needs one GPU per rank)."""
    if backend == "nccl":
        return f"{gpu_count} GPU(s) for {world_size} ranks: one GPU per rank"
    return f"no GPU {'per rank available' if gpu_count else 'visible'}, so the ranks run on the CPU"


def launch_table(launch_s: float, world_size: int, start_method: str, first: bool = True,
                 again_s: float | None = None) -> Table:
    """This launch (``first``: the kernel's first, which starts the fork server) and, with ``again_s``, the next
    one, what every later launch costs: forked workers import only the worker's module, spawned ones torch too."""
    t = Table(["launch", "workers", "s"])
    forked = f"{world_size} workers forked from the fork server"
    for launch, s, started in (("this one", launch_s, first), ("the next", again_s, False)):
        how = f"{forked} (just started)" if started else forked
        if start_method != "forkserver":
            how = f"{world_size} fresh processes, each importing torch"
        if s is not None:
            t.add(launch=launch, workers=how, s=round(s, 2))
    return t
