"""Lesson 04's measurement: why one learning rate cannot serve NeuMF's layers.

With a mean-reduced loss *every* gradient is divided by the batch size B, the MLP's and the
embeddings' alike, so the division is not what sets them apart. An embedding row receives
gradient only from the samples that contain its user or item: its expected gradient is its
*frequency* (count / B) times its mean per-sample gradient, whatever B is, and most rows are
rare; the MLP's weights see every sample. :func:`layer_gradient_norms` measures it on one
batch per size from the same initial model: per weight matrix ``||g|| / ||w||`` (the inverse
of LARS's trust ratio, up to its coefficient), and per item-embedding row its gradient norm
against its frequency in the batch. On one batch the per-sample gradients of a row partly
cancel, so the measured log-log slope sits between 0.5 (random directions) and 1 (aligned).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from ..metrics import line_fit
from ..tables import Table
from ..sweeps import fastest
from ..train.ncf import TrainConfig, bce_sum, build_model, make_batches


def layer_gradient_norms(data, cfg: TrainConfig, batch_sizes, *, device="cpu") -> dict:
    """Gradient and weight norms of a freshly initialised NeuMF (``cfg.seed``) on one batch per size.

    Returns ``{"layers": [row, ...], "rows": {B: (frequency, row_grad_norm)}}``: a row per
    (batch size, weight matrix) with ``weight_norm``, ``grad_norm`` and ``grad_to_weight``;
    and, per batch size, the touched rows of the MLP's item embedding as tensors of their
    frequency in the batch (count / B) and their gradient norm.
    """
    data = data.to(device)
    out = {"layers": [], "rows": {}}
    for b in batch_sizes:
        torch.manual_seed(cfg.seed)
        model = build_model(data, cfg).to(device)
        batch = next(iter(make_batches(data, cfg.replace(global_batch_size=b))))
        n = batch[0].numel()
        (bce_sum(model, batch) / n).backward()  # the mean loss, as every run trains it
        for name, p in model.named_parameters():
            if p.ndim < 2:
                continue
            w, g = p.detach().norm().item(), p.grad.norm().item()
            out["layers"].append({"batch": n, "layer": name, "weight_norm": w, "grad_norm": g,
                                  "grad_to_weight": g / w if w else float("nan")})
        counts = torch.bincount(batch[1], minlength=data.num_items)
        touched = counts > 0
        out["rows"][n] = ((counts[touched].float() / n).cpu(), model.mlp_item.weight.grad[touched].norm(dim=1).cpu())
    return out


def layer_norms_table(measured: dict) -> Table:
    """One row per weight matrix, ``||g|| / ||w||`` at each batch size side by side."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    t = Table(["layer"] + [f"||g||/||w|| at B={b}" for b in sizes],
              title="Gradient over weight norm per layer (one batch, same initial model)")
    for layer in dict.fromkeys(r["layer"] for r in measured["layers"]):
        by_b = {r["batch"]: r["grad_to_weight"] for r in measured["layers"] if r["layer"] == layer}
        t.add(layer=layer, **{f"||g||/||w|| at B={b}": f"{by_b[b]:.2e}" for b in sizes})
    return t


def frequency_slope(measured: dict) -> dict[int, float]:
    """Per batch size, the least-squares slope of log(row gradient norm) on log(row frequency):
    about 1 when a row's gradient is proportional to how often it appears."""
    slopes = {}
    for b, (freq, norm) in measured["rows"].items():
        keep = norm > 0
        fit = line_fit(freq[keep].log().tolist(), norm[keep].log().tolist())
        if fit is not None:
            slopes[b] = fit[1]
    return slopes


def reading(measured: dict) -> str:
    """What the learner's own measurement shows, in two sentences (every number from ``measured``)."""
    sizes = sorted({r["batch"] for r in measured["layers"]})
    lo, hi = sizes[0], sizes[-1]
    by = {(r["batch"], r["layer"]): r["grad_to_weight"] for r in measured["layers"]}
    layers = list(dict.fromkeys(r["layer"] for r in measured["layers"]))
    spread = {b: max(by[(b, x)] for x in layers) / min(by[(b, x)] for x in layers) for b in sizes}
    change = max(by[(lo, x)] / by[(hi, x)] for x in layers)
    slopes = frequency_slope(measured)
    slope_text = ", ".join(f"{s:.2f} at B={b}" for b, s in sorted(slopes.items()))
    return (f"||g||/||w|| differs between NeuMF's layers by {spread[lo]:.0f} times at batch {lo} and "
            f"{spread[hi]:.0f} times at batch {hi}, so one global lr is too large for some layers or too "
            f"small for others; {hi // lo}x the batch changed no layer's ratio by more than {change:.1f}x "
            f"(every gradient is a mean, so the batch size divides them all alike). An embedding row's "
            f"gradient grows with its frequency in the batch (log-log slope {slope_text}; 1 would be "
            "proportional): rare users and items get small steps.")


def plot_row_gradients(measured: dict, ax=None):
    """Each touched item-embedding row: gradient norm vs its frequency in the batch, per batch size."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4))
    for b, (freq, norm) in sorted(measured["rows"].items()):
        ax.loglog(freq.numpy(), norm.numpy(), ".", ms=3, alpha=0.5, label=f"batch {b}")
    ax.set(xlabel="row frequency in the batch (count / B)", ylabel="row gradient norm",
           title="Embedding rows: the gradient follows frequency, not the batch size")
    ax.legend(fontsize=8, markerscale=3)
    return ax.figure


def race_reading(results, *, target_hr: float, floor_hr: float | None = None) -> str:
    """Per optimizer, what its best run did (from the records only), then the fastest overall.

    A run's lr that sits at the edge of the grid it was swept over is flagged: the best may lie
    beyond it. ``floor_hr``: the popularity ranking's HR, for runs that ended near it.
    """
    best_hr = lambda r: r.best_hr if r.best_hr is not None else (r.final_hr or 0.0)  # noqa: E731
    lines = []
    by_opt: dict[str, list] = {}
    for r in results:
        by_opt.setdefault(r.config["optimizer"], []).append(r)
    for opt, runs in by_opt.items():
        lrs = sorted(r.config["peak_lr"] for r in runs)
        reached = [r for r in runs if r.time_to_target_s is not None]
        best = min(reached, key=lambda r: r.time_to_target_s) if reached else max(runs, key=best_hr)
        lr = best.config["peak_lr"]
        edge = " (the edge of its grid: a better lr may lie beyond)" if len(lrs) > 1 and lr in (lrs[0], lrs[-1]) else ""
        if reached:
            what = f"reached HR@10 {target_hr} in {best.time_to_target_s:.1f} s ({best.steps_to_target} steps)"
        else:
            near = ""
            if floor_hr is not None and best_hr(best) < floor_hr:
                near = f", below the popularity ranking's {floor_hr:.3f}"
            what = f"did not reach {target_hr}: best HR@10 {best_hr(best):.3f}{near}"
        lines.append(f"{opt} (lr {', '.join(f'{x:.3g}' for x in lrs)}): best at lr {lr:.3g}{edge}, {what}")
    win = fastest(results)
    lines.append(f"fastest to the target: {win.config['optimizer']} at lr {win.config['peak_lr']:.3g}" if win
                 else "no run reached the target")
    return "\n".join(lines)
