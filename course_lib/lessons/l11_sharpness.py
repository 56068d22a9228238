"""Lesson 11, sections 3 and 4: sharp and flat minima against the generalization gap (Keskar et al. 2017), the
landscape between two solutions, and growing the batch instead of decaying the lr (Smith et al. 2017).

Each run is measured once: the sharpness's interval comes from its own measurement (the power iteration's
tolerance, Hutchinson's standard error), a HR@10's from its binomial standard error over the users evaluated.
"""

from __future__ import annotations

import math

import torch

from .. import batch_science as bs
from .. import compare
from ..tables import Table
from .l11_noise_scale import ncf_loss, ncf_sampler, sig

EIGEN_TOL = 1e-3  # the power iteration stops when the top eigenvalue moves less than this, relative: its resolution
# Keskar et al.'s sharp minima are several times sharper; within 10% one eigenvalue on one batch says nothing
SHARPNESS_EFFECT = 0.10

def sharpness(model: torch.nn.Module, data, *, batch_size: int, iters: int, trace_samples: int = 0,
              seed: int = 0) -> dict:
    """The top Hessian eigenvalue (and, with ``trace_samples``, Hutchinson's trace) of NeuMF's
    training loss on one fixed batch of ``batch_size`` examples (the same batch for every model
    compared: ``seed``)."""
    batch = ncf_sampler(data, seed=seed)(batch_size)
    was_training = model.training
    model.eval()  # NeuMF has no dropout or BatchNorm; eval() states that the landscape is read, not trained
    top = bs.top_hessian_eigenvalue(model, ncf_loss, batch, iters=iters, tol=EIGEN_TOL, seed=seed)
    trace, trace_se = (bs.hutchinson_trace(model, ncf_loss, batch, samples=trace_samples, seed=seed, with_stderr=True)
                       if trace_samples else (None, None))
    with torch.no_grad():
        loss = float(ncf_loss(model, batch))
    model.train(was_training)
    return {"top_eigenvalue": top, "hessian_trace": trace, "hessian_trace_stderr": trace_se, "train_loss": loss}


def sharpness_rows(runs: dict, measured: dict) -> list[dict]:
    """One row per run (``runs``: label -> TrainResult, ``measured``: label -> :func:`sharpness`)."""
    rows = []
    for label, r in runs.items():
        m = measured[label]
        rows.append({"run": label, "batch": r.config["global_batch_size"], "lr": r.config["peak_lr"],
                     "steps": r.steps, "epochs": round(r.epochs, 2), "reached": r.reached,
                     "top eigenvalue": m["top_eigenvalue"], "Hessian trace": m["hessian_trace"],
                     "trace +/- (stderr)": m.get("hessian_trace_stderr"),
                     "train loss": m["train_loss"], "train HR@10": r.final_train_hr, "test HR@10": r.final_hr,
                     "gap": r.generalization_gap})
    return rows


def sharpness_table(rows: list[dict]) -> Table:
    se = any(r.get("trace +/- (stderr)") is not None for r in rows)
    cols = ["run", "batch", "lr", "steps", "epochs", "reached", "top eigenvalue", "Hessian trace"] \
        + (["trace +/- (stderr)"] if se else []) + ["train loss", "train HR@10", "test HR@10", "gap"]
    t = Table(cols, title="sharpness at the end of each run, next to its generalization gap")
    for r in rows:
        t.add(**{c: ("n/a" if r.get(c) is None else (f"{sig(r[c]):g}" if c == "trace +/- (stderr)" else r[c]))
                 for c in cols})
    return t


def landscape(model: torch.nn.Module, data, theta_small, theta_large, *, batch_size: int, points: int,
              seed: int = 0) -> dict:
    """The loss on one fixed batch along the line from the small-batch solution (0) to the
    large-batch one (1), a quarter beyond each end, and along one filter-normalized random
    direction around each (the same direction's seed for both)."""
    batch = ncf_sampler(data, seed=seed)(batch_size)
    line = [-0.25 + 1.5 * i / (points - 1) for i in range(points)]
    around = [-1.0 + 2.0 * i / (points - 1) for i in range(points)]
    return {"line_alphas": line,
            "line": bs.interpolation_slice(model, ncf_loss, batch, theta_small, theta_large, line),
            "around_alphas": around,
            "around_small": bs.random_direction_slice(model, ncf_loss, batch, around, theta=theta_small, seed=seed),
            "around_large": bs.random_direction_slice(model, ncf_loss, batch, around, theta=theta_large, seed=seed)}


def plot_landscape(slices: dict, small_label: str, large_label: str):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax1.plot(slices["line_alphas"], slices["line"], "-o", ms=3)
    for x, lab in ((0, small_label), (1, large_label)):
        ax1.axvline(x, color="gray", ls=":")
        ax1.annotate(lab, (x, max(slices["line"])), fontsize=8, ha="center")
    ax1.set_xlabel("alpha: (1 - alpha) small-batch + alpha large-batch")
    ax1.set_ylabel("training loss (one fixed batch)")
    ax1.set_title("between the two solutions", fontsize=10)
    ax2.plot(slices["around_alphas"], slices["around_small"], label=small_label)
    ax2.plot(slices["around_alphas"], slices["around_large"], label=large_label)
    ax2.set_xlabel("step along a filter-normalized random direction")
    ax2.set_title("around each solution (Li et al. 2018)", fontsize=10)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig




def growth_table(runs: dict) -> Table:
    """(a) lr decay at a fixed batch vs (b) the batch grown at the same milestones."""
    t = Table(["schedule", "batches", "lrs", "steps", "time to target (s)", "steps to target", "final HR@10",
               "train time (s)"], title="the same epochs: decay the lr, or grow the batch (Smith et al. 2017)")
    for label, r in runs.items():
        c = r.config
        epochs = range(int(math.ceil(c["max_epochs"])))
        bsz = sorted({batch_at(c, e) for e in epochs})
        lrs = sorted({c["peak_lr"] * _lr_factor_at(c, e) for e in epochs}, reverse=True)
        t.add(**{"schedule": label, "batches": " -> ".join(f"{b:,}" for b in bsz),
                 "lrs": " -> ".join(f"{x:.3g}" for x in lrs), "steps": r.steps,
                 "time to target (s)": r.time_to_target_s if r.reached else "not reached",
                 "steps to target": r.steps_to_target if r.reached else "not reached",
                 "final HR@10": r.final_hr, "train time (s)": r.train_time_s})
    return t


def _passed(c: dict, epoch: int) -> int:
    return sum(m <= epoch for m in c.get("milestones", ()))


def batch_at(c: dict, epoch: int) -> int:
    if c.get("at_milestone") != "grow_batch":
        return c["global_batch_size"]
    return int(round(c["global_batch_size"] * c["milestone_factor"] ** _passed(c, epoch)))


def _lr_factor_at(c: dict, epoch: int) -> float:
    return c["milestone_factor"] ** -_passed(c, epoch) if c.get("at_milestone") == "divide_lr" else 1.0


def hr_se(hr: float, users: int) -> float:
    """The binomial standard error of a HR@10 measured over ``users`` users (a hit or a miss each)."""
    return math.sqrt(max(hr * (1 - hr), 0.0) / users)


def sharpness_comparisons(small: dict, large: dict, users: int) -> list[compare.Comparison]:
    """Keskar et al.'s two halves from two rows of :func:`sharpness_rows`: is the large batch's minimum sharper
    (its top eigenvalue; its Hessian trace where Hutchinson's standard error was measured), and is its
    generalization gap wider (train HR@10 minus test HR@10, each with its binomial error over ``users``)?"""
    out = [compare.quantity_ratio("top Hessian eigenvalue, large / small batch",
                                  large["top eigenvalue"] / small["top eigenvalue"], 0.0, needed=SHARPNESS_EFFECT,
                                  resolution=2 * EIGEN_TOL, n="1/1",
                                  basis="one run each; the power iteration's tolerance")]
    se_s, se_l = small.get("trace +/- (stderr)"), large.get("trace +/- (stderr)")
    if se_s and se_l and small["Hessian trace"] and large["Hessian trace"]:
        rel = math.hypot(se_s / small["Hessian trace"], se_l / large["Hessian trace"])
        out.append(compare.quantity_ratio("Hessian trace, large / small batch",
                                          large["Hessian trace"] / small["Hessian trace"], rel,
                                          needed=SHARPNESS_EFFECT, n="1/1",
                                          basis="Hutchinson's standard errors"))
    if small["gap"] is not None and large["gap"] is not None:
        se = [math.hypot(hr_se(r["train HR@10"], users), hr_se(r["test HR@10"], users)) for r in (small, large)]
        out.append(compare.difference("generalization gap, large - small batch", small["gap"], se[0], large["gap"],
                                      se[1], needed=compare.HR_EFFECT, unit="HR@10", n="1/1",
                                      basis=f"binomial errors over {users:,} users"))
    return out


def growth_comparisons(decay, grow, users: int) -> list[compare.Comparison]:
    """Smith et al.'s claim, the accuracy half: did growing the batch end as accurate as decaying the lr (final
    HR@10, grown - decayed, binomial errors over ``users``)? The steps each took are the growth table's."""
    return [compare.difference("final HR@10, batch grown - lr decayed", decay.final_hr, hr_se(decay.final_hr, users),
                               grow.final_hr, hr_se(grow.final_hr, users), needed=compare.HR_EFFECT, unit="HR@10",
                               n="1/1", basis=f"binomial errors over {users:,} users")]
