"""The figures lesson 01 shows (and later lessons reuse). No side effects at import:
pyplot is imported inside each function and no rcParams are changed."""

from __future__ import annotations


def _axes(ax, figsize=(6, 3.5)):
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    return fig, ax


def plot_curve(curve: dict, *, target_hr: float | None = None, ax=None, label: str = "", x: str = "time_s"):
    """HR@10 against the training clock (or ``x="epoch"``), with the target as a dashed line."""
    fig, ax = _axes(ax)
    pts = [(t, h) for t, h in zip(curve[x], curve["hr"]) if h is not None]
    if pts:
        ax.plot(*zip(*pts), marker="o", ms=3, label=label or None)
    if target_hr is not None:
        ax.axhline(target_hr, ls="--", color="gray", lw=1)
        ax.text(ax.get_xlim()[0], target_hr, f" target {target_hr:.3f}", va="bottom", color="gray", fontsize=8)
    ax.set_xlabel("training time (s, evaluation excluded)" if x == "time_s" else x)
    ax.set_ylabel("HR@10")
    if label:
        ax.legend(loc="lower right", fontsize=8)
    return fig


def plot_results(results, *, target_hr: float | None = None, labels=None, ax=None, x: str = "time_s"):
    """Several runs' HR@10 curves on one axis."""
    fig, ax = _axes(ax)
    for i, r in enumerate(results):
        name = labels[i] if labels else f"batch {r.config['batch_size']}, lr {r.config['lr']:g}"
        plot_curve(r.curve, ax=ax, label=name, x=x)
    if target_hr is not None:
        ax.axhline(target_hr, ls="--", color="gray", lw=1, label=f"target {target_hr:.3f}")
        ax.legend(loc="lower right", fontsize=8)
    return fig


def plot_throughput(table, *, ax=None):
    """Samples/s against batch size (log-log) from :func:`course_lib.bench.throughput_vs_batch`."""
    fig, ax = _axes(ax)
    xs = [r["batch size"] for r in table.rows]
    ys = [r["samples/s"] for r in table.rows]
    ax.plot(xs, ys, marker="o")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (samples)")
    ax.set_ylabel("training samples/s")
    ax.set_title(table.title or "throughput vs batch size", fontsize=10)
    return fig


def plot_loader_comparison(comparison: dict, *, ax=None):
    """Bars: samples/s of the DataLoader and the device-resident sampler, loading alone and training."""
    import numpy as np

    fig, ax = _axes(ax)
    groups = ["loading only", "training"]
    dl = [comparison["dataloader_load_sps"], comparison["dataloader_train_sps"]]
    dev = [comparison["device_load_sps"], comparison["device_train_sps"]]
    xs = np.arange(len(groups))
    ax.bar(xs - 0.2, dl, 0.4, label="DataLoader (per-sample)")
    ax.bar(xs + 0.2, dev, 0.4, label="device-resident sampler")
    ax.set_xticks(xs, groups)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s")
    ax.set_title(f"batch {comparison['batch_size']} on {comparison['device']}", fontsize=10)
    ax.legend(fontsize=8)
    return fig
