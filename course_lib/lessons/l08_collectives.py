"""Lesson 08's measurements and their reading: collectives built from messages, measured, modelled, extrapolated.

The mechanics live in :mod:`course_lib.comm` (``collectives``: the algorithms; ``cost``: their
alpha-beta-gamma formulas; ``bench``: the timing workers; ``plots``: the figures). This module
says what lesson 08 runs on this machine (:func:`lesson_spec`), and reads the results:
crossover sizes measured and predicted, bus vs algorithm bandwidth, the extrapolation to
1024 ranks, and the verdict, computed from the learner's own numbers.
"""

from __future__ import annotations

import math

import numpy as np

from ..comm import cost
from ..comm.bench import (ALLREDUCE_BENCH, BROADCAST_BENCH, CollectivesResult, collectives_benchmark, measure_gamma,
                         pingpong_benchmark)
from ..comm.collectives import compare_with_backend
from ..config import pick
from ..parallel.staleness import ServerConfig, parameter_server_worker
from ..tables import Table
from ..comm.cost import ALLREDUCE_MODELS



def lesson_spec(profile: str, max_ranks: int, straggler_delay_s: float = 0.02, backend: str = "gloo") -> dict:
    """What lesson 08's one launch measures: groups of 2..``max_ranks`` ranks, sizes, repeats, and
    the parameter-server runs (gloo only: they send CPU tensors; with ``max_ranks >= 3`` rank 2 is
    the straggler, else rank 1)."""
    if max_ranks < 2:
        raise ValueError(f"lesson 08 needs at least 2 ranks, got {max_ranks}")
    top = pick(profile, full=24, smoke=12)  # 2**24 = 16 MiB; smoke: 4 KiB
    step = pick(profile, full=2, smoke=4)
    sizes = [2**k for k in range(2, top + 1, step)]
    return {
        "groups": [list(range(p)) for p in range(2, max_ranks + 1)],
        "check_lengths": [1, 3, 5, 33] if profile == "smoke" else [1, 2, 3, 5, 7, 33, 1000],
        "pingpong_sizes": [2**k for k in range(0, pick(profile, full=23, smoke=13), 2)],
        "pingpong_iters": pick(profile, full=20, smoke=5),
        "repeats": pick(profile, full=5, smoke=2),
        "sizes": sizes,
        "iters": pick(profile, full=8, smoke=2),
        "warmup": pick(profile, full=2, smoke=1),
        "segments": 8,
        "server_configs": [ServerConfig(mode=mode, straggler_rank=straggler, delay_s=straggler_delay_s,
                                        budget_s=pick(profile, full=2.0, smoke=0.3), lr=0.05)
                           for straggler in (None, 2 if max_ranks >= 3 else 1) for mode in ("sync", "async")]
        if backend == "gloo" else [],
    }


def lesson_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Lesson 08's measurements in one launch (each launch costs seconds of start-up), in order:
    correctness against torch.distributed, a ping-pong, the all-reduce and broadcast sweeps on
    every group of ``spec["groups"]``, ``gamma``, and the parameter-server runs."""
    groups = spec.get("groups")
    out = {"correctness": compare_with_backend(rank, world_size, spec["check_lengths"], groups=groups),
           "pingpong": pingpong_benchmark(rank, world_size, spec["pingpong_sizes"], spec.get("pingpong_iters", 20),
                                          spec.get("repeats", 5))}
    out["allreduce"] = collectives_benchmark(rank, world_size, spec["sizes"], ALLREDUCE_BENCH, spec.get("iters", 10),
                                             spec.get("warmup", 2), groups)
    out["broadcast"] = collectives_benchmark(rank, world_size, spec["sizes"], BROADCAST_BENCH, spec.get("iters", 10),
                                             spec.get("warmup", 2), groups, spec.get("segments", 8))
    out["gamma_s_per_byte"] = measure_gamma()
    out["parameter_server"] = parameter_server_worker(rank, world_size, spec.get("server_configs", []))
    return out


def measured_crossover(result: CollectivesResult, p: int, small: str = "recursive doubling",
                       large: str = "ring") -> float | None:
    """The measured message size (bytes) from which ``large`` stays at least as fast as ``small``.

    Between the last size where ``small`` won and the next, interpolated on a log scale (the
    time difference crosses zero there). 0.0 when ``large`` won at every size measured, None
    when it was not ahead at the largest.
    """
    n, t_small = result.times(p, small)
    n2, t_large = result.times(p, large)
    if not len(n) or not np.array_equal(n, n2):
        return None
    wins = t_large <= t_small
    if wins.all():
        return 0.0
    if not wins[-1]:
        return None
    last_loss = int(np.nonzero(~wins)[0][-1])
    a, b = np.log(n[last_loss]), np.log(n[last_loss + 1])
    d0 = t_small[last_loss] - t_large[last_loss]  # < 0: small was faster
    d1 = t_small[last_loss + 1] - t_large[last_loss + 1]  # >= 0
    return float(np.exp(a + (b - a) * (-d0) / (d1 - d0))) if d1 != d0 else float(n[last_loss + 1])


def model_crossover(p: int, alpha: float, beta: float, gamma: float = 0.0, small: str = "recursive doubling",
                    large: str = "ring") -> float | None:
    """The size above which ``large`` is cheaper than ``small`` under the alpha-beta-gamma model
    (0.0: at every size, e.g. the ring against the tree on 2 ranks; None: at no size)."""
    f_small, f_large = ALLREDUCE_MODELS[small], ALLREDUCE_MODELS[large]
    if f_large(1.0, p, alpha, beta, gamma) <= f_small(1.0, p, alpha, beta, gamma):
        return 0.0
    return cost.crossover_size(f_small, f_large, p, alpha, beta, gamma)


def _size(n: float | None) -> str:
    if n is None:
        return "never"
    return "every size" if n == 0 else cost.human_bytes(float(round(n)))


def crossover_table(result: CollectivesResult, alpha: float, beta: float, gamma: float = 0.0) -> Table:
    """Per ``p``: from which size the ring beats recursive doubling and the tree, measured and modelled."""
    t = Table(["p", "ring < rec. doubling from: measured", "model", "ring < tree from: measured", "model (tree)"],
              title="crossover message sizes on this machine (model: your ping-pong's alpha, beta and gamma)")
    for p in result.world_sizes:
        t.add(**{"p": p, "ring < rec. doubling from: measured": _size(measured_crossover(result, p)),
                 "model": _size(model_crossover(p, alpha, beta, gamma)),
                 "ring < tree from: measured": _size(measured_crossover(result, p, "tree")),
                 "model (tree)": _size(model_crossover(p, alpha, beta, gamma, small="tree"))})
    return t


def bandwidth_table(result: CollectivesResult, p: int) -> Table:
    """algbw and busbw (nccl-tests' convention) of the course's ring and of the backend, per size."""
    t = Table(["size", "ring algbw (GB/s)", "ring busbw (GB/s)", "backend algbw (GB/s)", "backend busbw (GB/s)",
               "ring / backend"], title=f"all-reduce bandwidth, p = {p}: busbw = algbw x 2(p-1)/p = "
                                       f"algbw x {cost.allreduce_busbw_factor(p):.3g}")
    rows = {(r["algorithm"], r["size_bytes"]): r for r in result.rows if r["p"] == p}
    for n in sorted({r["size_bytes"] for r in result.rows if r["p"] == p and r["algorithm"] == "ring"}):
        ring, back = rows.get(("ring", n)), rows.get(("backend", n))
        if ring is None or back is None:
            continue
        t.add(**{"size": cost.human_bytes(n), "ring algbw (GB/s)": ring["algbw_GBps"],
                 "ring busbw (GB/s)": ring["busbw_GBps"], "backend algbw (GB/s)": back["algbw_GBps"],
                 "backend busbw (GB/s)": back["busbw_GBps"], "ring / backend": ring["busbw_GBps"] / back["busbw_GBps"]})
    return t


def links(alpha: float, beta: float) -> dict[str, tuple[float, float]]:
    """The learner's link (measured) next to the quoted interconnects: name -> (alpha, beta)."""
    out = {"this machine (measured)": (alpha, beta)}
    for name, q in cost.QUOTED_INTERCONNECTS.items():
        out[f"{name} (quoted)"] = (q["alpha_s"], 1.0 / q["bandwidth_Bps"])
    return out


def extrapolation_table(link_params: dict, sizes_bytes=(8 * 2**10, 100 * 2**20), ps=(8, 64, 1024),
                        gamma: float = 0.0) -> Table:
    """Predicted all-reduce time of each algorithm, and the cheapest, per link, size and ``p``."""
    algos = dict(ALLREDUCE_MODELS, rabenseifner=cost.rabenseifner_allreduce_time)
    t = Table(["link", "size", "p"] + [f"{a} (ms)" for a in algos] + ["cheapest"],
              title="all-reduce predicted by the alpha-beta model")
    for link, (a, b) in link_params.items():
        for n in sizes_bytes:
            for p in ps:
                times = {k: f(n, p, a, b, gamma) for k, f in algos.items()}
                t.add(**{"link": link, "size": cost.human_bytes(n), "p": p,
                         **{f"{k} (ms)": v * 1e3 for k, v in times.items()}, "cheapest": min(times, key=times.get)})
    return t


def verdict(result: CollectivesResult, alpha: float, beta: float, gamma: float = 0.0, p_far: int = 1024,
            gradient_bytes: float = 100 * 2**20) -> str:
    """What the learner's numbers say: crossovers here, and what they predict for ``p_far`` ranks."""
    p = max(result.world_sizes)
    lines = []
    measured = measured_crossover(result, p)
    model = model_crossover(p, alpha, beta, gamma)
    n, t_rd = result.times(p, "recursive doubling")
    _, t_ring = result.times(p, "ring")
    if measured:  # a size > 0: recursive doubling first, then the ring
        lines.append(f"At p = {p} on this machine recursive doubling wins below about {_size(measured)} and the ring "
                     f"from there on (measured); the alpha-beta-gamma model with your ping-pong's alpha and beta "
                     f"puts the crossover at {_size(model)}.")
    elif len(n) and (t_ring <= t_rd).all():
        lines.append(
            f"At p = {p} on this machine the ring was at least as fast as recursive doubling at every size "
            f"measured ({_size(n.min())} to {_size(n.max())}); the model puts the crossover at {_size(model)}."
        )
    elif len(n):
        lines.append(f"At p = {p} on this machine recursive doubling was still ahead of the ring at the largest size "
                     f"measured ({_size(n.max())}), so the crossover lies beyond it; the model puts it at "
                     f"{_size(model)}.")
    far = model_crossover(p_far, alpha, beta, gamma)
    ring_lat = 2 * (p_far - 1) * alpha
    rd_lat = math.log2(p_far) * alpha
    t_ring = cost.ring_allreduce_time(gradient_bytes, p_far, alpha, beta, gamma)
    t_rd = cost.butterfly_allreduce_time(gradient_bytes, p_far, alpha, beta, gamma)
    lines.append(f"With the same links and {p_far} ranks the model puts the crossover at {_size(far)}: the ring's "
                 f"latency term is 2(p-1) alpha = {ring_lat * 1e3:.3g} ms per all-reduce, recursive doubling's "
                 f"log2(p) alpha = {rd_lat * 1e3:.3g} ms.")
    lines.append(f"A {_size(gradient_bytes)} gradient at p = {p_far}: ring {t_ring * 1e3:.4g} ms, recursive doubling "
                 f"{t_rd * 1e3:.4g} ms -> {'ring' if t_ring < t_rd else 'recursive doubling'} "
                 f"({max(t_ring, t_rd) / min(t_ring, t_rd):.3g}x). Small messages want the tree/butterfly, "
                 "large ones the ring: why NCCL picks its algorithm per size and scale.")
    return "\n".join(lines)
