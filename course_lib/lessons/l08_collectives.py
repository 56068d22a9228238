"""Lesson 08: the collectives of :mod:`course_lib.comm` measured against their alpha-beta-gamma model, extrapolated,
run on independent links, and decided as :class:`course_lib.compare.Comparison` rows."""

from __future__ import annotations

import itertools
import os
import tempfile

import numpy as np

from .. import compare
from ..comm import cost
from ..comm.bench import (ALLREDUCE_BENCH, BROADCAST_BENCH, CollectivesResult, PingPong, collectives_benchmark,
                         measure_gamma, pingpong_benchmark)
from ..comm.collectives import SCHEDULES, compare_with_backend
from ..comm.cost import ALLREDUCE_MODELS
from ..config import pick
from ..parallel.staleness import ServerConfig, parameter_server_worker
from ..perf.peaks import REFERENCE_PEAKS
from ..tables import Table

SMALL = {"recursive doubling": "RD", "tree": "tree"}  # the ring's rivals for small messages, and their short keys


def lesson_spec(profile: str, max_ranks: int, straggler_delay_s: float = 0.02, backend: str = "gloo") -> dict:
    """What lesson 08's one launch measures on groups of 2..``max_ranks`` ranks (parameter server: gloo only)."""
    if max_ranks < 2:
        raise ValueError(f"2+ ranks needed, got {max_ranks}")
    return {
        "groups": [list(range(p)) for p in range(2, max_ranks + 1)],
        "check_lengths": [1, 3, 5, 33] if profile == "smoke" else [1, 2, 3, 5, 7, 33, 1000],
        "pingpong_sizes": [2**k for k in range(0, pick(profile, full=23, smoke=13), 2)],
        "pingpong_iters": pick(profile, full=20, smoke=5), "repeats": pick(profile, full=5, smoke=2),
        "pingpong_warmup": 3,
        "sizes": [2**k for k in range(2, pick(profile, full=24, smoke=12) + 1, pick(profile, full=2, smoke=4))],
        "iters": pick(profile, full=8, smoke=2), "warmup": pick(profile, full=2, smoke=1), "segments": 8,
        "server_configs": [ServerConfig(mode=mode, straggler_rank=straggler, delay_s=straggler_delay_s,
                                        budget_s=pick(profile, full=2.0, smoke=0.3), lr=0.05)
                           for straggler in (None, 2 if max_ranks >= 3 else 1) for mode in ("sync", "async")]
        if backend == "gloo" else [],
    }


def lesson_worker(rank: int, world_size: int, spec: dict) -> dict:
    """Everything in one launch (each costs seconds of start-up): :func:`links_worker`'s sweeps and the rest."""
    return {"correctness": compare_with_backend(rank, world_size, spec["check_lengths"], groups=spec["groups"]),
            **links_worker(rank, world_size, spec),
            "broadcast": collectives_benchmark(rank, world_size, spec["sizes"], BROADCAST_BENCH, spec["iters"],
                                               spec["warmup"], spec["groups"], spec["segments"]),
            "gamma_s_per_byte": measure_gamma(),
            "parameter_server": parameter_server_worker(rank, world_size, spec["server_configs"])}


def measured_crossover(result: CollectivesResult, p: int, small: str = "recursive doubling") -> float | None:
    """The size from which the ring stays as fast as ``small`` (log-interpolated; 0.0: all sizes, None: never)."""
    n, t_small = result.times(p, small)
    n2, t_large = result.times(p, "ring")
    wins = t_large <= t_small if np.array_equal(n, n2) else np.array([])
    if not len(wins) or not wins[-1]:
        return None
    if wins.all():
        return 0.0
    i = int(np.nonzero(~wins)[0][-1])  # the last size ``small`` won
    a, b = np.log(n[i]), np.log(n[i + 1])
    d0, d1 = t_small[i] - t_large[i], t_small[i + 1] - t_large[i + 1]  # d0 < 0 <= d1
    return float(np.exp(a + (b - a) * (-d0) / (d1 - d0))) if d1 != d0 else float(n[i + 1])


def model_crossover(p: int, alpha: float, beta: float, gamma: float = 0.0,
                    small: str = "recursive doubling") -> float | None:
    """The size above which the ring is cheaper than ``small`` in the model (0.0: every size; None: none)."""
    f_small, f_large = ALLREDUCE_MODELS[small], ALLREDUCE_MODELS["ring"]
    if f_large(1.0, p, alpha, beta, gamma) <= f_small(1.0, p, alpha, beta, gamma):
        return 0.0
    return cost.crossover_size(f_small, f_large, p, alpha, beta, gamma)


def _size(n: float | None) -> str:
    if n is None:
        return "never"
    return "every size" if n == 0 else cost.human_bytes(float(round(n)))


def crossover_table(result: CollectivesResult, alpha: float, beta: float, gamma: float = 0.0,
                    seen: bool = False) -> Table:
    """Per ``p``, from which size the ring beats each of :data:`SMALL`, measured and modelled; with ``seen``, also
    with the alpha per round the all-reduces saw (on oversubscribed cores: many times the ping-pong's)."""
    rows = []
    for p in result.world_sizes:
        n, t_ring = result.times(p, "ring")
        a_seen = float(t_ring[0]) / _rounds("ring", p) if len(n) else None
        row = {"p": p}
        for small, k in SMALL.items():
            row[f"{k} measured"] = _size(measured_crossover(result, p, small))
            row[f"{k} model"] = _size(model_crossover(p, alpha, beta, gamma, small))
            if seen:
                row[f"{k} model (seen)"] = _size(model_crossover(p, a_seen, beta, gamma, small) if a_seen else None)
        rows.append({**row, "alpha seen (us)": a_seen * 1e6 if a_seen else None} if seen else row)
    return _table(rows)


def _table(rows: list[dict], title: str = "") -> Table:
    return Table(list(rows[0]) if rows else [], rows, title)


def bandwidth_table(result: CollectivesResult, p: int) -> Table:
    """algbw and busbw (GB/s, nccl-tests' convention) of the course's ring and of the backend, per size."""
    at = {(r["algorithm"], r["size_bytes"]): r for r in result.rows if r["p"] == p}
    rows = [{"size": cost.human_bytes(n), "ring algbw": ring["algbw_GBps"], "ring busbw": ring["busbw_GBps"],
             "backend algbw": back["algbw_GBps"], "backend busbw": back["busbw_GBps"],
             "ring/backend": ring["busbw_GBps"] / back["busbw_GBps"]}
            for n in sorted({n for a, n in at if a == "ring"})
            if (ring := at.get(("ring", n))) and (back := at.get(("backend", n)))]
    return _table(rows, f"p = {p}: busbw = algbw x {cost.allreduce_busbw_factor(p):.3g}")


MEASURED_LINK = "this machine (measured)"  # the name :func:`links` gives the learner's own link
LINK_GPU = "H100 SXM"  # the GPU the quoted interconnects join (lesson 09's table): their reductions run on it


def links(alpha: float, beta: float, gamma: float = 0.0) -> dict[str, tuple[float, float, float]]:
    """name -> (alpha, beta, gamma): the learner's link and the quoted ones (``a += b`` on :data:`LINK_GPU`)."""
    gpu_gamma = 3.0 / REFERENCE_PEAKS[LINK_GPU].memory_bandwidth  # a += b reads a and b, writes a
    return {MEASURED_LINK: (alpha, beta, gamma),
            **{f"{name} (quoted)": (q["alpha_s"], 1.0 / q["bandwidth_Bps"], gpu_gamma)
               for name, q in cost.QUOTED_INTERCONNECTS.items()}}


def extrapolation_table(link_params: dict, sizes_bytes=(8 * 2**10, 100 * 2**20), ps=(8, 64, 1024)) -> Table:
    """Each algorithm's modelled all-reduce time (ms) and the cheapest, per link (with its own gamma), size, p."""
    algos, rows = dict(ALLREDUCE_MODELS, rabenseifner=cost.rabenseifner_allreduce_time), []
    for (link, (a, b, gamma)), n, p in itertools.product(link_params.items(), sizes_bytes, ps):
        times = {k: f(n, p, a, b, gamma) for k, f in algos.items()}
        rows.append({"link": link, "size": cost.human_bytes(n), "p": p,
                     **{f"{k} (ms)": v * 1e3 for k, v in times.items()}, "cheapest": min(times, key=times.get)})
    return _table(rows)


def plot_links(link_params: dict, sizes_bytes) -> list:
    """:func:`course_lib.comm.plots.plot_extrapolation` once per ``gamma`` (it prices one per figure)."""
    from ..comm.plots import plot_extrapolation

    gammas = dict.fromkeys(g for _, _, g in link_params.values())
    return [plot_extrapolation({k: (a, b) for k, (a, b, g) in link_params.items() if g == gamma}, sizes_bytes,
                               gamma=gamma)[0] for gamma in gammas]


LINK_RATE = "1gbit"  # the virtual links (tc's units): slow enough that the link, not the 2 cores, sets the pace


def links_spec(profile: str, nodes: int) -> dict:
    """Sizes around the model's crossovers on ``nodes`` :data:`LINK_RATE` links (2 MiB on 4 ranks: 70 ms)."""
    if nodes < 2:
        raise ValueError(f"2+ nodes needed, got {nodes}")
    return {"groups": [list(range(p)) for p in range(2, nodes + 1)],
            "sizes": [2**k for k in pick(profile, full=(10, 13, 16, 19, 21), smoke=(10, 16))],
            # up to 4 MiB: the token buckets let ~4 ms of the rate through unshaped (cluster._burst_bytes)
            "pingpong_sizes": [2**k for k in pick(profile, full=(0, 10, 14, 18, 20, 22), smoke=(0, 14, 17))],
            "pingpong_iters": pick(profile, full=4, smoke=3), "repeats": pick(profile, full=3, smoke=1),
            "pingpong_warmup": 1, "iters": pick(profile, full=5, smoke=2), "warmup": 1}


def links_worker(rank: int, world_size: int, spec: dict) -> dict:
    return {"pingpong": pingpong_benchmark(rank, world_size, spec["pingpong_sizes"], spec["pingpong_iters"],
                                           spec["repeats"], spec["pingpong_warmup"]),
            "allreduce": collectives_benchmark(rank, world_size, spec["sizes"], ALLREDUCE_BENCH, spec["iters"],
                                               spec["warmup"], spec["groups"])}


def measure_on_links(spec: dict, nodes: int, rate: str = LINK_RATE, timeout_s: float = 300.0) -> dict:
    """:func:`links_worker` on a virtual cluster brought up here; ``{"ran": False, "why": ...}`` where it cannot."""
    from .. import cluster as vc
    from ..nodes import VirtualNodes

    why = vc.unavailable_reason()
    if why is not None:
        return {"ran": False, "why": why}
    try:
        with (tempfile.TemporaryDirectory(prefix="l08-", ignore_cleanup_errors=True) as workdir,
              vc.up(f"l08-{os.getpid()}", nodes=nodes, rate=rate) as cluster):
            out = VirtualNodes(cluster, workdir).run(f"{__name__}:links_worker", [spec], nnodes=nodes, nproc=1,
                                                     timeout_s=timeout_s)
    except vc.ClusterError as err:  # e.g. root without CAP_NET_ADMIN in a container
        return {"ran": False, "why": str(err)}
    return {"ran": True, "rate": rate, "rate_bits_per_s": vc.parse_rate(rate), "nodes": nodes, **out}


def links_collectives(links: dict) -> CollectivesResult:
    return CollectivesResult(links["allreduce"], f"gloo on {links.get('nodes', '?')} virtual nodes")


def schedule_bytes(algorithm: str, p: int, n_bytes: int) -> tuple[float, int]:
    """Bytes an all-reduce waits for on links of their own, and bytes all ranks send, counted on its schedule."""
    schedule = SCHEDULES[f"{algorithm} all-reduce"](p, max(1, n_bytes // 4))
    return cost.schedule_time(schedule, 0.0, 1.0), sum(4 * t.count for rnd in schedule.rounds for t in rnd)


def ring_tree_rows(result: CollectivesResult) -> list[dict]:
    """Per ``p``, at the largest size: ring/tree measured and as the two views of :func:`schedule_bytes` predict."""
    rows = []
    for p in result.world_sizes:
        n, t_ring = result.times(p, "ring")
        n2, t_tree = result.times(p, "tree")
        if not len(n) or not np.array_equal(n, n2):
            continue
        (ring_path, ring_sent), (tree_path, tree_sent) = (schedule_bytes(a, p, int(n[-1])) for a in ("ring", "tree"))
        ring_gbps = ring_sent / float(t_ring[-1]) / 1e9
        rows.append({"p": p, "size_bytes": int(n[-1]), "measured": float(t_ring[-1] / t_tree[-1]),
                     "links_model": ring_path / tree_path, "shared_model": ring_sent / tree_sent,
                     "ring_GBps": ring_gbps, "ring_busbw_GBps": ring_gbps / p,
                     "tree_GBps": tree_sent / float(t_tree[-1]) / 1e9})
    return rows


def ring_tree_table(host: CollectivesResult, links: dict) -> Table:
    on_links = [(f"{links['nodes']} x {links['rate']}", links_collectives(links))] if links["ran"] else []
    return _table([{"on": name, "p": r["p"], "size": _size(r["size_bytes"]), "ring/tree": r["measured"],
                    "links model": r["links_model"], "shared model": r["shared_model"], "ring GB/s": r["ring_GBps"],
                    "tree GB/s": r["tree_GBps"], "ring busbw": r["ring_busbw_GBps"]}
                   for name, result in [("host", host)] + on_links for r in ring_tree_rows(result)])


def link_alpha_beta(pingpong_rows: list[dict]) -> tuple[float, float]:
    """A shaped link's alpha and its beta from the largest message alone: a fit over all sizes overstates the rate
    that the token buckets let through (measured on 1 Gbit/s: 2.5 Gbit/s; the 4 MiB message alone: 1.07)."""
    alpha, _ = PingPong(pingpong_rows).alpha_beta()
    n = max(r["size_bytes"] for r in pingpong_rows)
    t = float(np.median([r["one_way_s"] for r in pingpong_rows if r["size_bytes"] == n]))
    return alpha, max(t - alpha, 0.01 * t) / n


def _rounds(algorithm: str, p: int) -> int:
    return len(SCHEDULES[f"{algorithm} all-reduce"](p, 64).rounds)


def alpha_beta_table(saved06: dict | None, alpha: float, beta: float) -> Table:
    """The ping-pong's alpha and bandwidth beside lesson 06's several-rank all-reduce fit read as a ring."""
    rows = [{"source": "ping-pong", "alpha (us)": alpha * 1e6, "1/beta (GB/s)": 1 / beta / 1e9}]
    if saved06 and saved06.get("allreduce_alpha_s") is not None and saved06.get("world_size", 1) > 1:
        p = saved06["world_size"]
        a06, b06 = cost.link_alpha_beta_from_ring_fit(saved06["allreduce_alpha_s"],
                                                      saved06["allreduce_beta_s_per_byte"], p)
        rows.append({"source": f"lesson 06, p = {p}", "alpha (us)": a06 * 1e6,
                     "1/beta (GB/s)": 1 / b06 / 1e9 if b06 > 0 else None})
    return _table(rows)


TIMING_RESOLUTION = 0.2  # how much a ratio of two single timings moves between runs on a shared machine


def _timed(question: str, a: float, b: float, needed: float = compare.TIME_EFFECT) -> compare.Comparison:
    return compare.ratio(question, [a], [b], needed=needed, resolution=TIMING_RESOLUTION, basis="one timing each")


def crossover_comparisons(result: CollectivesResult, alpha: float, beta: float, gamma: float,
                          where: str) -> list[compare.Comparison]:
    """Per ``p`` and rival, the measured crossover over the modelled one, to one step of the sweep."""
    sizes = sorted({r["size_bytes"] for r in result.rows})
    step = max([b / a for a, b in zip(sizes, sizes[1:])] or [2.0])
    out = []
    for p in result.world_sizes:
        for small in SMALL:
            m, x = measured_crossover(result, p, small), model_crossover(p, alpha, beta, gamma, small)
            if m and x:
                out.append(compare.quantity_ratio(f"crossover ring/{small}, p = {p}, {where}: measured/model", m / x,
                                                  0.0, needed=compare.MODEL_EFFECT, resolution=step - 1,
                                                  basis=f"sweep step {step:g}x"))
    return out


def tied_round_comparisons(result: CollectivesResult, where: str) -> list[compare.Comparison]:
    """Where the model ties the ring's latency with a rival's (as many rounds), ring/rival below the crossover."""
    out = []
    for p in result.world_sizes:
        for small in ("tree", "recursive doubling"):
            (n, t_small), (n2, t_ring) = result.times(p, small), result.times(p, "ring")
            if _rounds("ring", p) != _rounds(small, p) or not len(n) or not np.array_equal(n, n2):
                continue
            crossover = measured_crossover(result, p, small)
            below = [i for i, x in enumerate(n) if crossover is None or x < crossover]
            if below:
                out.append(compare.paired_ratio(f"ring/{small} below crossover, p = {p}, {where}", t_small[below],
                                                t_ring[below], needed=compare.TIME_EFFECT,
                                                resolution=TIMING_RESOLUTION, basis=f"{len(below)} sizes"))
    return out


def busbw_comparisons(rows: list[dict], where: str) -> list[compare.Comparison]:
    """The ring's busbw at the largest size, largest p over smallest: the convention means it to be the same."""
    if len(rows) < 2:
        return []
    lo, hi = rows[0], rows[-1]
    return [_timed(f"ring busbw, p = {hi['p']}/p = {lo['p']}, {where}", lo["ring_busbw_GBps"],
                   hi["ring_busbw_GBps"], compare.MODEL_EFFECT)]


def small_large_comparisons(result: CollectivesResult, where: str) -> list[compare.Comparison]:
    """At the largest p, the ring's time over the faster rival's, at the smallest and the largest size."""
    p = max(result.world_sizes)
    n, t_ring = result.times(p, "ring")
    if not len(n):
        return []
    out = []
    for i in (0, len(n) - 1):
        other = min(SMALL, key=lambda a: result.times(p, a)[1][i])
        out.append(_timed(f"ring/{other} at {_size(n[i])}, p = {p}, {where}", result.times(p, other)[1][i], t_ring[i]))
    return out


def ring_tree_comparisons(rows: list[dict], where: str) -> list[compare.Comparison]:
    """At the largest ``p``, measured ring/tree over each view's prediction: which view the times follow."""
    return [_timed(f"ring/tree, p = {r['p']}, {where}: measured/{view}", r[key], r["measured"], compare.MODEL_EFFECT)
            for r in rows[-1:] for view, key in (("links", "links_model"), ("shared", "shared_model"))]


def links_comparisons(links: dict, host: CollectivesResult, gamma: float = 0.0) -> list[compare.Comparison]:
    out = ring_tree_comparisons(ring_tree_rows(host), "host")
    if not links["ran"]:
        return out
    result = links_collectives(links)
    alpha, beta = link_alpha_beta(links["pingpong"])
    return (ring_tree_comparisons(ring_tree_rows(result), "links") + out
            + crossover_comparisons(result, alpha, beta, gamma, "links") + tied_round_comparisons(result, "links"))


def server_comparisons(records: list) -> list[compare.Comparison]:
    """Per mode, updates/s with the straggler over without: synchronous rounds wait for it, asynchronous ones not."""
    by = {(r["mode"], bool(r["straggler_rank"])): r["updates_per_s"] for r in records}
    return [_timed(f"{mode} updates/s: straggler/none", by[(mode, False)], by[(mode, True)], compare.SPEED_EFFECT)
            for mode in ("sync", "async") if (mode, False) in by and (mode, True) in by]
