"""What lesson 13 measures on many nodes, and its comparisons.

The nodes (SLURM, the virtual cluster of course_lib/cluster.py, or neither: lesson 09's model predicts the
same tables, labelled as predictions) and a node lost mid-run are :mod:`.l13_nodes`; the two-level
all-reduce :mod:`.l13_hierarchy`; the input's placement :mod:`.l13_placement`. This module:

1. the all-reduce over the links: lesson 08's alpha-beta fit of the sweep, turned into one link's rate
   (:func:`link_rate`), against the rate the link was set to and the loopback fit (:func:`link_comparisons`);
2. the seed talk's comparison: 1 node x W processes against W nodes x 1 on a slow link, at gradient
   accumulation k = 1 to 128 with the micro-batch fixed (so the global batch grows with k and each
   all-reduce is paid once per k micro-batches): samples per second per layout (:func:`layout_rows`), lesson
   09's step model fitted on one node's steps (:func:`step_fit`, :func:`predicted_layouts`), and whether the
   slow link stops mattering within the ks run (:func:`layout_comparisons`);
3. time to target per layout and k: lesson 02's measured steps to target at each layout's global batch x that
   layout's time per step (:func:`ttt_rows`, :func:`ttt_table`); no run here trains to the target.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import replace

from .. import cluster as vc
from .. import compare
from ..comm import cost
from ..metrics import jackknife_stderr
from ..tables import Table

# well past where lesson 09's model, fitted on a quiet 2-core machine's steps, puts 4 nodes on 2 Gbit/s links at 80 %
# of one node's throughput (k of about 10; on 100 Mbit/s links about 350, past any budget)
K_VALUES = (1, 2, 4, 8, 16, 32, 64, 128)
REPEATS = 3  # runs at the smallest and the largest k: the spread of the crossover rows
LINK_TOLERANCE = 0.35  # the fitted rate within 35 % of the set rate (TCP/IP headers take ~4 %, the rest is noise)
HIDDEN_AT = 0.8  # the slow link "stops mattering" once 4 nodes x 1 run at >= 80 % of 1 node x 4's throughput
TIMING_RESOLUTION = 0.10  # a time from a few timed steps, or one median of a few repeats, on a shared machine


def one_node(world_size: int) -> str:
    return f"1 node x {world_size}"


def many_nodes(world_size: int) -> str:
    return f"{world_size} nodes x 1"


# --------------------------------------------------------------------------- 1. one link's alpha-beta


def nodes_worker(rank: int, world_size: int, sizes: list[int], iters: int, warmup: int, cfgs: list[dict],
                 spec: dict) -> dict:
    """One launch, both measurements (a launch costs seconds of start-up on every node): the all-reduce sweep
    over the ranks' links, then NeuMF at each config. A worker for ``torchrun -m course_lib.run``."""
    from ..comm.bench import allreduce_benchmark
    from ..train.workers import ncf_runs

    return {"sweep": allreduce_benchmark(rank, world_size, sizes, iters, warmup), "runs": ncf_runs(rank, world_size,
                                                                                                    cfgs, spec)}


def run_ks(ks=K_VALUES, repeats: int = REPEATS) -> list[int]:
    """The ks in the order they run: each once, then the smallest and the largest ``repeats - 1`` times more,
    alternating (a slow moment of the machine then falls on no one k's repeats alone)."""
    ks = list(ks)
    return ks + [k for _ in range(repeats - 1) for k in (ks[0], ks[-1])]


def measure(runner, sizes: list[int], micro_batch: int, steps: int, spec: dict, base_cfg: dict | None = None,
            ks=K_VALUES, iters: int = 5, warmup: int = 1, world_size: int = 4, repeats: int = REPEATS) -> dict:
    """1 node x 4 and 4 nodes x 1, each one launch of :func:`nodes_worker`: ``{"near", "far"}`` (the sweep within
    a node, over loopback, and between nodes, over the links) and ``"layouts"`` (rows of :func:`layout_rows`)."""
    ks = run_ks(ks, repeats)
    cfgs = layout_configs(micro_batch, world_size, steps, base_cfg, ks)
    out = {"layouts": []}
    for key, layout, nnodes, nproc in (("near", one_node(world_size), 1, world_size),
                                       ("far", many_nodes(world_size), world_size, 1)):
        got = runner.run("course_lib.lessons.l13_multi_node:nodes_worker", [list(sizes), iters, warmup, cfgs, spec],
                         nnodes=nnodes, nproc=nproc)
        out[key] = got["sweep"]
        out["layouts"] += layout_rows(layout, got["runs"], ks, source=runner.path)
    return out


def step_fit(layouts: list[dict], near: dict, grad_bytes: int, micro_batch: int, world_size: int = 4) -> dict:
    """Lesson 09's step model fitted on 1 node x W's runs: a line ``step = a + c k`` through every run's step time
    (weighted 1 / step^2: the timing noise is relative), ``c / micro_batch`` the compute per sample per rank and ``a``
    less the loopback all-reduce the per-step overhead (the optimizer step, the loop). ``{"compute_s_per_sample",
    "compute_se", "overhead_s", "overhead_se", "df"}``; standard errors NaN with fewer than three runs."""
    pts = [(r["k"], s) for r in layouts if r["layout"] == one_node(world_size) for s in r.get("step_s_runs",
                                                                                              [r["step_s"]])]
    xs, ys = [k for k, _ in pts], [s for _, s in pts]
    if len(set(xs)) < 2:
        raise ValueError(f"the model's compute needs '{one_node(world_size)}' rows at two ks at least")
    fit = compare.line_fit(xs, ys, weights=[1 / y ** 2 for y in ys])
    t_ar = cost.ring_allreduce_time(grad_bytes, world_size, near["alpha_s"], near["beta_s_per_byte"])
    return {"compute_s_per_sample": max(fit.slope, 0.0) / micro_batch, "compute_se": fit.slope_se / micro_batch,
            "overhead_s": max(fit.intercept - t_ar, 0.0), "overhead_se": fit.intercept_se, "df": fit.df}


def step_fit_table(fit: dict):
    """:func:`step_fit`'s two numbers with their standard errors and t intervals."""
    basis = "weighted line through one node's step times over k"
    rows = [compare.estimate("compute per sample per rank", fit["compute_s_per_sample"] * 1e6,
                             fit["compute_se"] * 1e6, df=fit["df"], unit="us", basis=basis),
            compare.estimate("per-step overhead besides the all-reduce", fit["overhead_s"] * 1e3,
                             fit["overhead_se"] * 1e3, df=fit["df"], unit="ms", basis=basis)]
    return compare.estimates_table(rows, title="lesson 09's step model, fitted on one node's steps")


def link_rate(rows: list[dict], ranks: int = 2) -> dict:
    """Lesson 08's fit of the sweep, read as one link: ``{"alpha_s", "beta_s_per_byte", "rate_bits_per_s"}``.
    A bandwidth-optimal all-reduce of n bytes (the ring, or halving-doubling) sends ``2 (p-1)/p n`` bytes out of
    every rank, one rank per node here: with 2 ranks n bytes each way over the link (n/2 to reduce, n/2 to gather).
    :func:`course_lib.comm.cost.link_alpha_beta_from_ring_fit` undoes that factor."""
    alpha, beta = cost.fit_alpha_beta([r["size_bytes"] for r in rows], [r["time_s"] for r in rows])
    a_link, b_link = cost.link_alpha_beta_from_ring_fit(alpha, beta, ranks)
    return {"alpha_s": a_link, "beta_s_per_byte": b_link, "rate_bits_per_s": 8 / b_link if b_link > 0 else None,
            "fit": cost.fit_text(alpha, beta), **fit_errors(rows, ranks)}


def fit_errors(rows: list[dict], ranks: int = 2) -> dict:
    """The jackknife standard errors of :func:`link_rate`'s per-message alpha and (relative) of its rate: the robust
    fit redone without each size in turn. ``{"alpha_err_s", "rate_rel_err", "sizes"}``, the errors None with fewer
    than 3 distinct sizes (no fit is left to redo) or no bandwidth term."""
    sizes = sorted({r["size_bytes"] for r in rows})
    if len(sizes) < 3:
        return {"alpha_err_s": None, "rate_rel_err": None, "sizes": len(sizes)}
    alphas, betas = [], []
    for drop in sizes:
        kept = [r for r in rows if r["size_bytes"] != drop]
        a, b = cost.fit_alpha_beta([r["size_bytes"] for r in kept], [r["time_s"] for r in kept])
        a_link, b_link = cost.link_alpha_beta_from_ring_fit(a, b, ranks)
        alphas.append(a_link)
        betas.append(b_link)
    mean_b = sum(betas) / len(betas)
    return {"alpha_err_s": jackknife_stderr(alphas), "sizes": len(sizes),
            "rate_rel_err": jackknife_stderr(betas) / mean_b if mean_b > 0 and min(betas) > 0 else None}


def link_comparisons(near: dict, far: dict, set_rate_bits_per_s: float | None, path: str) -> list[compare.Comparison]:
    """The fits against what they should find. On the virtual cluster, the links' fitted rate over the rate they
    were set to (``same`` within :data:`LINK_TOLERANCE`: the fit recovers the link). Where both fits were measured,
    the links' per-message cost minus loopback's: the virtual cluster emulates no latency, so a difference resolved
    either way says the two intercepts are not one per-message cost of gloo's processes on these cores."""
    out = []
    if path == "model":
        return out
    rate, rel = far.get("rate_bits_per_s"), far.get("rate_rel_err")
    if path == "virtual" and set_rate_bits_per_s and rate and rel:
        out.append(compare.quantity_ratio("link rate, fitted / set", rate / set_rate_bits_per_s, rel,
                                          needed=LINK_TOLERANCE, df=far["sizes"] - 1, n=str(far["sizes"]),
                                          basis=f"jackknife over {far['sizes']} message sizes"))
    e_near, e_far = near.get("alpha_err_s"), far.get("alpha_err_s")
    if e_near is not None and e_far is not None and e_near + e_far > 0:
        out.append(compare.difference("per-message cost, the links - loopback", near["alpha_s"] * 1e6, e_near * 1e6,
                                      far["alpha_s"] * 1e6, e_far * 1e6, needed=compare.EXACT, unit="us",
                                      df=min(near["sizes"], far["sizes"]) - 1,
                                      basis="jackknife over the message sizes"))
    return out


def link_table(near: dict, far: dict, nodes: int, measured: bool):
    """The two fits, within a node and across the links (``near``, ``far``: the dicts of :func:`link_rate` or
    :func:`assumed_link`); ``measured``: False when no cluster measured them (assumed)."""
    t = Table(["where", "latency per message (us)", "rate", "fit of the whole all-reduce"],
              title=f"lesson 08's alpha-beta fit, {nodes} ranks ({'measured' if measured else 'ASSUMED: no cluster'})")
    for where, fit in ((f"{one_node(nodes)} (loopback)", near), (f"{many_nodes(nodes)} (the links)", far)):
        t.add(**{"where": where, "latency per message (us)": fit["alpha_s"] * 1e6,
                 "rate": _bits(fit["rate_bits_per_s"]), "fit of the whole all-reduce": fit["fit"]})
    return t


def _bits(rate: float | None) -> str:
    if rate is None:
        return "no rate"
    return f"{rate / 1e9:.2f} Gbit/s" if rate >= 1e9 else f"{rate / 1e6:.0f} Mbit/s"


# --------------------------------------------------------------------------- 2. 1 node x 4 vs 4 nodes x 1


def layout_configs(micro_batch: int, world_size: int, steps: int, base_cfg: dict | None = None,
                   ks=K_VALUES) -> list[dict]:
    """One TrainConfig dict per k: the micro-batch fixed, the global batch ``world_size * micro_batch * k``."""
    return [{**(base_cfg or {}), "global_batch_size": world_size * micro_batch * k, "micro_batch_size": micro_batch,
             "max_steps": steps, "stop_at_target": False, "target_hr": None} for k in ks]


def layout_rows(layout: str, records: list[dict], ks=K_VALUES, source: str = "virtual") -> list[dict]:
    """One row per k from a launch's records (``ks``: each record's k, repeats included): the mean time per
    optimizer step, its samples per second, and each run's step time (``step_s_runs``)."""
    runs: dict[int, list[dict]] = {}
    for k, r in zip(ks, records):
        runs.setdefault(k, []).append(r)
    out = []
    for k, rs in runs.items():
        steps = [r["train_time_s"] / max(1, r["steps"]) for r in rs]
        batch, step = rs[0]["config"]["global_batch_size"], sum(steps) / len(steps)
        out.append({"layout": layout, "k": k, "global_batch": batch, "samples_per_s": batch / step, "step_s": step,
                    "step_s_runs": steps, "source": source})
    return out


def predicted_layouts(compute_s_per_sample: float, grad_bytes: int, micro_batch: int, near: tuple[float, float],
                      far: tuple[float, float], ks=K_VALUES, world_size: int = 4,
                      overhead_s: float = 0.0) -> list[dict]:
    """Lesson 09's view of a data-parallel step: ``k * b * t_sample`` of compute and ``overhead_s`` per step, then one
    ring all-reduce of the gradients over the node's own links (``near``: alpha, beta per byte) or between nodes
    (``far``)."""
    rows = []
    for layout, (alpha, beta) in ((one_node(world_size), near), (many_nodes(world_size), far)):
        for k in ks:
            step = (overhead_s + k * micro_batch * compute_s_per_sample
                    + cost.ring_allreduce_time(grad_bytes, world_size, alpha, beta))
            rows.append({"layout": layout, "k": k, "global_batch": world_size * micro_batch * k,
                         "samples_per_s": world_size * micro_batch * k / step, "step_s": step, "source": "model"})
    return rows


def layout_table(rows: list[dict], predicted: list[dict]):
    """One row per k of the model (every k run): each layout's step time, measured (none without a cluster) and
    lesson 09's model, and W nodes x 1's throughput over 1 node x W's, both ways."""
    cols = ["k", "global batch", "1 node, step (ms)", "1 node, model (ms)", "nodes, step (ms)", "nodes, model (ms)",
            "nodes / 1 node", "nodes / 1 node, model"]
    t = Table(cols, title="NeuMF, micro-batch fixed: W nodes x 1 against 1 node x W, measured and lesson 09's model")
    got = {(r["layout"].startswith("1 node x "), r["k"]): r["step_s"] for r in rows}
    pred = {(r["layout"].startswith("1 node x "), r["k"]): r["step_s"] for r in predicted}
    ratios, model_ratios = layout_ratios(rows), layout_ratios(predicted)
    ms = lambda v: f"{v * 1e3:.1f}" if v is not None else "—"  # noqa: E731
    for k in sorted({k for _, k in pred}):
        t.add(**dict(zip(cols, [k, f"{next(r['global_batch'] for r in predicted if r['k'] == k):,}",
                                ms(got.get((True, k))), ms(pred.get((True, k))), ms(got.get((False, k))),
                                ms(pred.get((False, k))), f"{ratios[k]:.0%}" if k in ratios else "—",
                                f"{model_ratios[k]:.0%}" if k in model_ratios else "—"])))
    return t


def layout_ratios(rows: list[dict]) -> dict[int, float]:
    """k -> throughput of W nodes x 1 over 1 node x W."""
    near = {r["k"]: r["samples_per_s"] for r in rows if r["layout"].startswith("1 node x ")}
    far = {r["k"]: r["samples_per_s"] for r in rows if r["layout"].endswith(" nodes x 1")}
    return {k: far[k] / near[k] for k in near if k in far}


def extrapolated_k(rows: list[dict], hidden_at: float = HIDDEN_AT) -> tuple[float, int, int] | None:
    """A line ``step_s = a + c k`` through each layout's rows, and the k at which W nodes x 1 run at ``hidden_at`` of
    1 node x W's throughput (the ratio of their step times): ``(k, the next power of two, its global batch)``, or None
    where the lines never get there or a layout has fewer than two ks."""
    fits, per_k = {}, {}
    for side, pick in (("near", lambda n: n.startswith("1 node x ")), ("far", lambda n: n.endswith(" nodes x 1"))):
        rs = [r for r in rows if pick(r["layout"]) and r.get("step_s")]
        fits[side] = compare.line_fit([r["k"] for r in rs], [r["step_s"] for r in rs]) if len(rs) >= 2 else None
        per_k.update({r["k"]: r["global_batch"] / r["k"] for r in rs})
    if fits["near"] is None or fits["far"] is None or not per_k:
        return None
    (a_n, c_n), (a_f, c_f) = ((f.intercept, f.slope) for f in (fits["near"], fits["far"]))
    gain = c_n - hidden_at * c_f
    if gain <= 0 or c_n <= 0:
        return None
    k = max(1.0, (hidden_at * a_f - a_n) / gain)
    k2 = 1 << math.ceil(math.log2(k))
    return k, k2, int(round(k2 * next(iter(per_k.values()))))


def private_workdir() -> str:
    """A private folder (0700) for the lesson's run files (on the virtual cluster the nodes share the host's
    file system; on SLURM use a folder on the shared file system instead)."""
    return tempfile.mkdtemp(prefix="l13-")


def hiding_k(compute_s_per_sample: float, grad_bytes: int, micro_batch: int, near: tuple[float, float],
             far: tuple[float, float], hidden_at: float = HIDDEN_AT, ks=(1, 2, 4, 8, 16, 32, 64),
             world_size: int = 4) -> int | None:
    """The smallest k at which lesson 09's model has 4 nodes x 1 at ``hidden_at`` of 1 node x 4's throughput
    (None: no k of ``ks`` gets there). Exercise 13's reference."""
    ratios = layout_ratios(predicted_layouts(compute_s_per_sample, grad_bytes, micro_batch, near, far, ks, world_size))
    return next((k for k in ks if ratios[k] >= hidden_at), None)


# --------------------------------------------------------------------------- 2b. time to target per layout and k

# without lesson 02's curve: the linear-scaling ideal through this (batch, steps) point -- an ASSUMPTION, not a
# measurement (about what lesson 02's smallest batch takes on the full profile's data; its shape is all that matters
# here: it gives both layouts the same steps at each k)
ASSUMED_STEPS = (256, 16000)


def lesson02_steps(saved: dict | None, profile: str | None = None) -> tuple[list[tuple[int, int]] | None, str]:
    """``(points, line)``: lesson 02's fewest steps to target at each batch it measured (``[(batch, steps)]``,
    sorted; its best rule at each batch), and the line that says where the steps come from. ``points`` is None
    when the result is missing, of another profile (other data) or has fewer than two batches that reached the
    target: then :func:`steps_at` takes the :data:`ASSUMED_STEPS` ideal, and the line says so."""
    b0, s0 = ASSUMED_STEPS
    assumed = (f"; ASSUMED instead (not a measurement): the linear-scaling ideal, {s0:,} steps at batch {b0:,} and "
               "half the steps at every doubling")
    if not saved or not saved.get("rows"):
        return None, "lesson 02's steps to target are not here (run lesson 02 first to use its curve)" + assumed
    if profile and saved.get("profile") != profile:
        return None, (f"lesson 02's steps to target are of the {saved.get('profile')!r} profile, this run is "
                      f"{profile!r} (other data)" + assumed)
    best: dict[int, int] = {}
    for r in saved["rows"]:
        if r.get("steps to target"):
            b = int(r["batch size"])
            best[b] = min(best.get(b, r["steps to target"]), r["steps to target"])
    pts = sorted(best.items())
    if len(pts) < 2:
        return None, (f"only {len(pts)} batch size(s) of lesson 02 reached the target; interpolating needs two"
                      + assumed)
    listing = ", ".join(f"{s:,} at {b:,}" for b, s in pts)
    return pts, f"steps to target from lesson 02's runs here (the fewest at each batch): {listing}"


def steps_at(points: list[tuple[int, int]] | None, batch: int) -> tuple[float | None, str]:
    """Steps to target at ``batch`` from lesson 02's points: ``"measured"`` at one of its batches, ``"interpolated"``
    (a straight line in log steps against log batch between the two neighbours) between them, None with the
    reason outside them (no extrapolation: lesson 02's curve bends where it leaves perfect scaling). Without
    points, the :data:`ASSUMED_STEPS` ideal (``"assumed"``)."""
    if points is None:
        b0, s0 = ASSUMED_STEPS
        return s0 * b0 / batch, "assumed"
    at = dict(points)
    if batch in at:
        return float(at[batch]), "measured"
    lo, hi = points[0][0], points[-1][0]
    if not lo < batch < hi:
        return None, f"refused: batch {batch:,} is outside lesson 02's {lo:,}-{hi:,}"
    (b0, s0), (b1, s1) = next((p, q) for p, q in zip(points, points[1:]) if p[0] < batch < q[0])
    w = math.log(batch / b0) / math.log(b1 / b0)
    return math.exp(math.log(s0) + w * math.log(s1 / s0)), "interpolated"


def ttt_rows(layouts: list[dict], points: list[tuple[int, int]] | None) -> list[dict]:
    """Time to target per row of :func:`layout_rows` or :func:`predicted_layouts`: the steps to target at that
    row's global batch (:func:`steps_at`) x the row's time per step. No new training: the steps are lesson 02's."""
    out = []
    for r in layouts:
        steps, how = steps_at(points, r["global_batch"])
        out.append({"layout": r["layout"], "k": r["k"], "global_batch": r["global_batch"], "step_s": r["step_s"],
                    "steps": steps, "steps_how": how, "source": r["source"],
                    "time_to_target_s": steps * r["step_s"] if steps is not None else None})
    return out


def ttt_ratios(rows: list[dict]) -> dict[int, float]:
    """k -> time to target of W nodes x 1 over 1 node x W (the ks where both have one)."""
    near = {r["k"]: r["time_to_target_s"] for r in rows if r["layout"].startswith("1 node x ") and
            r["time_to_target_s"]}
    far = {r["k"]: r["time_to_target_s"] for r in rows if r["layout"].endswith(" nodes x 1") and
           r["time_to_target_s"]}
    return {k: far[k] / near[k] for k in sorted(near) if k in far}


def ttt_title(points) -> str:
    where = ("lesson 02's measured steps to target (log-log interpolated between its batches, refused outside them)"
             if points else "the ASSUMED linear-scaling steps (lesson 02's curve is not here)")
    return ("NeuMF, time to target = steps to target at the global batch (world x micro-batch x k), from "
            f"{where}, x the layout's time per step at that k: measured, and lesson 09's model")


def ttt_table(measured: list[dict], model: list[dict], points):
    """Measured and lesson 09's model side by side, one row per layout and k (the model's rows give the keys: it
    has every layout and k; the measured columns are empty without a cluster). "samples vs first k": the samples to
    the target over the smallest k's, what accumulation cost in steps (1: a k-fold batch took k-fold fewer)."""
    cols = ["layout", "k", "global batch", "steps to target", "steps", "samples vs first k", "step (ms), measured",
            "to target (s), measured", "nodes / 1 node, measured", "step (ms), model", "to target (s), model",
            "nodes / 1 node, model"]
    t = Table(cols, title=ttt_title(points))
    got = {(r["layout"], r["k"]): r for r in measured}
    ratios = {"measured": ttt_ratios(measured), "model": ttt_ratios(model)}
    first = {}
    for p in sorted(model, key=lambda p: p["k"]):
        if p["steps"] is not None:
            first.setdefault(p["layout"], p["steps"] * p["global_batch"])
    for p in model:
        m = got.get((p["layout"], p["k"]))
        far = p["layout"].endswith(" nodes x 1")
        row = {"layout": p["layout"], "k": p["k"], "global batch": f"{p['global_batch']:,}",
               "steps to target": f"{p['steps']:,.0f}" if p["steps"] is not None else "—",
               "steps": p["steps_how"],
               "samples vs first k": (f"{p['steps'] * p['global_batch'] / first[p['layout']]:.2f}"
                                      if p["steps"] is not None and p["layout"] in first else "—")}
        for src, r in (("measured", m), ("model", p)):
            row[f"step (ms), {src}"] = f"{r['step_s'] * 1e3:.2f}" if r else "no cluster"
            row[f"to target (s), {src}"] = (f"{r['time_to_target_s']:.2f}" if r and r["time_to_target_s"] is not None
                                           else "—")
            row[f"nodes / 1 node, {src}"] = (f"{ratios[src][p['k']]:.2f}x" if far and p["k"] in ratios[src] else "")
        t.add(**row)
    return t


def end_ks(rows: list[dict]) -> list[int]:
    """The smallest and the largest k measured on both layouts (one k where only one was)."""
    ks = sorted(set(layout_ratios([r for r in rows if r["source"] != "model"])))
    return sorted({ks[0], ks[-1]}) if ks else []


def layout_comparisons(rows: list[dict], hidden_at: float = HIDDEN_AT) -> list[compare.Comparison]:
    """At the smallest and the largest k measured, W nodes x 1's throughput over 1 node x W's (every run of each:
    the same samples per step, so also the ratio of their times to the target), against ``hidden_at``: ``lower``,
    the slow link sets the pace at that k; ``higher``, accumulation has hidden it (the crossover reached). The
    interval: the runs' spread and the timing resolution (the two layouts ran in two launches). None without
    measured rows."""
    runs = {(r["layout"].startswith("1 node x "), r["k"]): (r["layout"], [r["global_batch"] / s for s in
                                                                          r.get("step_s_runs", [r["step_s"]])])
            for r in rows if r["source"] != "model"}
    out = []
    for k in end_ks(rows):
        (_, near), (layout, far) = runs[(True, k)], runs[(False, k)]
        c = compare.ratio(f"throughput at k={k}, {layout} / 1 node", near, far, needed=compare.EXACT,
                          resolution=TIMING_RESOLUTION, basis=f"{len(near)}/{len(far)} runs, resolution "
                                                              f"{TIMING_RESOLUTION:.0%}; against {hidden_at:.0%}")
        out.append(replace(c, reference=hidden_at))
    return out


def model_comparisons(rows: list[dict], predicted: list[dict]) -> list[compare.Comparison]:
    """Per layout, lesson 09's step time over the measured one, paired by k (the geometric mean over the ks, their
    spread and the timing resolution): ``same`` within :data:`course_lib.compare.MODEL_EFFECT`."""
    got = {(r["layout"], r["k"]): r["step_s"] for r in rows if r["source"] != "model"}
    out = []
    for layout in dict.fromkeys(p["layout"] for p in predicted):
        pairs = [(got[(layout, p["k"])], p["step_s"]) for p in predicted
                 if p["layout"] == layout and (layout, p["k"]) in got]
        if pairs:
            out.append(compare.paired_ratio(f"step time, lesson 09's model / measured ({layout})",
                                            [m for m, _ in pairs], [p for _, p in pairs], needed=compare.MODEL_EFFECT,
                                            resolution=TIMING_RESOLUTION, basis=f"{len(pairs)} k paired; timing "
                                                                               "resolution"))
    return out


def beyond_table(rows: list[dict], predicted: list[dict], hidden_at: float = HIDDEN_AT) -> Table:
    """Beyond the ks run: where a line through each layout's step times over k (:func:`extrapolated_k`) puts W nodes
    x 1 at ``hidden_at`` of one node's throughput, measured and by the model."""
    t = Table(["source", "k where the lines cross", "next power of two", "its global batch"],
              title=f"extrapolated: the k at which W nodes reach {hidden_at:.0%} of one node's throughput")
    for source, group in (("measured", rows), ("lesson 09's model", predicted)):
        got = extrapolated_k(group, hidden_at) if group else None
        k, k2, batch = got if got else ("never", "-", "-")
        t.add(**{"source": source, "k where the lines cross": k if isinstance(k, str) else round(k, 1),
                 "next power of two": k2, "its global batch": batch if isinstance(batch, str) else f"{batch:,}"})
    return t


# --------------------------------------------------------------------------- figures


def plot_sweeps(near_rows: list[dict], far_rows: list[dict], near_fit: dict, far_fit: dict, ranks: int = 4, ax=None):
    """All-reduce time against message size within a node and between nodes, with lesson 08's fits."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    for rows, fit, label, color in ((near_rows, near_fit, f"{one_node(ranks)} (loopback)", "tab:blue"),
                                    (far_rows, far_fit, f"{many_nodes(ranks)} (the links)", "tab:red")):
        n = np.array([r["size_bytes"] for r in rows], dtype=float)
        ax.loglog(n, [r["time_s"] for r in rows], "o", color=color, label=f"{label}, measured")
        grid = np.geomspace(n.min(), n.max(), 50)
        model = [cost.ring_allreduce_time(x, ranks, fit["alpha_s"], fit["beta_s_per_byte"]) for x in grid]
        ax.loglog(grid, model, "-", color=color, alpha=0.6, label=f"{label}, fit: {_bits(fit['rate_bits_per_s'])}")
    ax.set_xlabel("message (bytes)")
    ax.set_ylabel("all-reduce time (s)")
    ax.legend(fontsize=8)
    ax.set_title("all-reduce within a node and across nodes")
    return ax


def k_grid(ks=K_VALUES, beyond: int = 4) -> list[float]:
    """A fine geometric grid of k from the smallest k run to ``beyond`` times the largest: the model's curve."""
    top = math.log2(ks[-1] * beyond / ks[0])
    return [ks[0] * 2 ** (i / 4) for i in range(int(round(4 * top)) + 1)]


def plot_layouts(rows: list[dict], curve: list[dict], hidden_at: float = HIDDEN_AT, ax=None):
    """W nodes x 1 over 1 node x W against k: measured (if any; the intervals of :func:`layout_comparisons` at the
    ends) and lesson 09's model on a fine grid of k (``curve``: :func:`predicted_layouts` over :func:`k_grid`), with
    the k where the model crosses ``hidden_at``."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    model = layout_ratios(curve)
    ax.semilogx(list(model), list(model.values()), "--", base=2, color="tab:orange", label="lesson 09's model")
    ratios = layout_ratios(rows) if rows else {}
    if ratios:
        ax.semilogx(list(ratios), list(ratios.values()), "o", base=2, color="tab:blue", label="measured")
        for k, c in zip(end_ks(rows), layout_comparisons(rows, hidden_at)):
            ax.errorbar([k], [c.estimate], yerr=[[c.estimate - c.low], [c.high - c.estimate]], color="tab:blue",
                        capsize=4)
    crossed = extrapolated_k(curve, hidden_at)
    if crossed:
        ax.axvline(crossed[0], color="tab:orange", lw=0.8, ls=":", label=f"model's crossover, k = {crossed[0]:.0f}")
    ax.axhline(hidden_at, color="grey", lw=0.8, ls=":", label=f"{hidden_at:.0%} of one node's throughput")
    if ratios:
        ax.set_xticks(sorted(ratios), [str(k) for k in sorted(ratios)])
    ax.set_xlabel("gradient accumulation k (micro-batch fixed)")
    ax.set_ylabel("throughput, W nodes x 1 / 1 node x W")
    ax.set_ylim(0, 1.2)
    ax.legend(fontsize=8)
    ax.set_title("does accumulation hide the slow link?")
    return ax


def grad_bytes(spec: dict, cfg: dict | None = None) -> int:
    """Bytes of NeuMF's fp32 gradients for ``spec``'s data (what each step's all-reduce sums)."""
    from ..models.ncf import NeuMF
    from ..train.ncf import TrainConfig
    from ..train.workers import RunSpec, load_data

    data = load_data(RunSpec(**spec))
    c = TrainConfig(**{"global_batch_size": 256, **(cfg or {})})
    model = NeuMF(data.num_users, data.num_items, factors=c.factors, layers=c.layers)
    return 4 * sum(p.numel() for p in model.parameters())


def one_process_compute(micro_batch: int, steps: int, spec: dict, base_cfg: dict | None = None) -> float:
    """Seconds of compute per sample in this process (the model path's input: no cluster to measure on)."""
    from ..train.workers import ncf_worker

    (cfg,) = layout_configs(micro_batch, 1, steps, base_cfg, ks=(1,))
    record = ncf_worker(0, 1, cfg, spec)
    return record["train_time_s"] / max(1, record["steps"]) / micro_batch


def assumed_link(rate: str, alpha_s: float = 50e-6) -> dict:
    """A link the model path assumes (no measurement): ``rate`` in tc's units and a per-message latency."""
    bits = vc.parse_rate(rate)
    return {"alpha_s": alpha_s, "beta_s_per_byte": 8 / bits, "rate_bits_per_s": bits, "fit": "assumed"}
