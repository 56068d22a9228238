"""Lesson 13's hierarchy: lesson 08's ring over all ranks against a two-level all-reduce built from lesson 08's
pieces, on 2 nodes x 2 ranks, compared at the largest message."""

from __future__ import annotations

import os
import time

from .. import compare
from ..tables import Table
from .l13_multi_node import TIMING_RESOLUTION


def hierarchy_worker(rank: int, world_size: int, sizes: list[int], iters: int = 3) -> list[dict]:
    """The flat ring against a binomial reduce inside each node, the ring among the nodes' first ranks and a
    binomial broadcast back. Ranks are numbered node by node (as torchrun does), ``$LOCAL_WORLD_SIZE`` per node.
    Rows of the slowest rank's median time per size and algorithm, each result checked against the sum."""
    import torch
    import torch.distributed as dist

    from .. import dist as cdist
    from ..comm.collectives import (binomial_tree_broadcast, binomial_tree_reduce_schedule, ring_allreduce,
                                    run_schedule)

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    nnodes = world_size // local
    node_groups = [dist.new_group(list(range(i * local, (i + 1) * local))) for i in range(nnodes)]  # every rank
    leaders = dist.new_group([i * local for i in range(nnodes)])
    mine = node_groups[rank // local]

    def two_level(t):
        run_schedule(binomial_tree_reduce_schedule(local, t.numel(), 0), t, mine)
        if rank % local == 0:
            ring_allreduce(t, leaders)
        binomial_tree_broadcast(t, 0, mine)

    rows = []
    for count in (max(1, int(size) // 4) for size in sizes):
        for name, fn in (("flat ring", ring_allreduce), ("two-level", two_level)):
            t = torch.full((count,), float(rank + 1))
            fn(t)
            assert bool((t == world_size * (world_size + 1) / 2).all()), (name, count, rank, t[0].item())
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
    """Bytes leaving a node, flat ring over two-level: the ring's ``2 (p-1)/p n`` leave through the one rank whose
    successor is on the next node; the two-level's leaders send ``2 (m-1)/m n`` (m nodes)."""
    p, m = nodes * ranks_per_node, nodes
    return ((p - 1) / p) / ((m - 1) / m) if m > 1 else float("inf")


def hierarchy_table(rows: list[dict]) -> Table:
    return Table(["bytes", "algorithm", "ms"], [{"bytes": f"{r['size_bytes']:,}", "algorithm": r["algorithm"],
                                                 "ms": f"{r['time_s'] * 1e3:.1f}"} for r in rows])


def hierarchy_comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """At the largest message, two-level over flat ring (below 1: fewer bytes over the slow link won); one median
    each, so the interval is the timing resolution."""
    top = max(r["size_bytes"] for r in rows)
    at = {r["algorithm"]: r["time_s"] for r in rows if r["size_bytes"] == top}
    return [compare.ratio(f"{top:,} B, two-level / ring", [at["flat ring"]], [at["two-level"]],
                          needed=compare.TIME_EFFECT, resolution=TIMING_RESOLUTION, basis="median; timing resolution")]
