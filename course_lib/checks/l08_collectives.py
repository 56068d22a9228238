"""Exercise 08: a binomial-tree broadcast from point-to-point messages, checked on 3 and 4 ranks.

The check runs the learner's ``fn(tensor, src)`` on every rank for every root, several
lengths (shorter than, and not divisible by, the number of ranks; a 2-D tensor) and dtypes
(float32, bfloat16, int64), and compares each rank's tensor, in place, with the root's. While
the learner's code runs, ``torch.distributed``'s point-to-point calls are recorded and its
collectives are blocked, so the check also sees *how* the data travelled: only ``send`` /
``recv`` / ``isend`` / ``irecv`` may carry it, and the messages must form a tree rooted at
``src`` whose depth and fan-out stay within ``ceil(log2 p)`` -- what makes it binomial rather
than a flat tree (the root sends ``p - 1`` times) or a chain (``p - 1`` hops deep).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .harness import CheckResult, finish_result, fmt_value
from .l06_allreduce import launch_cases, probe_not_implemented, spawnable

P2P = ("send", "recv", "isend", "irecv")
COLLECTIVES = ("broadcast", "all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "scatter", "gather", "all_to_all", "all_to_all_single",
               "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
               "_broadcast_coalesced")
DTYPES = ("float32", "bfloat16", "int64")


def broadcast_cases(world_size: int) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) pairs: lengths 1, below and above ``world_size``, 1000, and a 2-D 7x3, in every dtype."""
    shapes = list(dict.fromkeys([(1,), (max(1, world_size - 1),), (world_size + 1,), (1000,), (7, 3)]))
    return [(shape, d) for shape in shapes for d in DTYPES]


def _data(rank: int, shape, dtype: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(-100, 100, shape, generator=g).to(getattr(torch, dtype))


@contextlib.contextmanager
def _watched(log: list, forbidden: list):
    """Record every point-to-point call as ``(op, peer, numel)``; turn collectives into errors."""
    saved = []

    def patch(module, name, new):
        if hasattr(module, name):
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, new)

    depth = [0]  # torch's recv() calls irecv() inside: record the outermost call only

    def recorder(name, original):
        sig = inspect.signature(original)
        peer_arg = "dst" if name in ("send", "isend") else "src"

        def wrapper(*args, **kwargs):
            if depth[0]:
                return original(*args, **kwargs)
            bound = sig.bind_partial(*args, **kwargs).arguments
            tensor, peer = bound.get("tensor"), bound.get(peer_arg)
            if peer is None:
                peer = bound.get("group_" + peer_arg)
            depth[0] += 1
            try:
                result = original(*args, **kwargs)
            finally:
                depth[0] -= 1
            if name == "recv" and peer is None:
                peer = result  # recv from any source returns the sender's rank
            log.append((name, None if peer is None else int(peer), int(tensor.numel()) if tensor is not None else 0))
            return result

        return wrapper

    def blocker(name):
        def wrapper(*args, **kwargs):
            forbidden.append(name)
            raise RuntimeError(f"dist.{name} is a collective: this exercise builds the broadcast from "
                               "point-to-point messages only (dist.send/recv or dist.isend/irecv)")
        return wrapper

    try:
        for name in P2P:
            wrapped = recorder(name, getattr(c10d, name))
            patch(dist, name, wrapped)
            patch(c10d, name, wrapped)  # batch_isend_irecv's P2POp checks and calls these
        for name in COLLECTIVES:
            blocked = blocker(name)
            patch(dist, name, blocked)
            patch(c10d, name, blocked)
        yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)


def _bcast_worker(rank: int, world_size: int, fns: list, cases: list) -> list[dict]:
    """For each learner function: this rank's problems and its message log per (case, src)."""
    out = []
    for fn in fns:
        problems, logs, forbidden = [], {}, []
        for i, (shape, dtype) in enumerate(cases):
            for src in range(world_size):
                x = _data(rank, shape, dtype, i)
                expected = _data(src, shape, dtype, i)  # what the root holds: every rank can compute it
                before = x.clone()
                log = []
                with _watched(log, forbidden):
                    try:
                        returned = fn(x, src)
                    except NotImplementedError:
                        raise
                    except Exception as exc:
                        if forbidden:  # every rank called the same blocked collective: report it, go on
                            break
                        raise RuntimeError(f"src={src}, a {dtype} tensor of shape {shape}: "
                                           f"{type(exc).__name__}: {exc}") from exc
                dist.barrier()  # the next case starts only when every rank finished this one
                logs[(i, src)] = log
                if torch.equal(x, expected):
                    continue
                hint = ""
                if torch.is_tensor(returned) and returned is not x and returned.shape == x.shape \
                        and torch.equal(returned, expected):
                    hint = ("\nhint: you returned the right values in a new tensor; a broadcast works in place: "
                            "receive into `tensor` itself (or copy into it with tensor.copy_(...)).")
                elif torch.equal(x, before) and rank != src:
                    hint = "\nhint: this rank's tensor is unchanged: it never received the root's data."
                # every rank runs every case (a rank that stopped early would leave its peers waiting)
                problems.append(f"rank {rank}, src={src}, a {dtype} tensor of shape {shape}: expected the root's "
                                f"values {fmt_value(expected)}, got {fmt_value(x)}{hint}")
            if forbidden:
                break
        out.append({"problems": problems, "logs": logs, "forbidden": sorted(set(forbidden))})
    return out


def _tree_problems(world_size: int, src: int, case: str, per_rank_logs: list[list], n: int) -> list[str]:
    """Is the message pattern a broadcast tree rooted at ``src`` with depth and fan-out <= ceil(log2 p)?"""
    limit = (world_size - 1).bit_length()
    sends = {r: [(peer, k) for op, peer, k in log if op in ("send", "isend")] for r, log in enumerate(per_rank_logs)}
    recvs = {r: [(peer, k) for op, peer, k in log if op in ("recv", "irecv")] for r, log in enumerate(per_rank_logs)}
    if recvs[src]:
        return [f"{case}: the root (rank {src}) received {len(recvs[src])} message(s); in a broadcast the root "
                "only sends"]
    parent = {}
    for r in range(world_size):
        if r == src:
            continue
        froms = {peer for peer, _ in recvs[r]}
        got = sum(k for _, k in recvs[r])
        if len(froms) != 1 or got != n:
            return [f"{case}: rank {r} received {got} element(s) from rank(s) {sorted(froms)}; in a tree each rank "
                    f"receives the whole tensor ({n} elements) from exactly one parent"]
        parent[r] = froms.pop()
    fanout = {r: len({peer for peer, _ in sends[r]}) for r in range(world_size)}
    worst = max(fanout, key=fanout.get)
    if fanout[worst] > limit:
        return [f"{case}: rank {worst} sent to {fanout[worst]} ranks; in a binomial tree on {world_size} ranks no rank "
                f"sends to more than ceil(log2 {world_size}) = {limit} (the root sending to everyone is the flat tree)"]
    depth = {src: 0}
    for r in parent:
        seen, v, d = set(), r, 0
        while v != src:
            if v in seen or v not in parent:
                return [f"{case}: rank {r} is not reached from the root along the messages sent (a cycle or a "
                        "broken chain of parents)"]
            seen.add(v)
            v, d = parent[v], d + 1
        depth[r] = d
    deepest = max(depth, key=depth.get)
    if depth[deepest] > limit:
        return [f"{case}: rank {deepest} got the data after {depth[deepest]} hops; "
                f"a binomial tree on {world_size} ranks "
                f"reaches everyone in ceil(log2 {world_size}) = {limit} rounds (a chain is {world_size - 1} deep)"]
    return []


def _judge(name: str, results_by_ws: dict, cases_by_ws: dict) -> CheckResult:
    listing = []
    for ws, per_rank in results_by_ws.items():
        cases = cases_by_ws[ws]
        listing.append(f"{ws} ranks: every root, {len(cases)} (shape, dtype) cases")
        forbidden = sorted({f for r in per_rank for f in r["forbidden"]})
        if forbidden:
            return CheckResult(name, False, f"on {ws} ranks your code called dist.{forbidden[0]}, a collective: build "
                               "the broadcast from dist.send/recv (or isend/irecv) only.", tuple(listing))
        problems = [p for r in per_rank for p in r["problems"]]
        if problems:
            more = f"\n({len(problems) - 1} more difference(s))" if len(problems) > 1 else ""
            return CheckResult(name, False, f"on {ws} ranks: {problems[0]}{more}", tuple(listing))
        for (i, src) in per_rank[0]["logs"]:
            shape, dtype = cases[i]
            n = 1
            for s in shape:
                n *= s
            case = f"{ws} ranks, src={src}, {dtype} shape {shape}"
            tree = _tree_problems(ws, src, case, [r["logs"][(i, src)] for r in per_rank], n)
            if tree:
                return CheckResult(name, False, tree[0], tuple(listing))
    return CheckResult(name, True, "every rank holds the root's tensor, in place, for every root, and the messages "
                       "form a tree of depth and fan-out <= ceil(log2 p):\n" + "\n".join(f"  - {c}" for c in listing),
                       tuple(listing))


TREE_DEADLOCK_HINT = ("a rank that waits in recv() for a parent that never sends to it (check who sends in which "
                      "round, relative to src), or a blocking send() to a rank that is not receiving yet.")


def check_binomial_tree_broadcast(fn: Callable, world_sizes=(3, 4), timeout_s: float = 120.0) -> CheckResult:
    """``fn(tensor, src)``: broadcast ``tensor`` from rank ``src`` in place along a binomial tree (lesson 08).

    Launches each of ``world_sizes`` gloo process groups (default 3 and 4: an odd ``p`` and one
    where a flat tree or a chain gives itself away), runs ``fn`` for every root on the shapes
    and dtypes of ``broadcast_cases``, and checks the values and the message pattern (see the
    module docstring). ``fn`` must live in an importable module (``%%writefile``).
    """
    name = "check_binomial_tree_broadcast"
    early = spawnable(name, fn) or probe_not_implemented(name, fn, lambda: fn(torch.zeros(3), 0))
    if early is not None:
        return finish_result(early)
    results, cases_by_ws = {}, {}
    for ws in world_sizes:
        cases_by_ws[ws] = broadcast_cases(ws)
        per_rank = launch_cases(name, _bcast_worker, [fn], ws, cases_by_ws[ws], timeout_s=timeout_s,
                                 deadlock_hint=TREE_DEADLOCK_HINT)
        if isinstance(per_rank, CheckResult):
            return finish_result(per_rank)
        results[ws] = [r[0] for r in per_rank]
    return finish_result(_judge(name, results, cases_by_ws))
