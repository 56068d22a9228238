"""Strong and weak scaling: rows, table and figure from data-parallel runs (lesson 06)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from ..metrics import line_fit
from ..tables import Table


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
                "ttt_efficiency": ttt1 / (w * ttt) if (mode == "strong" and ttt and ttt1) else None,
                "comm_s": comm, "comm_share": comm / r["train_time_s"] if r["train_time_s"] else None,
                "comm_method": r.get("comm_method") or "",
                "final_hr": r["final_hr"]})
    return rows


# Quoted, not measured: NVIDIA DeepLearningExamples' NCF reference trains ml-20m with a global
# batch of 2**20 over 8 GPUs, 131,072 samples per GPU per step.
NVIDIA_NCF_SAMPLES_PER_GPU = 131_072


def step_time_fit(rows: list[dict]) -> tuple[float, float] | None:
    """Least-squares ``step_s = fixed_s + per_sample_s x per-rank batch`` over the strong-scaling rows.

    Strong scaling keeps the global batch, so each size gives another per-rank batch: the
    intercept is what a step costs whatever the batch (the optimizer's step over every
    parameter, the gradient all-reduce, launches), the slope the compute per sample. None
    with fewer than two sizes.
    """
    strong = [r for r in rows if r["mode"] == "strong" and r["samples_per_s"]]
    return line_fit([r["per_rank_batch"] for r in strong], [r["global_batch"] / r["samples_per_s"] for r in strong])


def scaling_reading(rows: list[dict], compute_share: float = 0.8) -> str:
    """What the learner's own strong-scaling rows show, and the per-rank batch that would scale.

    From :func:`step_time_fit`: the share of the largest run's step that does not shrink
    with the per-rank batch, and the per-rank batch at which compute would be
    ``compute_share`` of the step (a power of two). True on any tier: every number is read
    from ``rows``.
    """
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    if len(strong) < 2:
        return "one data-parallel size only: no scaling to read (a machine with more devices adds the others)."
    top = strong[-1]
    eff = top["efficiency"]
    lead = (f"strong scaling to {top['world_size']} ranks at a global batch of {top['global_batch']} "
            f"({top['per_rank_batch']} per rank): efficiency {eff:.2f}" if eff is not None else
            f"strong scaling to {top['world_size']} ranks")
    fit = step_time_fit(rows)
    if fit is None or fit[1] <= 0:
        return (lead + ". The step time did not shrink with the per-rank batch, so fixed costs (the optimizer's "
                "step over every parameter, the all-reduce, launches) or noise dominate: measure again, or give "
                f"each rank more samples (NVIDIA's NCF reference: {NVIDIA_NCF_SAMPLES_PER_GPU:,} per GPU, quoted).")
    fixed, per_sample = fit
    step = top["global_batch"] / top["samples_per_s"]
    fixed_share = min(1.0, max(0.0, fixed / step))
    need = compute_share / (1 - compute_share) * max(fixed, 0.0) / per_sample
    suggest = 1 << max(0, math.ceil(math.log2(max(need, 1.0))))
    return (lead + f". Fitted over the sizes: each step costs {1e3 * max(fixed, 0.0):.2f} ms whatever the batch "
            f"(optimizer step over every parameter, all-reduce, launches) plus {1e6 * per_sample:.2f} us per "
            f"sample, so at {top['per_rank_batch']} samples per rank {fixed_share:.0%} of the step does not "
            f"shrink when ranks are added. Compute would be {compute_share:.0%} of the step from about {suggest:,} "
            f"samples per rank (global batch {suggest * top['world_size']:,} on {top['world_size']} ranks) — "
            f"which is why NVIDIA's NCF reference trains at {NVIDIA_NCF_SAMPLES_PER_GPU:,} samples per GPU "
            "(quoted), with the lr rules, warmup and LARS of lessons 02-04 to keep such a batch converging.")


def optimization_reading(rows: list[dict], eval_every_epochs: float) -> str:
    """Whether strong scaling kept the optimization and weak scaling changed it, and what the largest
    run gained in time to target over one rank: read from the rows.

    Epochs to target are measured at evaluation points ``eval_every_epochs`` apart, so two runs
    whose epochs to target differ by less than one interval are the same within the measurement.
    Runs that did not reach the target are compared by final HR@10.
    """
    parts = []
    res = eval_every_epochs
    for mode in ("strong", "weak"):
        rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["world_size"])
        if len(rs) < 2:
            continue
        lo, hi = rs[0], rs[-1]
        sizes = f"{lo['world_size']} and {hi['world_size']} ranks (global batch {lo['global_batch']} and {hi['global_batch']})"
        if lo["epochs_to_target"] is not None and hi["epochs_to_target"] is not None:
            d = hi["epochs_to_target"] - lo["epochs_to_target"]
            status = "same" if abs(d) <= res + 1e-9 else "changed"
            if status == "same":
                what = (f"no measurable change in epochs to target between {sizes}: {lo['epochs_to_target']:.3g} and "
                        f"{hi['epochs_to_target']:.3g}, within one evaluation interval ({res:g} epochs)")
            else:
                what = (f"epochs to target {'grew' if d > 0 else 'shrank'} from {lo['epochs_to_target']:.3g} to "
                        f"{hi['epochs_to_target']:.3g} between {sizes}, more than one evaluation interval ({res:g} epochs)")
        else:
            status = "unreached"
            reached = [r["world_size"] for r in (lo, hi) if r["epochs_to_target"] is not None]
            what = (f"{'only ' + str(reached[0]) + ' rank(s)' if reached else 'neither run'} reached the target between "
                    f"{sizes}; final HR@10 {lo['final_hr']:.4f} and {hi['final_hr']:.4f}")
        if mode == "strong":
            lead = "Strong scaling (the same global batch)"
            same = "as it must: the same batch and the same sample order make it the same optimization"
            changed = ("which strong scaling should not do: the same global batch is the same optimization, "
                       "so check the batch arithmetic or the evaluation points")
        else:
            lead = "Weak scaling (the global batch grows with the ranks)"
            same = ("so at these batches the larger global batch cost no extra epochs here, and each rank's "
                    "throughput is the whole gain")
            changed = "the larger global batch changed the optimization (lessons 02-04: lr rules, warmup, LARS)"
        parts.append(f"{lead}: {what}" + {"same": f", {same}.", "changed": f"; {changed}.", "unreached": "."}[status])
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    one = next((r for r in strong if r["world_size"] == 1), None)
    top = strong[-1] if strong else None
    if one is not None and top is not None and top is not one:
        t1, tw = one["time_to_target_s"], top["time_to_target_s"]
        if t1 and tw:
            ratio = t1 / tw
            how = f"{ratio:.2g}x faster" if ratio >= 1 else f"{1 / ratio:.2g}x slower"
            parts.append(f"Time to target: {tw:.3g} s on {top['world_size']} ranks against {t1:.3g} s on one rank with "
                         f"the same setting, {how} (time-to-target efficiency {top['ttt_efficiency']:.2f}; one run "
                         "each, so rerun before trusting a few tens of percent); "
                         + ("data parallelism shortened the run here." if ratio >= 1 else
                            "on this machine data parallelism lengthened the run, so any speedup the ladder's "
                            "'+data parallel' rung shows over the baseline comes from the rungs below it."))
        else:
            parts.append("Time to target: not reached by " + " and ".join(
                f"{r['world_size']} rank(s)" for r in (one, top) if not r["time_to_target_s"]) + ", so no comparison.")
    return " ".join(parts) or "one data-parallel size only: nothing to compare."


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
