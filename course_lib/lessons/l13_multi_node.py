"""Lesson 13 on many nodes: a link's alpha-beta, 1 node x W against W nodes x 1 at accumulation k, time to target."""

from __future__ import annotations

import math
from dataclasses import replace

from .. import cluster as vc
from .. import compare
from ..comm import cost
from ..comm.bench import allreduce_benchmark
from ..metrics import jackknife_stderr
from ..models.ncf import NeuMF
from ..tables import Table
from ..train.ncf import TrainConfig
from ..train.workers import RunSpec, load_data, ncf_runs, ncf_worker

# past lesson 09's crossover on a quiet 2-core machine, 4 nodes on 2 Gbit/s links (k ~10; on 100 Mbit/s ~350)
K_VALUES = (1, 2, 4, 8, 16, 32, 64, 128)
REPEATS = 3  # runs at the smallest and the largest k: the spread of the crossover rows
LINK_TOLERANCE = 0.35  # the fitted rate within 35 % of the set rate (TCP/IP headers take ~4 %, the rest is noise)
HIDDEN_AT = 0.8  # the slow link "stops mattering" once 4 nodes x 1 run at >= 80 % of 1 node x 4's throughput
TIMING_RESOLUTION = 0.10  # a time from a few timed steps, or one median of a few repeats, on a shared machine
# without lesson 02's curve, the linear-scaling ideal through about its smallest batch's (batch, steps): ASSUMED
ASSUMED_STEPS = (256, 16000)

layouts = lambda w: (f"1 node x {w}", f"{w} nodes x 1")
_near = lambda row: row["layout"].startswith("1 node x ")
_ms = lambda v, digits=1: "—" if v is None else f"{v * 1e3:.{digits}f}"
_bits = lambda rate: ("no rate" if rate is None else f"{rate / 1e9:.2f} Gbit/s" if rate >= 1e9
                      else f"{rate / 1e6:.0f} Mbit/s")


def nodes_worker(rank: int, world_size: int, sizes: list[int], iters: int, warmup: int, cfgs: list[dict],
                 spec: dict) -> dict:
    """The all-reduce sweep, then NeuMF at each config, in one launch (a launch costs seconds on every node)."""
    return {"sweep": allreduce_benchmark(rank, world_size, sizes, iters, warmup),
            "runs": ncf_runs(rank, world_size, cfgs, spec)}


def measure(runner, sizes: list[int], micro_batch: int, steps: int, spec: dict, ks=K_VALUES, iters: int = 5,
            warmup: int = 1, world_size: int = 4, repeats: int = REPEATS) -> dict:
    """1 node x W and W nodes x 1, a launch each: the sweeps ``near``, ``far`` and per layout and k its step times."""
    # each k once, then the two ends alternately: a slow moment of the machine falls on no one k's repeats alone
    ks = list(ks) + [k for _ in range(repeats - 1) for k in (ks[0], ks[-1])]
    cfgs = layout_configs(micro_batch, world_size, steps, ks)
    out = {"layouts": []}
    for key, layout, nnodes, nproc in zip(("near", "far"), layouts(world_size), (1, world_size), (world_size, 1)):
        got = runner.run("course_lib.lessons.l13_multi_node:nodes_worker", [list(sizes), iters, warmup, cfgs, spec],
                         nnodes=nnodes, nproc=nproc)
        out[key] = got["sweep"]
        for k in dict.fromkeys(ks):
            steps = [r["train_time_s"] / max(1, r["steps"]) for k_r, r in zip(ks, got["runs"]) if k_r == k]
            batch, step = world_size * micro_batch * k, sum(steps) / len(steps)
            out["layouts"].append({"layout": layout, "k": k, "global_batch": batch, "samples_per_s": batch / step,
                                   "step_s": step, "step_s_runs": steps, "source": runner.path})
    return out


def step_fit(rows: list[dict], near: dict, grad_bytes: int, micro_batch: int, world_size: int = 4) -> dict:
    """Lesson 09's step model, a line ``step = a + c k`` through one node's runs: ``c`` the compute, ``a`` overhead."""
    xs, ys = zip(*[(r["k"], s) for r in rows if _near(r) for s in r.get("step_s_runs", [r["step_s"]])])
    fit = compare.line_fit(xs, ys, weights=[1 / y ** 2 for y in ys])  # raises under two distinct ks
    t_ar = cost.ring_allreduce_time(grad_bytes, world_size, near["alpha_s"], near["beta_s_per_byte"])
    return {"compute_s_per_sample": max(fit.slope, 0.0) / micro_batch, "compute_se": fit.slope_se / micro_batch,
            "overhead_s": max(fit.intercept - t_ar, 0.0), "overhead_se": fit.intercept_se, "df": fit.df}


def step_fit_table(fit: dict):
    return compare.estimates_table([
        compare.estimate(name, fit[key] * scale, fit[se] * scale, df=fit["df"], unit=unit, basis="weighted line over k")
        for name, key, se, scale, unit in (("compute/sample/rank", "compute_s_per_sample", "compute_se", 1e6, "us"),
                                           ("overhead/step", "overhead_s", "overhead_se", 1e3, "ms"))])


def link_rate(rows: list[dict], ranks: int = 2) -> dict:
    """Lesson 08's fit as one link (undoing the all-reduce's ``2 (p-1)/p``), jackknife errors from 3 sizes."""
    def fit(rows):
        alpha, beta = cost.fit_alpha_beta([r["size_bytes"] for r in rows], [r["time_s"] for r in rows])
        return (alpha, beta, *cost.link_alpha_beta_from_ring_fit(alpha, beta, ranks))

    alpha, beta, a_link, b_link = fit(rows)
    sizes = sorted({r["size_bytes"] for r in rows})
    out = {"alpha_s": a_link, "beta_s_per_byte": b_link, "rate_bits_per_s": 8 / b_link if b_link > 0 else None,
           "fit": cost.fit_text(alpha, beta), "alpha_err_s": None, "rate_rel_err": None, "sizes": len(sizes)}
    if len(sizes) >= 3:
        _, _, alphas, betas = zip(*(fit([r for r in rows if r["size_bytes"] != s]) for s in sizes))
        mean_b = sum(betas) / len(betas)
        out.update(alpha_err_s=jackknife_stderr(list(alphas)),
                   rate_rel_err=jackknife_stderr(list(betas)) / mean_b if mean_b > 0 and min(betas) > 0 else None)
    return out


def link_comparisons(near: dict, far: dict, set_rate_bits_per_s: float | None, path: str) -> list[compare.Comparison]:
    """Fitted rate / set rate; links' per-message cost - loopback's (no latency is emulated: equal if one cost)."""
    out, rate, rel = [], far.get("rate_bits_per_s"), far.get("rate_rel_err")
    if path == "virtual" and set_rate_bits_per_s and rate and rel:
        out.append(compare.quantity_ratio("link rate, fitted / set", rate / set_rate_bits_per_s, rel,
                                          needed=LINK_TOLERANCE, df=far["sizes"] - 1, n=str(far["sizes"]),
                                          basis=f"jackknife over {far['sizes']} message sizes"))
    e_near, e_far = near.get("alpha_err_s"), far.get("alpha_err_s")
    if e_near is not None and e_far is not None and e_near + e_far > 0:
        out.append(compare.difference("per-message cost, links - loopback", near["alpha_s"] * 1e6, e_near * 1e6,
                                      far["alpha_s"] * 1e6, e_far * 1e6, needed=compare.EXACT, unit="us",
                                      df=min(near["sizes"], far["sizes"]) - 1, basis="jackknife over the sizes"))
    return out


def link_table(near: dict, far: dict, nodes: int) -> Table:
    """The two fits (:func:`link_rate`, or :func:`assumed_link` without a cluster: its fit says "assumed")."""
    return Table(["where", "latency (us)", "rate", "fit"], [
        {"where": where, "latency (us)": fit["alpha_s"] * 1e6, "rate": _bits(fit["rate_bits_per_s"]), "fit": fit["fit"]}
        for where, fit in zip((f"{w} ({how})" for w, how in zip(layouts(nodes), ("loopback", "links"))), (near, far))])


def layout_configs(micro_batch: int, world_size: int, steps: int, ks=K_VALUES) -> list[dict]:
    """One TrainConfig dict per k: the micro-batch fixed, the global batch ``world_size * micro_batch * k``."""
    return [{"global_batch_size": world_size * micro_batch * k, "micro_batch_size": micro_batch,
             "max_steps": steps, "stop_at_target": False, "target_hr": None} for k in ks]


def predicted_layouts(compute_s_per_sample: float, grad_bytes: int, micro_batch: int, near: tuple, far: tuple,
                      ks=K_VALUES, world_size: int = 4, overhead_s: float = 0.0) -> list[dict]:
    """Lesson 09's step: ``k * b * t_sample``, ``overhead_s``, a ring all-reduce at ``near`` or ``far``."""
    rows = []
    for layout, (alpha, beta) in zip(layouts(world_size), (near, far)):
        for k in ks:
            step = (overhead_s + k * micro_batch * compute_s_per_sample
                    + cost.ring_allreduce_time(grad_bytes, world_size, alpha, beta))
            rows.append({"layout": layout, "k": k, "global_batch": world_size * micro_batch * k,
                         "samples_per_s": world_size * micro_batch * k / step, "step_s": step, "source": "model"})
    return rows


def layout_table(rows: list[dict], predicted: list[dict]) -> Table:
    """Per k of the model: each layout's step time, measured and lesson 09's, and W nodes' throughput over one's."""
    cols = ["k", "batch", "1 node ms", "1 node model", "nodes ms", "nodes model", "nodes / 1 node", "model ratio"]
    got = {(_near(r), r["k"]): r["step_s"] for r in rows}
    pred = {(_near(r), r["k"]): r for r in predicted}
    ratios, model_ratios = layout_ratios(rows), layout_ratios(predicted)
    pct = lambda d, k: f"{d[k]:.0%}" if k in d else "—"
    return Table(cols, [dict(zip(cols, [k, f"{p['global_batch']:,}", _ms(got.get((True, k))), _ms(p["step_s"]),
                                        _ms(got.get((False, k))), _ms(pred[(False, k)]["step_s"]), pct(ratios, k),
                                        pct(model_ratios, k)]))
                        for (near, k), p in sorted(pred.items(), key=lambda x: x[0][1]) if near])


def layout_ratios(rows: list[dict], key: str = "samples_per_s") -> dict[int, float]:
    """k -> ``key`` (throughput) of W nodes x 1 over 1 node x W, at the ks where both have one."""
    near, far = ({r["k"]: r[key] for r in rows if _near(r) == side and r[key]} for side in (True, False))
    return {k: far[k] / near[k] for k in sorted(near) if k in far}


def extrapolated_k(rows: list[dict], hidden_at: float = HIDDEN_AT) -> tuple[float, int, int] | None:
    """``(k, next power of two, its batch)`` where lines through each layout's step times cross ``hidden_at``."""
    sides = [[(r["k"], r["step_s"]) for r in rows if _near(r) == side and r.get("step_s")] for side in (True, False)]
    if min(len(pts) for pts in sides) < 2:
        return None
    (a_n, c_n), (a_f, c_f) = ((f.intercept, f.slope) for f in (compare.line_fit(*zip(*pts)) for pts in sides))
    gain = c_n - hidden_at * c_f
    if gain <= 0 or c_n <= 0:
        return None
    k = max(1.0, (hidden_at * a_f - a_n) / gain)
    k2 = 1 << math.ceil(math.log2(k))
    return k, k2, int(round(k2 * next(r["global_batch"] / r["k"] for r in rows if r.get("step_s"))))


def lesson02_steps(saved: dict | None, profile: str | None = None) -> tuple[list[tuple[int, int]] | None, str]:
    """Lesson 02's fewest steps to target per batch (None: missing, other data, under two batches) and their source."""
    reached = [r for r in (saved or {}).get("rows") or [] if r.get("steps to target")]
    best = {int(r["batch size"]): r["steps to target"] for r in sorted(reached, key=lambda r: -r["steps to target"])}
    why = ("lesson 02 has not run here" if not saved or not saved.get("rows") else
           f"lesson 02 ran the {saved.get('profile')!r} profile" if profile and saved.get("profile") != profile else
           f"{len(best)} of lesson 02's batches reached the target" if len(best) < 2 else None)
    if why:
        return None, f"ASSUMED linear scaling, {ASSUMED_STEPS[1]:,} steps at batch {ASSUMED_STEPS[0]:,}: {why}"
    return sorted(best.items()), "lesson 02's steps: " + ", ".join(f"{s:,} at {b:,}" for b, s in sorted(best.items()))


def steps_at(points: list[tuple[int, int]] | None, batch: int) -> tuple[float | None, str]:
    """Steps to target at ``batch`` and how: measured, log-log interpolated, assumed, or None outside (it bends)."""
    if points is None:
        return ASSUMED_STEPS[1] * ASSUMED_STEPS[0] / batch, "assumed"
    at = dict(points)
    if batch in at:
        return float(at[batch]), "measured"
    if not points[0][0] < batch < points[-1][0]:
        return None, "outside"
    (b0, s0), (b1, s1) = next((p, q) for p, q in zip(points, points[1:]) if p[0] < batch < q[0])
    w = math.log(batch / b0) / math.log(b1 / b0)
    return math.exp(math.log(s0) + w * math.log(s1 / s0)), "interpolated"


def ttt_rows(rows: list[dict], points: list[tuple[int, int]] | None) -> list[dict]:
    """Time to target per layout row: the steps at its global batch (:func:`steps_at`) x its time per step."""
    out = []
    for r in rows:
        steps, how = steps_at(points, r["global_batch"])
        out.append({**{k: r[k] for k in ("layout", "k", "global_batch", "step_s")}, "steps": steps, "steps_how": how,
                    "source": r["source"], "time_to_target_s": steps * r["step_s"] if steps is not None else None})
    return out


def ttt_table(measured: list[dict], model: list[dict]) -> Table:
    """Per layout and k of the model: lesson 02's steps, then step and time to target, measured and by the model."""
    cols = ["layout", "k", "batch", "steps", "how", "samples/first", "ms", "s", "ratio", "model ms", "model s",
            "model ratio"]
    got = {(r["layout"], r["k"]): r for r in measured}
    ratios = {"": layout_ratios(measured, "time_to_target_s"), "model ": layout_ratios(model, "time_to_target_s")}
    # the samples to the target at each layout's smallest k with steps (ks descending: the smallest is kept)
    first = {p["layout"]: p["steps"] * p["global_batch"] for p in sorted(model, key=lambda p: -p["k"]) if p["steps"]}
    t = Table(cols)
    for p in model:
        ok = p["steps"] is not None
        row = {"layout": p["layout"], "k": p["k"], "batch": f"{p['global_batch']:,}", "how": p["steps_how"],
               "steps": f"{p['steps']:,.0f}" if ok else "—",
               "samples/first": f"{p['steps'] * p['global_batch'] / first[p['layout']]:.2f}" if ok else "—"}
        for src, r in (("", got.get((p["layout"], p["k"]))), ("model ", p)):
            row[f"{src}ms"] = _ms(r["step_s"], 2) if r else "no cluster"
            row[f"{src}s"] = f"{r['time_to_target_s']:.2f}" if r and r["time_to_target_s"] is not None else "—"
            row[f"{src}ratio"] = f"{ratios[src][p['k']]:.2f}x" if not _near(p) and p["k"] in ratios[src] else ""
        t.add(**row)
    return t


def layout_comparisons(rows: list[dict], hidden_at: float = HIDDEN_AT) -> list[compare.Comparison]:
    """At the ends of k, W nodes' throughput over one node's (every run; two launches: timing resolution)."""
    runs = {(_near(r), r["k"]): (r["layout"], [r["global_batch"] / s for s in r.get("step_s_runs", [r["step_s"]])])
            for r in rows if r["source"] != "model"}
    ks, out = sorted(layout_ratios([r for r in rows if r["source"] != "model"])), []
    for k in sorted({ks[0], ks[-1]}) if ks else []:
        (_, near), (layout, far) = runs[(True, k)], runs[(False, k)]
        c = compare.ratio(f"throughput at k={k}, {layout} / 1 node", near, far, needed=compare.EXACT,
                          resolution=TIMING_RESOLUTION,
                          basis=f"{len(near)}/{len(far)} runs, resolution {TIMING_RESOLUTION:.0%}; vs {hidden_at:.0%}")
        out.append(replace(c, reference=hidden_at))
    return out


def model_comparisons(rows: list[dict], predicted: list[dict]) -> list[compare.Comparison]:
    """Per layout, lesson 09's step time over the measured one, paired by k: ``same`` within ``MODEL_EFFECT``."""
    got = {(r["layout"], r["k"]): r["step_s"] for r in rows if r["source"] != "model"}
    out = []
    for layout in dict.fromkeys(p["layout"] for p in predicted):
        pairs = [(got[(layout, p["k"])], p["step_s"]) for p in predicted
                 if p["layout"] == layout and (layout, p["k"]) in got]
        if pairs:
            out.append(compare.paired_ratio(f"step time, model / measured ({layout})", [m for m, _ in pairs],
                                            [p for _, p in pairs], needed=compare.MODEL_EFFECT,
                                            resolution=TIMING_RESOLUTION, basis=f"{len(pairs)} k paired"))
    return out


def beyond_table(rows: list[dict], predicted: list[dict], hidden_at: float = HIDDEN_AT) -> Table:
    """Where :func:`extrapolated_k` puts the crossover, measured and by the model."""
    out = []
    for source, group in (("measured", rows), ("model", predicted)):
        k, k2, batch = extrapolated_k(group, hidden_at) or ("never", "-", "-")
        out.append({"source": source, "k": k if isinstance(k, str) else round(k, 1), "power of two": k2,
                    "batch": batch if isinstance(batch, str) else f"{batch:,}"})
    return Table(["source", "k", "power of two", "batch"], out)


def plot_sweeps(near_rows: list[dict], far_rows: list[dict], near_fit: dict, far_fit: dict, ranks: int = 4, ax=None):
    """All-reduce time against message size within a node and between nodes, with lesson 08's fits."""
    import matplotlib.pyplot as plt
    import numpy as np

    ax = ax or plt.subplots(figsize=(6.5, 4))[1]
    for rows, fit, label, color in zip((near_rows, far_rows), (near_fit, far_fit), layouts(ranks), ("tab:blue", "red")):
        n = [r["size_bytes"] for r in rows]
        ax.loglog(n, [r["time_s"] for r in rows], "o", color=color, label=f"{label}, measured")
        grid = np.geomspace(min(n), max(n), 50)
        ax.loglog(grid, [cost.ring_allreduce_time(x, ranks, fit["alpha_s"], fit["beta_s_per_byte"]) for x in grid],
                  "-", color=color, alpha=0.6, label=f"{label}, fit: {_bits(fit['rate_bits_per_s'])}")
    ax.set(xlabel="message (bytes)", ylabel="all-reduce time (s)")
    ax.legend(fontsize=8)
    return ax


def k_grid(ks=K_VALUES, beyond: int = 4) -> list[float]:
    """A fine geometric grid of k from the smallest k run to ``beyond`` times the largest: the model's curve."""
    return [ks[0] * 2 ** (i / 4) for i in range(round(4 * math.log2(ks[-1] * beyond / ks[0])) + 1)]


def plot_layouts(rows: list[dict], curve: list[dict], hidden_at: float = HIDDEN_AT, ax=None):
    """W nodes x 1 over 1 node x W against k: measured (the ends with their intervals) and the model's ``curve``."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6.5, 4))[1]
    model = layout_ratios(curve)
    ax.semilogx(list(model), list(model.values()), "--", base=2, color="tab:orange", label="lesson 09's model")
    ratios = layout_ratios(rows)
    if ratios:
        ax.semilogx(list(ratios), list(ratios.values()), "o", base=2, color="tab:blue", label="measured")
        for k, c in zip(sorted({min(ratios), max(ratios)}), layout_comparisons(rows, hidden_at)):
            ax.errorbar([k], [c.estimate], yerr=[[c.estimate - c.low], [c.high - c.estimate]], color="tab:blue",
                        capsize=4)
        ax.set_xticks(sorted(ratios), [str(k) for k in sorted(ratios)])
    if crossed := extrapolated_k(curve, hidden_at):
        ax.axvline(crossed[0], color="tab:orange", lw=0.8, ls=":", label=f"model's crossover, k = {crossed[0]:.0f}")
    ax.axhline(hidden_at, color="grey", lw=0.8, ls=":", label=f"{hidden_at:.0%} of one node")
    ax.set(xlabel="accumulation k (micro-batch fixed)", ylabel="throughput, W nodes x 1 / 1 node x W", ylim=(0, 1.2))
    ax.legend(fontsize=8)
    return ax


def grad_bytes(spec: dict) -> int:
    """Bytes of NeuMF's fp32 gradients for ``spec``'s data (what each step's all-reduce sums)."""
    data, c = load_data(RunSpec(**spec)), TrainConfig(global_batch_size=256)
    model = NeuMF(data.num_users, data.num_items, factors=c.factors, layers=c.layers)
    return 4 * sum(p.numel() for p in model.parameters())


def one_process_compute(micro_batch: int, steps: int, spec: dict) -> float:
    """Seconds of compute per sample in this process (the model path's input: no cluster to measure on)."""
    record = ncf_worker(0, 1, layout_configs(micro_batch, 1, steps, ks=(1,))[0], spec)
    return record["train_time_s"] / max(1, record["steps"]) / micro_batch


def assumed_link(rate: str, alpha_s: float = 50e-6) -> dict:
    """A link the model path assumes (no measurement): ``rate`` in tc's units and a per-message latency."""
    bits = vc.parse_rate(rate)
    return {"alpha_s": alpha_s, "beta_s_per_byte": 8 / bits, "rate_bits_per_s": bits, "fit": "assumed"}
