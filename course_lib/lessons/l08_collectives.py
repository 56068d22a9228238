"""Lesson 08's measurements: collectives built from messages, measured, modelled, extrapolated.

The mechanics live in :mod:`course_lib.comm` (``collectives``: the algorithms; ``cost``: their
alpha-beta-gamma formulas; ``bench``: the timing workers; ``plots``: the figures). This module
says what lesson 08 runs on this machine (:func:`lesson_spec`, :func:`links_spec`), turns the results
into tables (crossover sizes measured and predicted, bus vs algorithm bandwidth, the extrapolation to
1024 ranks, ring against tree on one host and on independent links), and decides its questions as
:class:`course_lib.compare.Comparison` rows. The section on sending fewer bytes is
:mod:`course_lib.lessons.l08_compression`.
"""

from __future__ import annotations

import os

import numpy as np

from .. import compare
from ..comm import cost
from ..comm.bench import (ALLREDUCE_BENCH, BROADCAST_BENCH, CollectivesResult, PingPong, collectives_benchmark,
                         measure_gamma, pingpong_benchmark)
from ..comm.collectives import compare_with_backend
from ..comm.cost import ALLREDUCE_MODELS
from ..config import pick
from ..parallel.staleness import ServerConfig, parameter_server_worker
from ..perf.peaks import REFERENCE_PEAKS
from ..tables import Table


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


MEASURED_LINK = "this machine (measured)"  # the name :func:`links` gives the learner's own link


# The GPU each quoted interconnect joins (lesson 09's table, :data:`course_lib.perf.peaks.REFERENCE_PEAKS`): its
# reductions run at that GPU's memory bandwidth, not at this machine's.
LINK_DEVICES = {name: "H100 SXM" for name in cost.QUOTED_INTERCONNECTS}


def reduction_gamma(device: str) -> float:
    """Seconds per byte of ``a += b`` on ``device`` of lesson 09's table, from its datasheet memory bandwidth
    (model, not measured): each byte of ``a`` reads ``a`` and ``b`` and writes ``a``, three bytes of traffic."""
    return 3.0 / REFERENCE_PEAKS[device].memory_bandwidth


def links(alpha: float, beta: float, gamma: float = 0.0) -> dict[str, tuple[float, float, float]]:
    """The learner's link (measured, with this machine's ``gamma``) next to the quoted interconnects, each with
    the reduction speed of the GPU it joins (:data:`LINK_DEVICES`): name -> (alpha, beta, gamma)."""
    out = {MEASURED_LINK: (alpha, beta, gamma)}
    for name, q in cost.QUOTED_INTERCONNECTS.items():
        out[f"{name} (quoted)"] = (q["alpha_s"], 1.0 / q["bandwidth_Bps"], reduction_gamma(LINK_DEVICES[name]))
    return out


def link_device(link: str) -> str | None:
    """The GPU of lesson 09's table a link of :func:`links` joins; None for this machine's."""
    return next((d for name, d in LINK_DEVICES.items() if link == f"{name} (quoted)"), None)


def extrapolation_table(link_params: dict, sizes_bytes=(8 * 2**10, 100 * 2**20), ps=(8, 64, 1024)) -> Table:
    """Predicted all-reduce time of each algorithm, and the cheapest, per link, size and ``p`` (each link with its
    own ``gamma``: :func:`links`)."""
    algos = dict(ALLREDUCE_MODELS, rabenseifner=cost.rabenseifner_allreduce_time)
    t = Table(["link", "size", "p"] + [f"{a} (ms)" for a in algos] + ["cheapest"],
              title="all-reduce predicted by the alpha-beta-gamma model (quoted links: gamma from their GPU's "
                    "datasheet memory bandwidth)")
    for link, (a, b, gamma) in link_params.items():
        for n in sizes_bytes:
            for p in ps:
                times = {k: f(n, p, a, b, gamma) for k, f in algos.items()}
                t.add(**{"link": link, "size": cost.human_bytes(n), "p": p,
                         **{f"{k} (ms)": v * 1e3 for k, v in times.items()}, "cheapest": min(times, key=times.get)})
    return t


def plot_links(link_params: dict, sizes_bytes) -> list:
    """:func:`course_lib.comm.plots.plot_extrapolation` once per reduction speed (it prices one ``gamma`` per
    figure): this machine's link, then the quoted ones at their GPU's."""
    from ..comm.plots import plot_extrapolation

    gammas = dict.fromkeys(g for _, _, g in link_params.values())
    return [plot_extrapolation({k: (a, b) for k, (a, b, g) in link_params.items() if g == gamma}, sizes_bytes,
                               gamma=gamma)[0] for gamma in gammas]


LINK_RATE = "1gbit"  # the virtual links (tc's units): slow enough that the link, not the 2 cores, sets the pace


ALGORITHM_SCHEDULES = {"ring": "ring all-reduce", "recursive doubling": "recursive doubling all-reduce",
                       "tree": "tree all-reduce"}


def links_spec(profile: str, nodes: int) -> dict:
    """What lesson 08 measures on ``nodes`` virtual nodes (one rank each): groups of 2..nodes ranks, a few sizes
    around the crossovers the model puts on a link of :data:`LINK_RATE` (kilobytes to a megabyte), short repeats
    (a 2 MiB tree all-reduce on 4 ranks moves 8 MiB through its busiest link: 70 ms at 1 Gbit/s)."""
    if nodes < 2:
        raise ValueError(f"lesson 08 on the virtual cluster needs at least 2 nodes, got {nodes}")
    return {"groups": [list(range(p)) for p in range(2, nodes + 1)],
            "sizes": [2**k for k in pick(profile, full=(10, 13, 16, 19, 21), smoke=(10, 16))],
            # up to 4 MiB: the links' token buckets let ~4 ms of the rate through unshaped (cluster._burst_bytes),
            # so only messages many times that show the set rate
            "pingpong_sizes": [2**k for k in pick(profile, full=(0, 10, 14, 18, 20, 22), smoke=(0, 14, 17))],
            "pingpong_iters": pick(profile, full=4, smoke=3), "repeats": pick(profile, full=3, smoke=1),
            "iters": pick(profile, full=5, smoke=2), "warmup": 1}


def links_worker(rank: int, world_size: int, spec: dict) -> dict:
    """On the virtual nodes (one rank per node): a ping-pong over one link (alpha, beta of the link), then the
    all-reduce sweep on every group of ``spec["groups"]``. A worker for ``torchrun -m course_lib.run``."""
    return {"pingpong": pingpong_benchmark(rank, world_size, spec["pingpong_sizes"], spec["pingpong_iters"],
                                           spec["repeats"], warmup=1),
            "allreduce": collectives_benchmark(rank, world_size, spec["sizes"], ALLREDUCE_BENCH, spec["iters"],
                                               spec["warmup"], spec["groups"])}


def measure_on_links(spec: dict, nodes: int, rate: str = LINK_RATE, timeout_s: float = 300.0) -> dict:
    """:func:`links_worker` on a virtual cluster of ``nodes`` nodes on links of ``rate`` (brought up and down here:
    course_lib/cluster.py, launched as lesson 13 launches, :class:`course_lib.lessons.l13_nodes.VirtualNodes`).
    ``{"ran": False, "why": ...}`` where the cluster cannot be made (neither root nor user namespaces, programs
    missing)."""
    import shutil
    import tempfile

    from .. import cluster as vc
    from .l13_nodes import VirtualNodes

    why = vc.unavailable_reason()
    if why is not None:
        return {"ran": False, "why": why}
    workdir = tempfile.mkdtemp(prefix="l08-")
    try:
        with vc.up(f"l08-{os.getpid()}", nodes=nodes, rate=rate) as cluster:
            out = VirtualNodes(cluster, workdir).run("course_lib.lessons.l08_collectives:links_worker", [spec],
                                                    nnodes=nodes, nproc=1, timeout_s=timeout_s)
    except vc.ClusterError as err:  # a step refused (e.g. root without CAP_NET_ADMIN in a container): said so
        return {"ran": False, "why": str(err)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"ran": True, "rate": rate, "rate_bits_per_s": vc.parse_rate(rate), "nodes": nodes, **out}


def links_collectives(links: dict) -> CollectivesResult:
    """The links' all-reduce sweep as lesson 08's :class:`CollectivesResult` (gloo: one rank per node; its table's
    title says where it ran)."""
    return CollectivesResult(links["allreduce"], f"gloo on {links.get('nodes', '?')} virtual nodes' links")


def critical_path_bytes(algorithm: str, p: int, n_bytes: int) -> float:
    """Bytes an all-reduce of ``n_bytes`` on ``p`` ranks waits for where every rank has a link of its own: per round
    the busiest rank's, rounds one after the other (:func:`course_lib.comm.cost.schedule_time` with beta = 1),
    counted on the very schedule the code runs."""
    from ..comm.collectives import SCHEDULES

    return cost.schedule_time(SCHEDULES[ALGORITHM_SCHEDULES[algorithm]](p, max(1, n_bytes // 4)), 0.0, 1.0)


def total_bytes(algorithm: str, p: int, n_bytes: int) -> int:
    """Bytes all ranks send together in that all-reduce (what one shared memory-copy bandwidth carries)."""
    from ..comm.collectives import SCHEDULES

    return sum(4 * t.count for rnd in SCHEDULES[ALGORITHM_SCHEDULES[algorithm]](p, max(1, n_bytes // 4)).rounds
               for t in rnd)


def ring_tree_rows(result: CollectivesResult) -> list[dict]:
    """Per ``p``, at the largest size measured: the ring's time over the tree's, measured, against the two views:
    independent links (the ratio of their critical-path bytes) and one shared bandwidth (their total bytes: the
    same 2(p-1) n, so 1); and the total bytes sent per second (GB/s) by each."""
    rows = []
    for p in result.world_sizes:
        n, t_ring = result.times(p, "ring")
        n2, t_tree = result.times(p, "tree")
        if not len(n) or not np.array_equal(n, n2):
            continue
        size = int(n[-1])
        rows.append({"p": p, "size_bytes": size, "measured": float(t_ring[-1] / t_tree[-1]),
                     "links_model": critical_path_bytes("ring", p, size) / critical_path_bytes("tree", p, size),
                     "shared_model": total_bytes("ring", p, size) / total_bytes("tree", p, size),
                     "ring_GBps": total_bytes("ring", p, size) / float(t_ring[-1]) / 1e9,
                     # nccl-tests' busbw, algbw x 2(p-1)/p: the ring's total bytes per second per rank
                     "ring_busbw_GBps": total_bytes("ring", p, size) / float(t_ring[-1]) / 1e9 / p,
                     "tree_GBps": total_bytes("tree", p, size) / float(t_tree[-1]) / 1e9})
    return rows


def ring_tree_table(host_rows: list[dict], link_rows: list[dict] | None = None, links: dict | None = None) -> Table:
    """The rows :func:`ring_tree_comparisons` decides (:func:`ring_tree_rows`), on one host and, where they ran, on the
    links: the ring's time over the tree's at the largest size, the two views' predictions, the bytes per second."""
    t = Table(["measured on", "p", "size", "ring/tree measured", "predicted: links", "predicted: shared",
               "ring GB/s sent", "tree GB/s sent", "ring busbw (GB/s)"],
              title="ring against tree at the largest size measured: which view the times follow")
    where = [("one host", host_rows)] + ([(f"{links['nodes']} virtual nodes, {links['rate']} links", link_rows)]
                                         if link_rows and links else [])
    for name, rows in where:
        for r in rows:
            t.add(**{"measured on": name, "p": r["p"], "size": _size(r["size_bytes"]), "ring/tree measured":
                     r["measured"], "predicted: links": r["links_model"], "predicted: shared": r["shared_model"],
                     "ring GB/s sent": r["ring_GBps"], "tree GB/s sent": r["tree_GBps"],
                     "ring busbw (GB/s)": r["ring_busbw_GBps"]})
    return t


def link_alpha_beta(pingpong_rows: list[dict]) -> tuple[float, float]:
    """A shaped link's alpha and beta from its ping-pong: alpha from lesson 08's fit (:class:`PingPong`), beta from
    the largest message alone (its median time less alpha, per byte). The links' token buckets let ~4 ms of the
    rate through at once (course_lib/cluster.py), so messages of a few hundred KiB cross faster than the rate and
    pull a fit over all sizes above it (measured: 2.5 Gbit/s on a 1 Gbit/s link; the 4 MiB message alone: 1.07)."""
    alpha, _ = PingPong(pingpong_rows).alpha_beta()
    n = max(r["size_bytes"] for r in pingpong_rows)
    t = float(np.median([r["one_way_s"] for r in pingpong_rows if r["size_bytes"] == n]))
    return alpha, max(t - alpha, 0.01 * t) / n


def links_crossover_rows(links: dict, gamma: float = 0.0) -> list[dict]:
    """Per ``p`` on the independent links: from which size the ring beats recursive doubling and the tree,
    measured (:func:`measured_crossover`) and modelled with the link's ping-pong alpha and beta."""
    result = links_collectives(links)
    alpha, beta = link_alpha_beta(links["pingpong"])
    rows = []
    for p in result.world_sizes:
        seen = alpha_seen(result, p)
        rows.append({"p": p, "alpha_s": alpha, "beta_s_per_byte": beta, "alpha_seen_s": seen,
                     **{small: {"measured": measured_crossover(result, p, small),
                                "model": model_crossover(p, alpha, beta, gamma, small),
                                "model_seen": model_crossover(p, seen, beta, gamma, small) if seen else None}
                        for small in ("recursive doubling", "tree")}})
    return rows


def alpha_seen(result: CollectivesResult, p: int) -> float | None:
    """The latency per round the all-reduces saw at ``p``: the ring's time at the smallest size over its rounds
    (on oversubscribed cores a round waits for all its ranks to be scheduled: many times the ping-pong's alpha)."""
    n, t = result.times(p, "ring")
    return float(t[0]) / _rounds("ring", p) if len(n) else None


def links_table(rows: list[dict], ratios: list[dict], links: dict) -> Table:
    """The crossovers on the virtual nodes' links, measured against the model, and the ring/tree ratio."""
    t = Table(["p", "ring < rec. doubling from: measured", "model", "model, alpha seen", "ring < tree from: measured",
               "model (tree)", "model (tree), alpha seen", "alpha seen (us)", "ring/tree at largest",
               "predicted: links", "predicted: shared"],
              title=f"on independent links ({links['nodes']} virtual nodes, {links['rate']} each"
                    + (f"; model: the link's ping-pong: alpha = {rows[0]['alpha_s'] * 1e6:.0f} us, and "
                       f"{8 / rows[0]['beta_s_per_byte'] / 1e6:.0f} Mbit/s from its largest message)" if rows else ")"))
    by_p = {r["p"]: r for r in ratios}
    for r in rows:
        q = by_p.get(r["p"], {})
        t.add(**{"p": r["p"], "ring < rec. doubling from: measured": _size(r["recursive doubling"]["measured"]),
                 "model": _size(r["recursive doubling"]["model"]),
                 "model, alpha seen": _size(r["recursive doubling"]["model_seen"]),
                 "ring < tree from: measured": _size(r["tree"]["measured"]), "model (tree)": _size(r["tree"]["model"]),
                 "model (tree), alpha seen": _size(r["tree"]["model_seen"]),
                 "alpha seen (us)": r["alpha_seen_s"] * 1e6 if r["alpha_seen_s"] else None,
                 "ring/tree at largest": q.get("measured"), "predicted: links": q.get("links_model"),
                 "predicted: shared": q.get("shared_model")})
    return t


def _rounds(algorithm: str, p: int) -> int:
    from ..comm.collectives import SCHEDULES

    return len(SCHEDULES[ALGORITHM_SCHEDULES[algorithm]](p, 64).rounds)

def alpha_beta_table(saved06: dict | None, alpha: float, beta: float) -> Table:
    """The ping-pong's alpha and bandwidth beside lesson 06's all-reduce fit read as a ring of messages
    (:func:`course_lib.comm.cost.link_alpha_beta_from_ring_fit`), where lesson 06 saved one on several ranks."""
    t = Table(["source", "alpha (us)", "1/beta (GB/s)"], title="a message's latency and bandwidth, two ways")
    t.add(**{"source": "ping-pong (this lesson)", "alpha (us)": alpha * 1e6, "1/beta (GB/s)": 1 / beta / 1e9})
    if saved06 and saved06.get("allreduce_alpha_s") is not None and saved06.get("world_size", 1) > 1:
        p = saved06["world_size"]
        a06, b06 = cost.link_alpha_beta_from_ring_fit(saved06["allreduce_alpha_s"],
                                                      saved06["allreduce_beta_s_per_byte"], p)
        t.add(**{"source": f"lesson 06's all-reduce fit, read as a ring on {p} ranks", "alpha (us)": a06 * 1e6,
                 "1/beta (GB/s)": 1 / b06 / 1e9 if b06 > 0 else None})
    return t


# --------------------------------------------------------------------------- the lesson's questions, decided
TIMING_RESOLUTION = 0.2  # a ratio of two single timings (each a median over blocks) moves this much between runs
# of the same sweep on a shared machine: the interval of every comparison read from one timing per arm


def _sweep_step(result: CollectivesResult) -> float:
    sizes = sorted({r["size_bytes"] for r in result.rows})
    return max([b / a for a, b in zip(sizes, sizes[1:])] or [2.0])


def crossover_comparisons(result: CollectivesResult, alpha: float, beta: float, gamma: float, where: str,
                          ps=None) -> list[compare.Comparison]:
    """Did the model place each crossover (the ring against recursive doubling and the tree, per ``p``)? The
    measured size over the modelled one; the measured size is interpolated between two sizes of the sweep, so
    its resolution is one step of the sweep. Crossovers at "every size" or "never" have no ratio: the
    crossover table shows them."""
    step = _sweep_step(result)
    out = []
    for p in ps or result.world_sizes:
        for small in ("recursive doubling", "tree"):
            m, x = measured_crossover(result, p, small), model_crossover(p, alpha, beta, gamma, small)
            if m and x:
                out.append(compare.quantity_ratio(
                    f"crossover ring/{small}, p = {p} ({where}): measured / model", m / x, 0.0,
                    needed=compare.MODEL_EFFECT, resolution=step - 1, basis=f"one step of the sweep ({step:g}x)"))
    return out


def tied_round_comparisons(result: CollectivesResult, where: str) -> list[compare.Comparison]:
    """Where the ring and another algorithm have as many rounds at ``p`` (the model ties them on latency: its
    crossover is "every size"), which was faster below the measured crossover: the ring's time over the other's,
    paired size by size (a geometric mean over the sizes, a t interval across them, plus one timing's
    resolution)."""
    out = []
    for p in result.world_sizes:
        for small in ("tree", "recursive doubling"):
            if _rounds("ring", p) != _rounds(small, p):
                continue
            crossover = measured_crossover(result, p, small)
            n, t_small = result.times(p, small)
            n2, t_ring = result.times(p, "ring")
            if not len(n) or not np.array_equal(n, n2):
                continue
            below = [i for i, x in enumerate(n) if crossover is None or x < crossover]
            if not below:
                continue
            out.append(compare.paired_ratio(
                f"ring / {small} time below the crossover, p = {p} ({where})", [t_small[i] for i in below],
                [t_ring[i] for i in below], needed=compare.TIME_EFFECT, resolution=TIMING_RESOLUTION,
                basis=f"{len(below)} sizes, one timing each"))
    return out


def ring_tree_comparisons(rows: list[dict], where: str) -> list[compare.Comparison]:
    """Which view the ring-against-tree times at the largest size follow (:func:`ring_tree_rows`, largest p):
    the measured ratio over what independent links predict, and over what one shared bandwidth predicts. "same"
    for one of them and not the other says which view fits."""
    if not rows:
        return []
    r = rows[-1]
    return [compare.quantity_ratio(f"ring/tree at {_size(r['size_bytes'])}, p = {r['p']} ({where}): measured / "
                                   f"{view}", r["measured"] / r[key], 0.0, needed=compare.MODEL_EFFECT,
                                   resolution=TIMING_RESOLUTION, basis="one timing per algorithm")
            for view, key in (("independent links", "links_model"), ("one shared bandwidth", "shared_model"))]


def busbw_comparisons(rows: list[dict], where: str) -> list[compare.Comparison]:
    """Is the ring's busbw at the largest size the same across p, the property the convention is for? Its value
    at the largest p over the smallest (:func:`ring_tree_rows`)."""
    if len(rows) < 2:
        return []
    lo, hi = rows[0], rows[-1]
    return [compare.ratio(f"ring busbw at the largest size, p = {hi['p']} / p = {lo['p']} ({where})",
                          [lo["ring_busbw_GBps"]], [hi["ring_busbw_GBps"]], needed=compare.MODEL_EFFECT,
                          resolution=TIMING_RESOLUTION, basis="one timing per p")]


def small_large_comparisons(result: CollectivesResult, where: str) -> list[compare.Comparison]:
    """Small messages want few rounds, large ones few bytes per link: at the largest p, the ring's time over the
    faster of the tree and recursive doubling at the smallest and at the largest size."""
    p = max(result.world_sizes)
    n, t_ring = result.times(p, "ring")
    if not len(n):
        return []
    out = []
    for i, which in ((0, "smallest"), (len(n) - 1, "largest")):
        other = min(("tree", "recursive doubling"), key=lambda a: result.times(p, a)[1][i])
        out.append(compare.ratio(f"ring / {other} at the {which} size, {_size(n[i])}, p = {p} ({where})",
                                 [result.times(p, other)[1][i]], [t_ring[i]], needed=compare.TIME_EFFECT,
                                 resolution=TIMING_RESOLUTION, basis="one timing per algorithm"))
    return out


def links_comparisons(links: dict, host: CollectivesResult, gamma: float = 0.0) -> list[compare.Comparison]:
    """The section on independent links, decided: ring against tree on the host (and on the links where they
    ran), the links' crossovers against the model, and the tied rounds on the links."""
    out = ring_tree_comparisons(ring_tree_rows(host), "one host")
    if not links.get("ran"):
        return out
    result = links_collectives(links)
    alpha, beta = link_alpha_beta(links["pingpong"])
    return (ring_tree_comparisons(ring_tree_rows(result), "links") + out
            + crossover_comparisons(result, alpha, beta, gamma, "links") + tied_round_comparisons(result, "links"))


SERVER_MODES = ("sync", "async")


def server_comparisons(records: list) -> list[compare.Comparison]:
    """The straggler's cost per mode: updates/s with the straggler over without (one run each, read with one
    timing's resolution). Synchronous rounds wait for the slowest rank; asynchronous updates do not."""
    by = {(r["mode"], bool(r["straggler_rank"])): r for r in records}
    return [compare.ratio(f"parameter server ({mode}): updates/s with a straggler / without",
                          [by[(mode, False)]["updates_per_s"]], [by[(mode, True)]["updates_per_s"]],
                          needed=compare.SPEED_EFFECT, resolution=TIMING_RESOLUTION, basis="one run each")
            for mode in SERVER_MODES if (mode, False) in by and (mode, True) in by]
