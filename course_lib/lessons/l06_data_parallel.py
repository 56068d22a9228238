"""Lesson 06's measurements as tables, estimates and verdicts, from the rows a benchmark or a run returned (no
process group: any tier, any world size). Each verdict resolves to the noise measured beside it."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from .. import compare
from ..comm.collectives import ring_allreduce_schedule
from ..comm.cost import allreduce_busbw_factor, human_bytes
from ..tables import Table

FP32_ROUNDOFF = 2.0 ** -24  # unit roundoff of fp32: the least two equal losses can differ by
RUN_TO_RUN_FLOOR = 0.05  # runs of one setting at other seeds resolve no better than this, however close they came
EPOCHS_EFFECT = 0.10  # epochs to target within 10%: two of the dense evaluations (0.05 epochs) of a ~1-epoch run
COMPRESSION_TOLERANCE = 0.01  # a loss within 1% of what the uncompressed run gained is the same training
COMPUTE_SHARE = 0.8  # the per-rank batch quoted is the one at which compute is this share of the step
# Quoted, not measured: NVIDIA DeepLearningExamples' NCF reference (PyTorch/Recommendation/NCF/README.md, "Default
# configuration") trains ml-20m with a global batch of 2**20 over 8 GPUs, with FusedAdam.
NVIDIA_NCF_SAMPLES_PER_GPU = 131_072


def _step_ratio(question: str, a: dict, b: dict) -> compare.Comparison:
    """Step time of bucket-benchmark row ``b`` over row ``a``: paired over interleaved rounds (a busy round slows
    every variant in it), from each arm's spread when their counts differ, at ``ONE_RUN`` with one repeat."""
    ra, rb = (list(r.get("step_ms_repeats") or [r["step_ms"]]) for r in (a, b))
    if len(ra) == len(rb) >= 2:
        return compare.paired_ratio(question, ra, rb, needed=compare.SPEED_EFFECT)
    once = min(len(ra), len(rb)) < 2
    return compare.ratio(question, ra, rb, needed=compare.SPEED_EFFECT, resolution=compare.ONE_RUN if once else 0.0,
                         basis="one repeat" if once else "")


def ring_table(world_size: int) -> Table:
    """A ring all-reduce on this lesson's ranks and on 2, 4, 8, counted on its schedule: what each rank sends."""
    t = Table(["ranks", "rounds", "messages", "elements", "sent", "sent / n", "2(p-1)/p"])
    for p in sorted({2, 4, 8, world_size}):
        n = 1000 * p
        s = ring_allreduce_schedule(p, n) if p >= 2 else None
        sent = max(s.elements_sent_by(r) for r in range(p)) if s else 0
        t.add(**{"ranks": p, "rounds": len(s.rounds) if s else 0, "messages": s.messages if s else 0, "elements": n,
                 "sent": sent, "sent / n": sent / n, "2(p-1)/p": allreduce_busbw_factor(p) if s else 0.0})
    return t


def _blocks_spread(row: dict) -> float:
    """A sweep row's blocks' spread relative to its median: the resolution of that size's time."""
    return (row["time_max_s"] - row["time_min_s"]) / row["time_s"] if "time_max_s" in row else compare.ONE_RUN


def allreduce_fit(bench) -> tuple[list[compare.Estimate], list[compare.Comparison]]:
    """The sweep's alpha-beta fit (standard errors of the line on relative errors), ``alpha / beta``, the busbw it
    implies and the largest measured; verdicts: measured / fit at the smallest and largest size, and flatness of
    the latency regime (``beta n <= TIME_EFFECT alpha``), resolved to the blocks' spread. One rank: none."""
    if bench.world_size < 2 or len(bench.rows) < 2:
        return [], []
    alpha, beta = bench.fit()
    rows = sorted(bench.rows, key=lambda r: r["size_bytes"])
    times = [r["time_s"] for r in rows]
    fit = compare.line_fit([r["size_bytes"] for r in rows], times, weights=[1 / t ** 2 for t in times])
    a_se, b_se = fit.intercept_se, fit.slope_se
    kw = dict(df=fit.df if fit.df > 0 else None, basis=f"{len(rows)} sizes, weighted fit")
    est = [compare.estimate("alpha", alpha * 1e6, a_se * 1e6, unit="us", **kw)]
    if beta > 0:
        bw = 1 / beta / 1e9
        est.append(compare.estimate("1 / beta", bw, bw * b_se / beta, unit="GB/s", **kw))
        if alpha > 0:
            rel = math.hypot(a_se / alpha, b_se / beta)
            est.append(compare.estimate("alpha / beta", alpha / beta, alpha / beta * rel, unit="B", **kw))
        asymptote = allreduce_busbw_factor(bench.world_size) * bw
        est.append(compare.estimate("busbw asymptote", asymptote, asymptote * b_se / beta, unit="GB/s", **kw))
    best = max(rows, key=lambda r: r["busbw_GBps"])
    est.append(compare.estimate(f"busbw at {human_bytes(best['size_bytes'])}", best["busbw_GBps"], math.nan,
                                unit="GB/s", basis="median block"))
    comps = []
    for r in (rows[0], rows[-1]):
        predicted = alpha + beta * r["size_bytes"]
        if predicted > 0:
            comps.append(compare.quantity_ratio(
                f"time at {human_bytes(r['size_bytes'])}, measured / fit", r["time_s"] / predicted, 0.0,
                needed=compare.MODEL_EFFECT, resolution=_blocks_spread(r), basis="blocks' spread", n="1 size"))
    flat = [r for r in rows if alpha > 0 and beta * r["size_bytes"] <= compare.TIME_EFFECT * alpha]
    if len(flat) >= 2:
        lo, hi = flat[0], flat[-1]
        comps.append(compare.quantity_ratio(
            f"time, {human_bytes(hi['size_bytes'])} / {human_bytes(lo['size_bytes'])}", hi["time_s"] / lo["time_s"],
            0.0, needed=compare.TIME_EFFECT, resolution=max(_blocks_spread(lo), _blocks_spread(hi)),
            basis="blocks' spread", n="2 sizes"))
    return est, comps


def overlap_comparisons(result) -> list[compare.Comparison]:
    """Step times over interleaved rounds: the fastest buckets over no communication (what communication costs);
    the fastest setting with several buckets (one bucket is ready only when backward ends) over one all-reduce
    after backward (what overlap saved); the smallest cap over the largest."""
    rows = [r for r in result.bucket_rows if r.get("step_ms") is not None]
    buckets = sorted((r for r in rows if r["overlap"] is True), key=lambda r: r["bucket_cap_mb"])
    several = [r for r in buckets if (r.get("allreduces_per_step") or 0) > 1]
    fastest = lambda rs: min(rs, key=lambda r: r["step_ms"]) if rs else None
    mib = lambda r: f"{r['bucket_cap_mb']:g} MiB"
    pairs = [(next((r for r in rows if r["overlap"] is None), None), fastest(buckets), "no comm"),
             (next((r for r in rows if r["overlap"] is False), None), fastest(several), "serial")]
    if len(buckets) > 1:
        pairs.append((buckets[-1], buckets[0], mib(buckets[-1])))
    return [_step_ratio(f"step, {mib(b)} / {name}", a, b) for a, b, name in pairs if a and b]


def _union(intervals) -> list[tuple[float, float]]:
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def timeline_table(result) -> Table:
    """Per variant, from the step the timeline draws (rank 0's median step: one step, not the bucket table's
    median): its all-reduces, how long one was pending (their union, ms) and how much of that under backward."""
    out = Table(["variant", "all-reduces", "step ms", "pending ms", "under backward ms", "share"])
    for r in result.rows:
        tl = r.get("timeline")
        if not tl or r["overlap"] is None or not tl["allreduces_ms"]:
            continue
        spans = _union((a, b) for a, b, _ in tl["allreduces_ms"])
        pending = sum(b - a for a, b in spans)
        compute_end = max(a for a, _, _ in tl["allreduces_ms"]) if r["overlap"] else tl["backward_end_ms"]
        under = sum(max(0.0, min(b, compute_end) - max(a, tl["backward_start_ms"])) for a, b in spans)
        name = f"{r['bucket_cap_mb']:g} MiB"
        if r["overlap"] is False:
            name = "serial"
        elif r.get("compression") not in (None, "none"):
            name = f"{r['compression']} {name}"
        out.add(**{"variant": name, "all-reduces": len(tl["allreduces_ms"]), "step ms": float(f"{tl['step_ms']:.3g}"),
                   "pending ms": float(f"{pending:.3g}"), "under backward ms": float(f"{under:.3g}"),
                   "share": f"{under / pending:.0%}" if pending > 0 else "—"})
    return out


def compression_comparisons(result) -> list[compare.Comparison]:
    """Per compressed variant that ran: its step time over the uncompressed one's, and its loss after the same steps
    less the uncompressed one's, per unit that run gained, resolved to how far the fp32 variants (other summation
    orders) ended from it, at least fp32's rounding."""
    rows = result.compression_rows
    if not rows:
        return []
    ref, out = rows[0], []
    decrease = ref["first_loss"] - ref["final_loss"]
    fp32 = [r["final_loss"] for r in result.bucket_rows if r["overlap"] is not None and r.get("final_loss") is not None]
    spread = max([abs(x - ref["final_loss"]) for x in fp32] + [FP32_ROUNDOFF * abs(ref["final_loss"])])
    for r in (x for x in rows[1:] if x.get("step_ms") is not None):
        c = r["compression"]
        out.append(_step_ratio(f"step, {c} / none", ref, r))
        if decrease > 0:
            out.append(compare.quantity(
                f"loss after {r['steps']} steps, {c} - none, / gain", (r["final_loss"] - ref["final_loss"]) / decrease,
                0.0, needed=COMPRESSION_TOLERANCE, resolution=spread / decrease, n="1 run each",
                basis="fp32 variants' spread"))
    return out


def refusals(result) -> list[str]:
    """One status line per compression DDP refused in this build of torch, with torch's message."""
    refused = [r for r in result.compression_rows[1:] if r.get("step_ms") is None]
    return [f"{r['compression']}: not run: DDP refuses {r['compression']}_compress_hook (\"{r.get('refused')}\"); "
            f"{r.get('backend', 'backend')} sums {r['compression']}: {r.get('backend_reduces_dtype')}" for r in refused]


def scaling_rows(strong: dict, weak: dict) -> list[dict]:
    """One row per run of ``strong``/``weak`` (``{world_size: record}``); efficiency: speedup / W; strong scaling's
    ``ttt_efficiency``: ``T(1) / (W T(W))``; ``resolution_epochs``: the evaluation spacing near the target."""
    rows = []
    for mode, runs in (("strong", strong), ("weak", weak)):
        one = runs.get(1)
        for w in sorted(runs):
            r, cfg = runs[w], runs[w]["config"]
            speedup = r["samples_per_s"] / one["samples_per_s"] if one else None
            ttt, ttt1 = r["time_to_target_s"], one["time_to_target_s"] if one else None
            comm = r.get("comm_time_s") or 0.0
            dense = cfg.get("dense_eval_margin") and cfg.get("dense_eval_every_epochs")
            rows.append({
                "mode": mode, "world_size": w, "global_batch": cfg["global_batch_size"],
                "per_rank_batch": cfg["global_batch_size"] // w, "lr": cfg["peak_lr"],
                "samples_per_s": r["samples_per_s"], "speedup": speedup,
                "efficiency": speedup / w if speedup is not None else None, "time_to_target_s": ttt,
                "epochs_to_target": r["epochs_to_target"], "steps_to_target": r.get("steps_to_target"),
                "ttt_efficiency": ttt1 / (w * ttt) if (mode == "strong" and ttt and ttt1) else None,
                "comm_s": comm, "comm_share": comm / r["train_time_s"] if r["train_time_s"] else None,
                "comm_method": r.get("comm_method") or "", "final_hr": r["final_hr"],
                "resolution_epochs": cfg["dense_eval_every_epochs"] if dense else cfg.get("eval_every_epochs")})
    return rows


def _strong(rows: list[dict]) -> list[dict]:
    return sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])


def _allreduce_per_step(row: dict) -> float:
    """Seconds per step a run had an all-reduce pending (its timed ``comm_share`` of the step)."""
    return (row.get("comm_share") or 0.0) * row["global_batch"] / row["samples_per_s"]


def step_time_fit(rows: list[dict]) -> compare.Fit | None:
    """Least squares ``step_s - all-reduce_s = fixed_s + per_sample_s x per-rank batch`` over the strong-scaling
    rows; None with fewer than two sizes. The timed all-reduce is taken out first: one rank does not pay it, so
    a line through one rank and two would put it in the slope as well as in the intercept."""
    strong = [r for r in rows if r["mode"] == "strong" and r["samples_per_s"]]
    if len({r["per_rank_batch"] for r in strong}) < 2:
        return None
    return compare.line_fit([r["per_rank_batch"] for r in strong],
                            [r["global_batch"] / r["samples_per_s"] - _allreduce_per_step(r) for r in strong])


def scaling_estimates(rows: list[dict], repeats=()) -> list[compare.Estimate]:
    """The largest strong-scaling run's efficiency (every seed), :func:`step_time_fit`'s costs and its all-reduce;
    where the fit splits the step, its share that does not shrink and the per-rank batch at which compute would be
    ``COMPUTE_SHARE`` of it, beside NVIDIA's per-GPU batch (a scale, not a check)."""
    strong = _strong(rows)
    if len(strong) < 2:
        return []
    one, top = strong[0], strong[-1]
    out = []
    if top["efficiency"] is not None and one["world_size"] == 1:
        effs = [top["efficiency"]] + [r["samples_per_s"] / (one["samples_per_s"] * top["world_size"])
                                      for r in repeats if r.get("samples_per_s")]
        out.append(compare.mean_estimate(f"efficiency, {top['world_size']} ranks", effs,
                                         basis=f"{len(effs)} seeds" if len(effs) > 1 else "one run"))
    fit = step_time_fit(rows)
    if fit is None:
        return out
    kw = dict(df=fit.df if fit.df > 0 else None, basis=f"line through {fit.n} sizes")
    step, allreduce = top["global_batch"] / top["samples_per_s"], _allreduce_per_step(top)
    out += [compare.estimate("fixed per step", 1e3 * fit.intercept, 1e3 * fit.intercept_se, unit="ms", **kw),
            compare.estimate("per sample", 1e6 * fit.slope, 1e6 * fit.slope_se, unit="us", **kw),
            compare.estimate(f"all-reduce, {top['world_size']} ranks", 1e3 * allreduce, math.nan, unit="ms",
                             basis="timed")]
    if fit.intercept <= 0 or fit.slope <= 0:
        return out
    fixed = fit.intercept + allreduce
    need = COMPUTE_SHARE / (1 - COMPUTE_SHARE) * fixed / fit.slope
    rel = math.hypot(fit.intercept_se / fixed, fit.slope_se / fit.slope)
    return out + [compare.estimate(f"fixed share, {top['world_size']} ranks", fixed / step, fit.intercept_se / step,
                                   **kw),
                  compare.estimate(f"per-rank batch, compute {COMPUTE_SHARE:.0%}", need, need * rel, **kw),
                  compare.estimate("NVIDIA NCF, per GPU", NVIDIA_NCF_SAMPLES_PER_GPU, math.nan, basis="quoted")]


def optimization_comparisons(rows: list[dict], eval_every_epochs: float, repeats=(),
                             pace: dict | None = None) -> list[compare.Comparison]:
    """Epochs to target per mode, largest over smallest world size, known to the evaluation spacing near the target;
    the largest strong-scaling setting's time to target (every seed, ``repeats``) over one rank's, resolved to the
    seeds' spread (at least ``RUN_TO_RUN_FLOOR``) and the yardstick's drift (``pace``). A miss: no verdict."""
    from ..ladder import pace_drift

    res = min([eval_every_epochs] + [r["resolution_epochs"] for r in rows if r.get("resolution_epochs")])
    out = []
    for mode in ("strong", "weak"):
        rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["world_size"])
        e1, ew = (rs[0]["epochs_to_target"], rs[-1]["epochs_to_target"]) if len(rs) >= 2 else (None, None)
        if e1 and ew:
            lo, hi = rs[0], rs[-1]
            out.append(compare.ratio(
                f"epochs to target, {mode}, {hi['world_size']} / {lo['world_size']} ranks", [e1], [ew],
                needed=EPOCHS_EFFECT, resolution=res / min(e1, ew), basis=f"evaluations {res:g} epochs apart"))
    strong = _strong(rows)
    if len(strong) < 2 or strong[0]["world_size"] != 1 or not strong[0]["time_to_target_s"]:
        return out
    one, top = strong[0], strong[-1]
    times = [t for t in [top["time_to_target_s"], *(r.get("time_to_target_s") for r in repeats)] if t]
    if not top["time_to_target_s"]:
        return out
    resolution = max(max(times) / min(times) - 1, RUN_TO_RUN_FLOOR) if len(times) > 1 else compare.ONE_RUN
    basis = f"{len(times)} seeds' spread" if len(times) > 1 else "one run each"
    drift = pace_drift(pace)
    if drift is not None and abs(drift) > resolution:
        resolution, basis = abs(drift), f"{basis}; pace moved {drift:+.0%}"
    return out + [compare.ratio(f"time to target, {top['world_size']} ranks / 1", [one["time_to_target_s"]], times,
                                needed=compare.TIME_EFFECT, resolution=resolution, basis=basis)]


SCALING_COLUMNS = {"mode": "mode", "ranks": "world_size", "batch": "global_batch", "per rank": "per_rank_batch",
                   "samples/s": "samples_per_s", "speedup": "speedup", "efficiency": "efficiency",
                   "TTT s": "time_to_target_s", "epochs": "epochs_to_target", "comm s": "comm_s",
                   "comm share": "comm_share", "comm by": "comm_method", "HR@10": "final_hr"}


def scaling_table(rows: list[dict]) -> Table:
    t = Table(list(SCALING_COLUMNS))
    for r in rows:
        t.add(**{col: r[key] for col, key in SCALING_COLUMNS.items()} | {
            "TTT s": "not reached" if r["time_to_target_s"] is None else r["time_to_target_s"],
            "comm share": None if r["comm_share"] is None else f"{r['comm_share']:.0%}",
            "comm by": r["comm_method"] or "—"})
    return t


def plot_scaling(rows: list[dict]):
    """Samples/s against ranks (with the ideal line), and the scaling efficiency."""
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
    for mode, color in (("strong", "tab:blue"), ("weak", "tab:orange")):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        w = [r["world_size"] for r in rs]
        ax_t.plot(w, [r["samples_per_s"] for r in rs], "o-", color=color, label=f"{mode} scaling")
        base = next((r["samples_per_s"] for r in rs if r["world_size"] == 1), None)
        if base:
            ax_t.plot(w, [base * x for x in w], ":", color=color, label=f"ideal ({mode})")
        ax_e.plot(w, [r["efficiency"] for r in rs], "o-", color=color, label=mode)
    ax_t.set(ylabel="training samples/s", title="throughput")
    ax_e.axhline(1.0, color="gray", ls=":", lw=1)
    ax_e.set(ylabel="efficiency = speedup / ranks", title="scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_t, ax_e):
        ax.set(xlabel="ranks", xticks=sorted({r["world_size"] for r in rows}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sbatch_summary(path) -> str:
    """A SLURM script's ``#SBATCH`` options and its launch command, whole (not a comment naming it)."""
    lines = Path(path).read_text().splitlines()
    keep, going_on = [], False
    for ln in lines:
        launch = going_on or (not ln.lstrip().startswith("#") and ln.split()[:1] in (["srun"], ["torchrun"]))
        if ln.startswith("#SBATCH") or launch:
            keep.append(ln)
        going_on = launch and ln.rstrip().endswith("\\")
    return "\n".join([f"{path}: {len(lines)} lines; options and launch:"] + keep[:30])
