"""Figures of what communication costs, measured and modelled (lesson 06).

Matplotlib is imported inside the functions: importing this module sets no rcParams,
opens no figure and picks no backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import cost

if TYPE_CHECKING:
    from . import bench


def plot_allreduce_cost(result: "bench.BenchResult", *, gamma: float = 0.0, algorithms=None, axes=None):
    """Two panels: time vs size (log-log) and bus bandwidth vs size, for one sweep.

    Left: the measured time per all-reduce (max over ranks), the fitted ``alpha + beta n``
    line, and each algorithm's predicted time for the same number of ranks. The algorithms
    need per-link ``alpha, beta``; they come from the fit under the assumption that the
    library ran a ring (``cost.link_alpha_beta_from_ring_fit``), so the ring curve lies on
    the fit and the others show what the same links would give with another algorithm.
    With one rank there are no links, and only the measurement and the fit are drawn.
    Right: measured busbw, and the asymptote ``1 / beta_link`` that a ring would reach.

    Returns ``(fig, (ax_time, ax_busbw))``.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax_t, ax_bw = axes
    fig = ax_t.figure
    p = result.world_size
    n = result.sizes_bytes
    t = result.times_s
    alpha, beta = result.fit()
    grid = np.logspace(np.log10(n.min()), np.log10(n.max()), 200)

    ax_t.loglog(n, t * 1e6, "o", color="black", label="measured", zorder=3)
    ax_t.loglog(grid, (alpha + beta * grid) * 1e6, "-", color="black", lw=2, alpha=0.4,
                label=f"fit: {alpha * 1e6:.3g} us + n / {1 / beta / cost.GB:.3g} GB/s" if beta > 0
                else f"fit: {alpha * 1e6:.3g} us")
    link = None
    if p > 1:
        link = cost.link_alpha_beta_from_ring_fit(alpha, beta, p)
        names = list(algorithms or cost.ALLREDUCE_ALGORITHMS)
        preds = cost.predict_times(grid, p, link[0], link[1], gamma)
        for name in names:
            ax_t.loglog(grid, preds[name] * 1e6, "--", lw=1, label=f"{name} (model)")
    ax_t.set_xlabel("message size (bytes)")
    ax_t.set_ylabel("time per all-reduce (us)")
    ax_t.set_title(f"all-reduce time, p = {p} ({result.backend})")
    ax_t.legend(fontsize=8)

    busbw = np.array([r["busbw_GBps"] for r in result.rows])
    ax_bw.semilogx(n, busbw, "o-", color="black", label="measured busbw")
    if link is not None and link[1] > 0:
        ax_bw.axhline(1 / link[1] / cost.GB, color="gray", ls=":", label="1 / beta (link bandwidth from fit)")
    ax_bw.set_xlabel("message size (bytes)")
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_bw.set_title("busbw = algbw * 2(p-1)/p  (nccl-tests)")
    ax_bw.legend(fontsize=8)
    fig.tight_layout()
    return fig, (ax_t, ax_bw)


def plot_ddp_buckets(result: "bench.BucketResult", ax=None):
    """Bar chart of DDP step time per bucket cap, next to the no-overlap (and floor) rows."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    labels, values, colors = [], [], []
    for r in result.rows:
        if r["overlap"] is True:
            labels.append(f"DDP\n{r['bucket_cap_mb']:g} MiB")
            colors.append("tab:blue")
        elif r["overlap"] is False:
            labels.append(f"no overlap\n1 x {r['bucket_cap_mb']:.3g} MiB")
            colors.append("tab:red")
        else:
            labels.append("no comm.\n(floor)")
            colors.append("tab:gray")
        values.append(r["step_ms"])
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"DDP gradient buckets, {result.world_size} ranks ({result.backend})")
    ax.figure.tight_layout()
    return ax.figure, ax
