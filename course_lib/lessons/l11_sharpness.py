"""Lesson 11, sections 3-4: sharpness against the gap (Keskar et al. 2017), growing the batch (Smith et al. 2017)."""

from __future__ import annotations

import math

import torch

from .. import batch_science as bs, compare
from ..tables import Table
from .l11_noise_scale import at_its_error, ncf_loss, ncf_sampler

EIGEN_TOL = 1e-3  # the power iteration stops when the top eigenvalue moves less than this, relative: its resolution
SHARPNESS_EFFECT = 0.10  # Keskar et al.'s sharp minima are several times sharper: within 10% says nothing


def sharpness_row(label: str, r, data, *, batch_size: int, iters: int, trace_samples: int = 0, seed: int = 0):
    """A run (a TrainResult that kept its model) with its sharpness at the end: the top Hessian eigenvalue and
    Hutchinson's trace with its standard error, of the training loss on one fixed batch (the same for every run)."""
    batch = ncf_sampler(data, seed=seed)(batch_size)
    model = r.model  # NeuMF has no dropout or BatchNorm: its train and eval modes compute the same loss
    top = bs.top_hessian_eigenvalue(model, ncf_loss, batch, iters=iters, tol=EIGEN_TOL, seed=seed)
    trace, trace_se = (bs.hutchinson_trace(model, ncf_loss, batch, samples=trace_samples, seed=seed, with_stderr=True)
                       if trace_samples else (None, None))
    with torch.no_grad():
        loss = float(ncf_loss(model, batch))
    return {"run": label, "batch": r.config["global_batch_size"], "lr": r.config["peak_lr"], "steps": r.steps,
            "epochs": round(r.epochs, 2), "reached": r.reached, "top eigenvalue": top, "Hessian trace": trace,
            "trace +/- (stderr)": trace_se, "train loss": loss, "train HR@10": r.final_train_hr,
            "test HR@10": r.final_hr, "gap": r.generalization_gap}


def sharpness_table(rows: list[dict]) -> Table:
    se = "trace +/- (stderr)"  # quoted to its second significant digit
    return Table(list(rows[0]), [{**r, se: r[se] and at_its_error(r[se], r[se])} for r in rows])


def landscape(model: torch.nn.Module, data, theta_small, theta_large, *, batch_size: int, points: int,
              seed: int = 0) -> dict:
    """The loss on one fixed batch along the line from the small-batch solution (0) to the large-batch one (1), a
    quarter beyond each end, and along one filter-normalized random direction around each (the same for both)."""
    batch = ncf_sampler(data, seed=seed)(batch_size)
    line = [-0.25 + 1.5 * i / (points - 1) for i in range(points)]
    around = [-1.0 + 2.0 * i / (points - 1) for i in range(points)]
    return {"line_alphas": line, "around_alphas": around,
            "line": bs.interpolation_slice(model, ncf_loss, batch, theta_small, theta_large, line),
            "around_small": bs.random_direction_slice(model, ncf_loss, batch, around, theta=theta_small, seed=seed),
            "around_large": bs.random_direction_slice(model, ncf_loss, batch, around, theta=theta_large, seed=seed)}


def plot_landscape(slices: dict, small_label: str, large_label: str):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax1.plot(slices["line_alphas"], slices["line"], "-o", ms=3)
    for x, lab, around in ((0, small_label, "around_small"), (1, large_label, "around_large")):
        ax1.axvline(x, color="gray", ls=":")
        ax1.annotate(lab, (x, max(slices["line"])), fontsize=8, ha="center")
        ax2.plot(slices["around_alphas"], slices[around], label=lab)
    ax1.set(xlabel="alpha (0: small batch, 1: large)", ylabel="training loss")
    ax2.set(xlabel="step along a random direction")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def growth_table(runs: dict) -> Table:
    t = Table(["schedule", "batches", "lrs", "steps", "time to target (s)", "steps to target", "final HR@10",
               "train time (s)"])
    for label, r in runs.items():
        c = r.config  # its milestones all fall within its epochs
        k = [c["milestone_factor"] ** i for i in range(len(c.get("milestones", ())) + 1)]
        batches, lrs = (k if c.get("at_milestone") == kind else [1] for kind in ("grow_batch", "divide_lr"))
        t.add(**{"schedule": label, "batches": " -> ".join(f"{round(c['global_batch_size'] * f):,}" for f in batches),
                 "lrs": " -> ".join(f"{c['peak_lr'] / f:.3g}" for f in lrs), "steps": r.steps,
                 "time to target (s)": r.time_to_target_s if r.reached else "not reached",
                 "steps to target": r.steps_to_target if r.reached else "not reached",
                 "final HR@10": r.final_hr, "train time (s)": r.train_time_s})
    return t


def hr_se(hr: float, users: int) -> float:
    return math.sqrt(max(hr * (1 - hr), 0.0) / users)


def sharpness_comparisons(small: dict, large: dict, users: int) -> list[compare.Comparison]:
    """Keskar et al.'s two halves: is the large batch's minimum sharper, and its generalization gap wider?"""
    out = [compare.quantity_ratio("top eigenvalue, large / small", large["top eigenvalue"] / small["top eigenvalue"],
                                  0.0, needed=SHARPNESS_EFFECT, resolution=2 * EIGEN_TOL, n="1/1",
                                  basis="iteration tolerance")]
    tr, se = "Hessian trace", "trace +/- (stderr)"
    if small[se] and large[se] and small[tr] and large[tr]:
        out.append(compare.quantity_ratio(f"{tr}, large / small", large[tr] / small[tr], math.hypot(
            small[se] / small[tr], large[se] / large[tr]), needed=SHARPNESS_EFFECT, n="1/1", basis="Hutchinson"))
    if small["gap"] is not None and large["gap"] is not None:
        se = [math.hypot(hr_se(r["train HR@10"], users), hr_se(r["test HR@10"], users)) for r in (small, large)]
        out.append(compare.difference("gap, large - small", small["gap"], se[0], large["gap"], se[1],
                                      needed=compare.HR_EFFECT, unit="HR@10", n="1/1",
                                      basis=f"binomial, {users:,} users"))
    return out


def growth_comparisons(decay, grow, users: int) -> list[compare.Comparison]:
    """Smith et al.'s accuracy half: final HR@10, batch grown - lr decayed (the steps are the growth table's)."""
    return [compare.difference("final HR@10, grown - decayed", decay.final_hr, hr_se(decay.final_hr, users),
                               grow.final_hr, hr_se(grow.final_hr, users), needed=compare.HR_EFFECT, unit="HR@10",
                               n="1/1", basis=f"binomial, {users:,} users")]
