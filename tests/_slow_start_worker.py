"""A worker whose rank 1 starts late: importing this module (what unpickling the worker function does,
before the rendezvous) sleeps ``COURSE_TEST_SLOW_START_S`` on rank 1, as a busy machine makes one rank's
``import torch`` take longer than another's (tests/test_dist.py)."""

import os
import time

if os.environ.get("RANK") == "1":
    time.sleep(float(os.environ.get("COURSE_TEST_SLOW_START_S", "0")))


def rank_after_a_collective(rank, world_size):
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    return rank, float(t)
