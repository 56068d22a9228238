"""Lesson 13's hierarchy: lesson 08's ring over all ranks against a two-level all-reduce built from lesson 08's
pieces, on 2 nodes x 2 ranks, and its comparison at the largest message."""

from __future__ import annotations

import os
import time

from .. import compare
from ..tables import Table
from .l13_multi_node import TIMING_RESOLUTION


def hierarchy_worker(rank: int, world_size: int, sizes: list[int], iters: int = 3) -> list[dict]:
    """Lesson 08's ring over all ranks against a two-level all-reduce built from lesson 08's pieces: a binomial
    reduce inside each node (to its first rank), the ring among the nodes' first ranks, a binomial broadcast
    back inside each node. Ranks are numbered node by node (torchrun does); ``$LOCAL_WORLD_SIZE`` per node.
    Rows ``{"size_bytes", "algorithm", "time_s"}`` (the slowest rank's median), checked against the sum."""
    import torch
    import torch.distributed as dist

    from .. import dist as cdist
    from ..comm.collectives import (binomial_tree_broadcast, binomial_tree_reduce_schedule, ring_allreduce,
                                    run_schedule)

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if world_size % local:
        raise ValueError(f"world_size={world_size} is not a whole number of nodes of {local} ranks")
    nnodes = world_size // local
    node_groups = [dist.new_group(list(range(i * local, (i + 1) * local))) for i in range(nnodes)]  # every rank
    leaders = dist.new_group([i * local for i in range(nnodes)])
    mine, leader = node_groups[rank // local], rank % local == 0

    def two_level(t):
        run_schedule(binomial_tree_reduce_schedule(local, t.numel(), 0), t, mine)
        if leader:
            ring_allreduce(t, leaders)
        binomial_tree_broadcast(t, 0, mine)

    algorithms = {"flat ring": lambda t: ring_allreduce(t), "two-level": two_level}
    expected = world_size * (world_size + 1) / 2
    rows = []
    for size in sizes:
        count = max(1, int(size) // 4)
        for name, fn in algorithms.items():
            t = torch.full((count,), float(rank + 1))
            fn(t)
            if not bool((t == expected).all()):
                raise AssertionError(f"{name} of {count * 4} B: rank {rank} got {t[0].item()} instead of {expected}")
            times = []
            for _ in range(iters):
                t.zero_()
                cdist.barrier()
                t0 = time.perf_counter()
                fn(t)
                times.append(time.perf_counter() - t0)
            slowest = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append({"size_bytes": count * 4, "algorithm": name, "time_s": float(slowest.item()),
                         "nodes": nnodes, "ranks_per_node": local})
    return rows


def hierarchy_bytes_ratio(nodes: int, ranks_per_node: int) -> float:
    """Bytes a node sends over its link, flat ring over two-level: the ring's ``2 (p-1)/p n`` leave a node through
    its one rank whose successor is on the next node; the two-level's leaders send ``2 (m-1)/m n`` (m nodes)."""
    p, m = nodes * ranks_per_node, nodes
    return ((p - 1) / p) / ((m - 1) / m) if m > 1 else float("inf")


def hierarchy_table(rows: list[dict]):
    """The timings, one row per message size and algorithm."""
    t = Table(["bytes", "algorithm", "time (ms)"], title="flat ring against two-level, 2 nodes x 2 ranks")
    for r in rows:
        t.add(**{"bytes": f"{r['size_bytes']:,}", "algorithm": r["algorithm"], "time (ms)": f"{r['time_s'] * 1e3:.1f}"})
    return t


def hierarchy_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """At the largest message, the two-level all-reduce's time over the flat ring's (below 1: the two-level
    wins by sending fewer bytes over the slow link; the bytes predict :func:`hierarchy_bytes_ratio` where the
    link sets the pace). Each time is one median of a few repeats: its interval is the timing resolution."""
    if not rows:
        return []
    top = max(r["size_bytes"] for r in rows)
    at = {r["algorithm"]: r for r in rows if r["size_bytes"] == top}
    if set(at) != {"flat ring", "two-level"}:
        raise ValueError(f"the largest message ({top} B) lacks one of the two algorithms: {sorted(at)}")
    return [compare.ratio(f"all-reduce of {top:,} B, two-level / flat ring", [at["flat ring"]["time_s"]],
                          [at["two-level"]["time_s"]], needed=compare.TIME_EFFECT, resolution=TIMING_RESOLUTION,
                          basis="one median each; timing resolution")]
