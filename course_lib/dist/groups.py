"""Process groups and rank helpers: what a worker calls to know who it is and to talk to the others.

Introduced in lesson 00 (a first all-reduce) and used in lesson 06 (DDP). The same worker function
runs unchanged three ways:

* from a notebook cell: ``launch(worker, world_size, cfg)`` (:mod:`course_lib.dist.launcher`);
* under ``torchrun``: the script calls ``init_from_env()`` (reads ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``);
* in one plain process: the rank helpers return safe defaults (rank 0 of 1).

``choose_backend`` is the one rule for gloo or NCCL: NCCL needs one GPU per rank.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os

import torch
import torch.distributed as dist

from ..hardware import usable_cpu_cores

LOOPBACK = "127.0.0.1"
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0
# More ranks than this many per usable core is a mistake, not a lesson: every rank
# imports torch and spins its own threads, and the machine thrashes.
MAX_RANKS_PER_CORE = 4


# --------------------------------------------------------------------------- rank helpers


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """Global rank: from the process group, else ``$RANK`` (torchrun), else 0."""
    return dist.get_rank() if is_initialized() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    """Number of ranks: from the process group, else ``$WORLD_SIZE``, else 1."""
    return dist.get_world_size() if is_initialized() else int(os.environ.get("WORLD_SIZE", 1))


def local_rank() -> int:
    """Rank within this node (selects the GPU): ``$LOCAL_RANK``, else 0."""
    return int(os.environ.get("LOCAL_RANK", 0))


def is_main_process() -> bool:
    """True on rank 0 (and in a plain single process): the one that reports and writes."""
    return rank() == 0


def barrier() -> None:
    """Wait for every rank; a no-op without a process group."""
    if is_initialized():
        dist.barrier()


def device() -> torch.device:
    """This rank's device: ``cuda:<local_rank>`` under NCCL, the CPU under gloo (ranks that
    share a GPU, lesson 06 on one GPU), and for a process alone (no group: a script run
    without torchrun) the GPU when there is one, else the CPU."""
    if not is_initialized():
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dist.get_backend() == "nccl":
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


# --------------------------------------------------------------------------- backend choice


def choose_backend(world_size: int, backend: str = "auto", *, gpu_count: int | None = None,
                   cpu_cores: int | None = None) -> str:
    """Pick the backend for ``world_size`` ranks and check the request makes sense.

    NCCL when CUDA is available and there is one GPU per rank, gloo otherwise. Errors name
    the numbers: ``backend="nccl"`` without enough GPUs, ``world_size < 1``, or far more
    ranks than cores.
    """
    if gpu_count is None:
        gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cpu_cores is None:
        cpu_cores = usable_cpu_cores()
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    if backend == "auto":
        backend = "nccl" if 0 < world_size <= gpu_count and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if gpu_count == 0:
            raise RuntimeError(
                "backend='nccl' needs CUDA GPUs, but this machine has none visible "
                "(torch.cuda.is_available() is False). Use backend='gloo' (or 'auto') to run on CPU.")
        if world_size > gpu_count:
            raise RuntimeError(
                f"backend='nccl' runs one rank per GPU: world_size={world_size} but only "
                f"{gpu_count} GPU(s) are visible. Use world_size <= {gpu_count}, or backend='gloo' "
                "to run extra ranks on the CPU.")
    elif backend == "gloo" and gpu_count == 0 and world_size > MAX_RANKS_PER_CORE * cpu_cores:
        raise ValueError(
            f"world_size={world_size} is far beyond this machine's {cpu_cores} usable CPU core(s) "
            f"(at most {MAX_RANKS_PER_CORE * cpu_cores} = {MAX_RANKS_PER_CORE} per core): every rank is a "
            "full process with its own copy of torch. Use a smaller world_size.")
    return backend


# --------------------------------------------------------------------------- torchrun / SLURM path


def init_from_env(backend: str = "auto", timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> bool:
    """Initialise the process group from torchrun's environment, if there is one.

    Returns True when a group was created (or already existed), False in a plain single
    process (no ``WORLD_SIZE`` in the environment), where the rank helpers' defaults apply.
    """
    if is_initialized():
        return True
    if "WORLD_SIZE" not in os.environ or "MASTER_ADDR" not in os.environ:
        return False
    ws = int(os.environ["WORLD_SIZE"])
    # NCCL needs one GPU per rank *on this node*: torchrun's LOCAL_WORLD_SIZE ranks share its GPUs
    # (two NCCL ranks on one GPU fail), so the choice is choose_backend's rule for the node's ranks.
    backend = choose_backend(int(os.environ.get("LOCAL_WORLD_SIZE", ws)), backend)
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend, init_method="env://", rank=int(os.environ["RANK"]),
                            world_size=ws, timeout=_dt.timedelta(seconds=timeout_s))
    return True


def cleanup() -> None:
    """Destroy the process group if there is one (safe to call twice)."""
    if is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def process_group_from_env(backend: str = "auto"):
    """For script entries: ``init_from_env()`` for the block, then a barrier and ``cleanup()``.

    Under torchrun every rank runs the block; in a plain process it runs alone. If the
    block raises, the barrier is skipped (the peers are brought down by their timeout or
    by torchrun) and the group is still destroyed.
    """
    init_from_env(backend)
    try:
        yield
        barrier()
    finally:
        cleanup()


# --------------------------------------------------------------------------- lesson 00's first collective


def allreduce_demo(rank: int, world_size: int, length: int = 4) -> dict:
    """Each rank contributes ``(rank + 1) * [1, 2, ..., length]``; all-reduce sums them.

    Returns what the rank sent and what came back, so lesson 00 can show both.
    """
    sent = (rank + 1) * torch.arange(1, length + 1, dtype=torch.float32, device=device())
    received = sent.clone()
    if is_initialized():  # in one plain process the "sum over ranks" is just our own tensor
        dist.all_reduce(received, op=dist.ReduceOp.SUM)
    print(f"sent {sent.tolist()} -> received {received.tolist()}")
    return {"rank": rank, "backend": dist.get_backend() if is_initialized() else "none",
            "sent": sent.cpu(), "received": received.cpu(), "pid": os.getpid()}
