"""Worker functions for the launcher tests. They live in a module (not a test body)
because spawned workers import functions by module and name."""

import os
import time

import torch
import torch.distributed as dist

from course_lib import dist as cdist


def echo(rank, world_size, payload):
    print(f"hello from rank {rank}")
    return {"rank": rank, "world_size": world_size, "payload": payload,
            "port": os.environ["MASTER_PORT"], "addr": os.environ["MASTER_ADDR"],
            "helpers": (cdist.rank(), cdist.world_size(), cdist.is_main_process()),
            "backend": dist.get_backend(),
            "stdout_file": os.readlink("/proc/self/fd/1") if os.path.exists("/proc/self/fd/1") else None}


def big_result(rank, world_size, n):
    # ~4*n bytes per rank; the values encode the rank so a mix-up is visible.
    return {"tensor": torch.arange(n, dtype=torch.float32) + rank, "nested": [rank, {"x": torch.ones(3) * rank}]}


def _write_pid(pid_dir, rank):
    path = os.path.join(pid_dir, f"{rank}.pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def fail_on(rank, world_size, bad_rank, pid_dir):
    _write_pid(pid_dir, rank)
    if rank == bad_rank:
        time.sleep(0.5)
        raise ValueError(f"boom from rank {rank}")
    dist.barrier()  # the healthy rank waits in a collective the failing rank never joins
    return rank


def hang_in_collective(rank, world_size, pid_dir):
    """Rank 0 blocks in a barrier; the others sleep forever and never join it."""
    _write_pid(pid_dir, rank)
    if rank == 0:
        dist.barrier()
    else:
        while True:
            time.sleep(1)


def mlm_data_differs(rank, world_size):
    """Each rank builds MLM data from a different text: the check must stop every rank."""
    from course_lib.data.text import Corpus, build_mlm_data, pydoc_corpus
    from course_lib.train.workers import check_same_data_on_all_ranks

    docs = pydoc_corpus().documents[rank * 5:rank * 5 + 5]
    data = build_mlm_data(Corpus(f"rank{rank}", "test", tuple(docs)), vocab_size=200, seq_len=16, max_tokens=2000)
    check_same_data_on_all_ranks(data)
    return "trained on mismatched data"
