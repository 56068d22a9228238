"""Lesson 06's measurements as tables and verdicts.

Each function takes the rows a benchmark or a training run returned; none needs a process group, so
they hold on any tier (CPU processes over gloo, one GPU whose ranks are CPU processes, several GPUs over
NCCL) and at any world size, including one. Quantities (a fit, a count) are table rows; every "is this
difference real?" is a :class:`course_lib.compare.Comparison` whose interval comes from the noise measured
next to it: the interleaved rounds of the bucket benchmark, the blocks of the all-reduce sweep, the
spacing of evaluations, the runs of one setting at other seeds and the drift of the yardstick's pace.

- :func:`ring_table`: what the ring all-reduce's schedule sends, counted from lesson 08's schedules;
- :func:`allreduce_estimates` / :func:`allreduce_comparisons`: the sweep's alpha-beta fit, and whether
  the fit describes the smallest and largest messages and the small ones lie on a flat line;
- :func:`overlap_comparisons`, :func:`timeline_table`: the bucket benchmark: the cost of communication,
  what overlapping it with backward saved, what the bucket size changed;
- :func:`compression_comparisons`: fp16/bf16 gradient compression: time, and whether training changed;
- :func:`scaling_rows`, :func:`scaling_estimates`, :func:`optimization_comparisons`: strong and weak
  scaling: throughput, the step's fixed and per-sample cost, epochs and time to the target.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from .. import compare
from ..comm.collectives import ring_allreduce_schedule
from ..comm.cost import allreduce_busbw_factor, human_bytes
from ..compare import Comparison, Estimate
from ..tables import Table

TORCH_HOOK_NAMES = {"fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}
# unit roundoff of fp32 (half the distance from 1 to the next number): the least two equal losses can differ by
FP32_ROUNDOFF = 2.0 ** -24

RUN_TO_RUN_FLOOR = 0.05  # runs of one setting at other seeds resolve no better than this, however close they came
EPOCHS_EFFECT = 0.10  # epochs to target within 10%: two of the dense evaluations (0.05 epochs) of a ~1-epoch run
COMPRESSION_TOLERANCE = 0.01  # a loss within 1% of what the uncompressed run gained is the same training
COMPUTE_SHARE = 0.8  # the per-rank batch quoted is the one at which compute is this share of the step


def _interval(question: str, a: list[float], b: list[float], *, needed: float, basis: str = "") -> Comparison:
    """``b`` relative to ``a`` from step times: paired where both ran the same number of interleaved rounds
    (a busy round slows every variant in it), from each arm's spread where they did not, and at
    :data:`course_lib.compare.ONE_RUN` where an arm ran once."""
    if len(a) == len(b) >= 2:
        return compare.paired_ratio(question, a, b, needed=needed, basis=basis)
    if min(len(a), len(b)) >= 2:
        return compare.ratio(question, a, b, needed=needed, basis=basis)
    return compare.ratio(question, a, b, needed=needed, resolution=compare.ONE_RUN,
                         basis="one repeat: the resolution one run has on a shared machine")


def _repeats(row: dict) -> list[float]:
    return list(row.get("step_ms_repeats") or [row["step_ms"]])


def _step_ratio(question: str, a: dict, b: dict) -> Comparison:
    """Step time of bucket-benchmark row ``b`` relative to row ``a`` (their repeats ran interleaved)."""
    return _interval(question, _repeats(a), _repeats(b), needed=compare.SPEED_EFFECT)


# --------------------------------------------------------------------------- the ring


def ring_rows(p: int, n_elements: int | None = None) -> dict:
    """What each rank sends in a ring all-reduce on ``p`` ranks, counted on the schedule itself."""
    n = n_elements or 1000 * max(p, 1)
    if p < 2:
        return {"ranks": p, "rounds": 0, "messages": 0, "elements": n, "sent per rank": 0, "sent / tensor": 0.0,
                "2(p-1)/p": 0.0}
    s = ring_allreduce_schedule(p, n)
    sent = max(s.elements_sent_by(r) for r in range(p))
    return {"ranks": p, "rounds": len(s.rounds), "messages": s.messages, "elements": n, "sent per rank": sent,
            "sent / tensor": sent / n, "2(p-1)/p": allreduce_busbw_factor(p)}


def ring_table(world_size: int) -> Table:
    """The ring on this lesson's ranks and on 2, 4 and 8: the rounds grow with p, the bytes sent stay below 2x."""
    t = Table(["ranks", "rounds", "messages", "elements", "sent per rank", "sent / tensor", "2(p-1)/p"],
              title="Ring all-reduce, counted on its schedule (reduce-scatter, then all-gather)")
    for p in sorted({2, 4, 8, world_size}):
        t.add(**ring_rows(p))
    return t


# --------------------------------------------------------------------------- the all-reduce sweep


def _blocks_spread(row: dict) -> float:
    """A sweep row's blocks' spread relative to its median: the resolution of that size's time."""
    if "time_max_s" not in row:
        return compare.ONE_RUN
    return (row["time_max_s"] - row["time_min_s"]) / row["time_s"]


def allreduce_estimates(bench) -> list[Estimate]:
    """The sweep's alpha-beta fit (:meth:`BenchResult.fit`, robust on relative errors) as rows with standard
    errors from the least-squares line on relative errors through the same sizes, the size where the
    bandwidth term reaches the latency, and the largest busbw measured against the fit's asymptote."""
    if bench.world_size < 2 or len(bench.rows) < 2:
        return []
    alpha, beta = bench.fit()
    sizes, times = [r["size_bytes"] for r in bench.rows], [r["time_s"] for r in bench.rows]
    fit = compare.line_fit(sizes, times, weights=[1 / t ** 2 for t in times])
    a_se, b_se = fit.intercept_se, fit.slope_se
    df = fit.df if fit.df > 0 else None
    basis = f"{len(sizes)} sizes; standard error of the least-squares line on relative errors"
    out = [compare.estimate("alpha: latency per all-reduce", alpha * 1e6, a_se * 1e6, df=df, unit="us", basis=basis)]
    if beta > 0:
        bw = 1 / beta / 1e9
        out.append(compare.estimate("1 / beta: bandwidth", bw, bw * b_se / beta, df=df, unit="GB/s", basis=basis))
        if alpha > 0:
            rel = math.hypot(a_se / alpha, b_se / beta)
            out.append(compare.estimate("alpha / beta: the size where n x beta = alpha", alpha / beta,
                                        alpha / beta * rel, df=df, unit="B", basis=basis))
        asymptote = allreduce_busbw_factor(bench.world_size) * bw
        out.append(compare.estimate("the fit's busbw asymptote, 2(p-1)/p / beta", asymptote, asymptote * b_se / beta,
                                    df=df, unit="GB/s", basis=basis))
    best = max(bench.rows, key=lambda r: r["busbw_GBps"])
    out.append(compare.estimate(f"largest busbw measured ({human_bytes(best['size_bytes'])})", best["busbw_GBps"],
                                math.nan, unit="GB/s", basis="median block"))
    return out


def allreduce_comparisons(bench) -> list[Comparison]:
    """Does the alpha-beta fit describe the smallest and the largest message (measured / predicted, within
    :data:`course_lib.compare.MODEL_EFFECT`), and do the sizes the fit puts in the latency regime (bandwidth term
    at most :data:`course_lib.compare.TIME_EFFECT` of alpha) lie on a flat line? Each time's resolution is its
    blocks' spread. One rank has no link to describe: no comparisons."""
    if bench.world_size < 2 or len(bench.rows) < 2:
        return []
    alpha, beta = bench.fit()
    rows = sorted(bench.rows, key=lambda r: r["size_bytes"])
    out = []
    for r in (rows[0], rows[-1]):
        predicted = alpha + beta * r["size_bytes"]
        if predicted > 0:
            out.append(compare.quantity_ratio(
                f"all-reduce time at {human_bytes(r['size_bytes'])}, measured / alpha + n beta",
                r["time_s"] / predicted, 0.0, needed=compare.MODEL_EFFECT, resolution=_blocks_spread(r),
                basis="the blocks' spread", n="1 size"))
    flat = [r for r in rows if alpha > 0 and beta * r["size_bytes"] <= compare.TIME_EFFECT * alpha]
    if len(flat) >= 2:
        lo, hi = flat[0], flat[-1]
        out.append(compare.quantity_ratio(
            f"all-reduce time, {human_bytes(hi['size_bytes'])} / {human_bytes(lo['size_bytes'])} (latency regime)",
            hi["time_s"] / lo["time_s"], 0.0, needed=compare.TIME_EFFECT,
            resolution=max(_blocks_spread(lo), _blocks_spread(hi)), basis="the blocks' spread", n="2 sizes"))
    return out


# --------------------------------------------------------------------------- buckets and overlap


def overlap_comparisons(result) -> list[Comparison]:
    """Three questions on the bucket benchmark's step times, each from its interleaved rounds: what the
    fastest bucket setting costs over no communication at all (the floor); what overlapping saved, the
    fastest setting that made more than one bucket (one bucket is ready only when backward ends, so it
    cannot overlap) against one all-reduce after backward; and the smallest bucket cap against the largest."""
    rows = [r for r in result.bucket_rows if r.get("step_ms") is not None]
    buckets = [r for r in rows if r["overlap"] is True]
    floor = next((r for r in rows if r["overlap"] is None), None)
    serial = next((r for r in rows if r["overlap"] is False), None)
    if not buckets:
        return []
    best = min(buckets, key=lambda r: r["step_ms"])
    out = []
    if floor is not None:
        out.append(_step_ratio(f"step time, fastest buckets ({best['bucket_cap_mb']:g} MiB) / no communication",
                               floor, best))
    several = [r for r in buckets if (r.get("allreduces_per_step") or 0) > 1]
    if serial is not None and several:
        ov = min(several, key=lambda r: r["step_ms"])
        out.append(_step_ratio(f"step time, {ov['bucket_cap_mb']:g} MiB buckets (overlapped) / one all-reduce "
                               "after backward", serial, ov))
    caps = sorted(buckets, key=lambda r: r["bucket_cap_mb"])
    if len(caps) > 1:
        small, large = caps[0], caps[-1]
        out.append(_step_ratio(f"step time, {small['bucket_cap_mb']:g} MiB / {large['bucket_cap_mb']:g} MiB buckets",
                               large, small))
    return out


def _union(intervals) -> list[tuple[float, float]]:
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out




def timeline_rows(result) -> list[dict]:
    """Per variant, from its recorded step (rank 0's step of median length, the one
    :func:`course_lib.comm.plots.plot_bucket_timeline` draws): how many all-reduces, how long one was
    pending (their union), and how much of that lay while backward was still computing (overlap)
    rather than after it (waiting). The rows of :func:`timeline_table`."""
    out = []
    for r in result.rows:
        tl = r.get("timeline")
        if not tl or r["overlap"] is None or not tl["allreduces_ms"]:
            continue
        spans = _union((a, b) for a, b, _ in tl["allreduces_ms"])
        pending = sum(b - a for a, b in spans)
        compute_end = max(a for a, _, _ in tl["allreduces_ms"]) if r["overlap"] else tl["backward_end_ms"]
        under = sum(max(0.0, min(b, compute_end) - max(a, tl["backward_start_ms"])) for a, b in spans)
        name = (
            "one all-reduce after backward"
            if r["overlap"] is False
            else f"{r['compression']}-compressed {r['bucket_cap_mb']:g} MiB"
            if r.get("compression") not in (None, "none")
            else f"{r['bucket_cap_mb']:g} MiB buckets"
        )
        three = lambda x: float(f"{x:.3g}")  # noqa: E731  (three significant figures: one step, not a mean)
        out.append({"variant": name, "all-reduces": len(tl["allreduces_ms"]), "step (ms)": three(tl["step_ms"]),
                    "pending (ms)": three(pending), "under backward (ms)": three(under),
                    "share under backward": f"{under / pending:.0%}" if pending > 0 else "—"})
    return out




def timeline_table(result) -> Table:
    """The steps the timeline draws, one row per variant (one step of rank 0; the bucket table above holds
    other numbers, the median over repeats of the slowest rank)."""
    t = Table(["variant", "all-reduces", "step (ms)", "pending (ms)", "under backward (ms)", "share under backward"],
              title="The steps drawn: rank 0's median step per variant (one step, not the bucket table's median "
                    "over repeats)")
    for row in timeline_rows(result):
        t.add(**row)
    return t


# --------------------------------------------------------------------------- compression


def _loss_resolution(result, ref: dict) -> float:
    """How far two runs of the same training end apart here: the fp32 variants' final losses (another bucket
    layout, another summation order), at least fp32's rounding of the loss."""
    same = [r["final_loss"] for r in result.bucket_rows
            if r["overlap"] is not None and r.get("final_loss") is not None]
    spread = max((abs(x - ref["final_loss"]) for x in same), default=0.0)
    return max(spread, FP32_ROUNDOFF * abs(ref["final_loss"]))


def compression_comparisons(result) -> list[Comparison]:
    """Per compressed variant that ran: its step time against the uncompressed run at the same bucket cap
    (interleaved rounds), and its loss after the same steps, the difference as a share of the loss the
    uncompressed run gained (within :data:`COMPRESSION_TOLERANCE`: the same training)."""
    rows = result.compression_rows
    if not rows:
        return []
    ref, out = rows[0], []
    decrease = ref["first_loss"] - ref["final_loss"]
    for r in rows[1:]:
        if r.get("step_ms") is None:
            continue
        c = r["compression"]
        out.append(_step_ratio(f"step time, {c}-compressed / uncompressed", ref, r))
        if decrease > 0:
            out.append(compare.quantity(
                f"loss after {r['steps']} steps, {c} - uncompressed, per unit the uncompressed run gained",
                (r["final_loss"] - ref["final_loss"]) / decrease, 0.0, needed=COMPRESSION_TOLERANCE,
                resolution=_loss_resolution(result, ref) / decrease, n="1 run each",
                basis="the fp32 variants' spread (summation order)"))
    return out


def refusals(result) -> list[str]:
    """One status line per compression DDP refused in this build of torch, with torch's message."""
    out = []
    for r in result.compression_rows[1:]:
        if r.get("step_ms") is None:
            c = r["compression"]
            out.append(f"{c}: not run: DDP refuses torch's {TORCH_HOOK_NAMES.get(c, c)} here (\"{r.get('refused')}\"); "
                       f"{r.get('backend', 'the backend')} itself sums {c} tensors correctly: "
                       f"{r.get('backend_reduces_dtype')}")
    return out


# --------------------------------------------------------------------------- scaling


def _resolution(config: dict) -> float | None:
    """The evaluation spacing near the target of a run's config (epochs), None when not recorded."""
    if config.get("dense_eval_margin") and config.get("dense_eval_every_epochs"):
        return config["dense_eval_every_epochs"]
    return config.get("eval_every_epochs")


def scaling_rows(strong: dict, weak: dict) -> list[dict]:
    """Strong (fixed global batch) and weak (fixed per-rank batch) scaling, one row per run.

    ``strong``/``weak``: ``{world_size: result record}``. Efficiency is throughput over
    ``world_size x`` the one-rank throughput of the same mode (1.0 = perfect scaling); for
    strong scaling also time-to-target efficiency ``T(1) / (W T(W))``.
    """
    rows = []
    for mode, runs in (("strong", strong), ("weak", weak)):
        one = runs.get(1)
        for w in sorted(runs):
            r = runs[w]
            speedup = r["samples_per_s"] / one["samples_per_s"] if one else None
            ttt, ttt1 = r["time_to_target_s"], one["time_to_target_s"] if one else None
            comm = r.get("comm_time_s") or 0.0
            rows.append({
                "mode": mode, "world_size": w, "global_batch": r["config"]["global_batch_size"],
                "per_rank_batch": r["config"]["global_batch_size"] // w, "lr": r["config"]["peak_lr"],
                "samples_per_s": r["samples_per_s"], "speedup": speedup,
                "efficiency": speedup / w if speedup is not None else None,
                "time_to_target_s": ttt, "epochs_to_target": r["epochs_to_target"],
                "steps_to_target": r.get("steps_to_target"),
                "ttt_efficiency": ttt1 / (w * ttt) if (mode == "strong" and ttt and ttt1) else None,
                "comm_s": comm, "comm_share": comm / r["train_time_s"] if r["train_time_s"] else None,
                "comm_method": r.get("comm_method") or "",
                "resolution_epochs": _resolution(r["config"]),
                "final_hr": r["final_hr"]})
    return rows


# Quoted, not measured: NVIDIA DeepLearningExamples' NCF reference trains ml-20m with a global
# batch of 2**20 over 8 GPUs, 131,072 samples per GPU per step, with (fused) Adam — its README,
# PyTorch/Recommendation/NCF/README.md, "Default configuration": "FusedAdam optimizer"; no LARS.
NVIDIA_NCF_SAMPLES_PER_GPU = 131_072
NVIDIA_NCF_QUOTE = "NVIDIA's NCF reference, quoted: 131,072 samples per GPU on 8 GPUs for ml-20m, with Adam"


def _allreduce_per_step(row: dict) -> float:
    """The seconds per step a row's run had a gradient all-reduce pending (its timed ``comm_share`` of the step): what
    only a run on more than one rank pays."""
    return (row.get("comm_share") or 0.0) * row["global_batch"] / row["samples_per_s"]


def step_time_fit(rows: list[dict]) -> compare.Fit | None:
    """Least squares ``step_s - all-reduce_s = fixed_s + per_sample_s x per-rank batch`` over the strong-scaling
    rows, with the standard errors of :func:`course_lib.compare.line_fit` (NaN with two sizes); None with fewer
    than two sizes.

    Strong scaling keeps the global batch, so each size gives another per-rank batch: the intercept is what a
    step costs whatever the batch (this lesson does not time its parts), the slope the compute per sample. The
    all-reduce each run timed (:func:`_allreduce_per_step`) is taken out first: one rank does not pay it, so
    left in, a line through one rank and two would put it in the slope as well as the intercept."""
    strong = [r for r in rows if r["mode"] == "strong" and r["samples_per_s"]]
    if len({r["per_rank_batch"] for r in strong}) < 2:
        return None
    return compare.line_fit([r["per_rank_batch"] for r in strong],
                            [r["global_batch"] / r["samples_per_s"] - _allreduce_per_step(r) for r in strong])


def _efficiency(rows: list[dict], repeats) -> Estimate | None:
    """The largest strong-scaling run's efficiency, with the same setting's other seeds where they ran."""
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    one, top = strong[0], strong[-1]
    if top["efficiency"] is None or one["world_size"] != 1:
        return None
    effs = [top["efficiency"]] + [r["samples_per_s"] / (one["samples_per_s"] * top["world_size"])
                                  for r in repeats if r.get("samples_per_s")]
    name = f"strong-scaling efficiency, {top['world_size']} ranks"
    if len(effs) > 1:
        return compare.mean_estimate(name, effs, basis=f"{len(effs)} seeds")
    return compare.estimate(name, effs[0], math.nan, basis="one run")


def scaling_estimates(rows: list[dict], repeats=()) -> list[Estimate]:
    """The strong-scaling rows as quantities: the largest run's efficiency (over every seed of its setting),
    :func:`step_time_fit`'s fixed and per-sample cost, the all-reduce the largest run timed, the share of its
    step that does not shrink with the per-rank batch, and the per-rank batch at which compute would be
    :data:`COMPUTE_SHARE` of the step. The last two only where the fit resolves a split (a positive intercept
    and slope); NVIDIA's reference per-GPU batch is quoted beside it as a scale, not a check."""
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    if len(strong) < 2:
        return []
    top = strong[-1]
    out = [e for e in [_efficiency(rows, repeats)] if e is not None]
    fit = step_time_fit(rows)
    if fit is None:
        return out
    df = fit.df if fit.df > 0 else None
    basis = f"line through {fit.n} strong-scaling sizes"
    step, allreduce = top["global_batch"] / top["samples_per_s"], _allreduce_per_step(top)
    out += [compare.estimate("fixed cost per step (the fit's intercept)", 1e3 * fit.intercept,
                             1e3 * fit.intercept_se, df=df, unit="ms", basis=basis),
            compare.estimate("cost per sample (the fit's slope)", 1e6 * fit.slope, 1e6 * fit.slope_se, df=df,
                             unit="us", basis=basis),
            compare.estimate(f"all-reduce pending per step, {top['world_size']} ranks", 1e3 * allreduce, math.nan,
                             unit="ms", basis="timed in the run")]
    if fit.intercept <= 0 or fit.slope <= 0:
        return out
    fixed = fit.intercept + allreduce
    out.append(compare.estimate(f"share of the {top['world_size']}-rank step that does not shrink", fixed / step,
                                fit.intercept_se / step, df=df, basis=basis))
    need = COMPUTE_SHARE / (1 - COMPUTE_SHARE) * fixed / fit.slope
    rel = math.hypot(fit.intercept_se / fixed, fit.slope_se / fit.slope)
    out += [compare.estimate(f"per-rank batch at which compute is {COMPUTE_SHARE:.0%} of the step", need, need * rel,
                             df=df, basis=basis),
            compare.estimate("NVIDIA's NCF reference, samples per GPU", NVIDIA_NCF_SAMPLES_PER_GPU, math.nan,
                             basis=NVIDIA_NCF_QUOTE)]
    return out


def _epochs(mode: str, rs: list[dict], resolution: float) -> Comparison | None:
    lo, hi = rs[0], rs[-1]
    e1, ew = lo["epochs_to_target"], hi["epochs_to_target"]
    if not e1 or not ew:
        return None
    return compare.ratio(f"epochs to target, {mode} scaling, {hi['world_size']} / {lo['world_size']} ranks (global "
                         f"batch {hi['global_batch']} / {lo['global_batch']})", [e1], [ew], needed=EPOCHS_EFFECT,
                         resolution=resolution / min(e1, ew), basis=f"evaluations {resolution:g} epochs apart")


def _time_to_target(one: dict, top: dict, repeats, drift: float | None) -> Comparison | None:
    """The largest strong-scaling setting's time to target (every seed of it) over one rank's. The resolution is
    how far the runs of that setting moved (at least :data:`RUN_TO_RUN_FLOOR`), or
    :data:`course_lib.compare.ONE_RUN` with one run each, and no less than the yardstick's pace moved over the
    lesson."""
    t1 = one["time_to_target_s"]
    times = [t for t in [top["time_to_target_s"], *(r.get("time_to_target_s") for r in repeats)] if t]
    if not t1 or not top["time_to_target_s"]:
        return None
    if len(times) > 1:
        res, basis = max(max(times) / min(times) - 1, RUN_TO_RUN_FLOOR), f"{len(times)} seeds' spread"
    else:
        res, basis = compare.ONE_RUN, "one run each on a shared machine"
    if drift is not None and abs(drift) > res:
        res, basis = abs(drift), f"{basis}; the yardstick's pace moved {drift:+.0%}"
    return compare.ratio(f"time to target, {top['world_size']} ranks / 1 rank (same threads per rank)", [t1], times,
                         needed=compare.TIME_EFFECT, resolution=res, basis=basis)


def optimization_comparisons(rows: list[dict], eval_every_epochs: float, repeats=(),
                             pace: dict | None = None) -> list[Comparison]:
    """Three verdicts from the scaling rows: did strong scaling keep the epochs to target (it must: the same
    global batch is the same optimization), did weak scaling's larger global batch change them, and did the
    largest strong-scaling run reach the target sooner than one rank of the same threads.

    Epochs to target are known to within the evaluation spacing near the target (each row's
    ``resolution_epochs``, the coarser ``eval_every_epochs`` where none is recorded). ``repeats``: more runs of
    the largest strong-scaling setting at other seeds; ``pace``: the yardstick's pace before and after this
    lesson's runs (:meth:`course_lib.ladder.Pace.finish`). Whether data parallelism beat one process on all
    the same cores is the ladder's '+data parallel' row, not a verdict here. Runs that did not reach the
    target give no verdict on that question (the table shows their final HR@10)."""
    from ..ladder import pace_drift

    res = min([eval_every_epochs] + [r["resolution_epochs"] for r in rows if r.get("resolution_epochs")])
    out = []
    for mode in ("strong", "weak"):
        rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["world_size"])
        if len(rs) >= 2:
            out.append(_epochs(mode, rs, res))
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    if strong and strong[0]["world_size"] == 1 and len(strong) > 1:
        out.append(_time_to_target(strong[0], strong[-1], repeats, pace_drift(pace)))
    return [c for c in out if c is not None]


def scaling_table(rows: list[dict]) -> Table:
    t = Table(["mode", "ranks", "global batch", "per-rank batch", "samples/s", "speedup", "efficiency",
               "time to target (s)", "epochs to target", "comm (s)", "comm share", "comm measured by",
               "final HR@10"],
              title="Strong scaling (fixed global batch) and weak scaling (fixed per-rank batch)")
    for r in rows:
        t.add(**{"mode": r["mode"], "ranks": r["world_size"], "global batch": r["global_batch"],
                 "per-rank batch": r["per_rank_batch"], "samples/s": r["samples_per_s"],
                 "speedup": r["speedup"], "efficiency": r["efficiency"],
                 "time to target (s)": r["time_to_target_s"] if r["time_to_target_s"] is not None else "not reached",
                 "epochs to target": r["epochs_to_target"], "comm (s)": r["comm_s"],
                 "comm share": f"{r['comm_share']:.0%}" if r["comm_share"] is not None else None,
                 "comm measured by": r["comm_method"] or "—", "final HR@10": r["final_hr"]})
    return t


def plot_scaling(rows: list[dict]):
    """Two panels: samples/s vs ranks (with the ideal line) and scaling efficiency vs ranks."""
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
    ax_t.set(xlabel="ranks", ylabel="training samples/s", title="throughput")
    ax_e.axhline(1.0, color="gray", ls=":", lw=1)
    ax_e.set(xlabel="ranks", ylabel="efficiency = speedup / ranks", title="scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_t, ax_e):
        ax.set_xticks(sorted({r["world_size"] for r in rows}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sbatch_summary(path) -> str:
    """The lines of a SLURM batch script a learner adapts (its ``#SBATCH`` options and the launch line),
    with the file's path and length, instead of the whole file."""
    from pathlib import Path

    text = Path(path).read_text()
    lines = text.splitlines()
    # the launch is a command, not a comment that names one, and it is kept whole, with its continuation lines
    keep, going_on = [], False
    for ln in lines:
        launch = going_on or (not ln.lstrip().startswith("#") and ln.split()[:1] in (["srun"], ["torchrun"]))
        if ln.startswith("#SBATCH") or launch:
            keep.append(ln)
        going_on = launch and ln.rstrip().endswith("\\")
    return "\n".join([f"{path}: {len(lines)} lines; the options and the launch:"] + keep[:30])
