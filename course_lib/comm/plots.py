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
                label=f"fit: {cost.fit_text(alpha, beta)}" if beta > 0 else f"fit: {alpha * 1e6:.3g} us")
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
    """Bar chart of DDP step time per bucket cap, next to the no-overlap (and floor) rows.

    Each bar is the median over repeats; the whisker spans the repeats' min and max (the run-to-run
    noise), when the rows carry ``step_ms_repeats``. Compressed rows are left to their own table.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    labels, values, colors, lo, hi = [], [], [], [], []
    for r in result.bucket_rows:
        n = r.get("allreduces_per_step")
        count = f"\n{n:.3g} all-reduce{'s' if n != 1 else ''}" if n is not None else ""
        if r["overlap"] is True:
            labels.append(f"DDP\n{r['bucket_cap_mb']:g} MiB{count}")
            colors.append("tab:blue")
        elif r["overlap"] is False:
            labels.append(f"no overlap\n1 x {r['bucket_cap_mb']:.3g} MiB")
            colors.append("tab:red")
        else:
            labels.append("no comm.\n(floor)")
            colors.append("tab:gray")
        values.append(r["step_ms"])
        reps = r.get("step_ms_repeats") or [r["step_ms"]]
        lo.append(r["step_ms"] - min(reps))
        hi.append(max(reps) - r["step_ms"])
    ax.bar(range(len(values)), values, color=colors)
    if any(lo) or any(hi):
        ax.errorbar(range(len(values)), values, yerr=[lo, hi], fmt="none", ecolor="black", capsize=3, lw=1)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_ylabel("step time (ms)")
    reps = max((len(r.get("step_ms_repeats") or []) for r in result.bucket_rows), default=0)
    ax.set_title(f"DDP gradient buckets, {result.world_size} ranks ({result.backend})"
                 + (f"; whiskers: min-max of {reps} repeats" if reps > 1 else ""), fontsize=10)
    ax.figure.tight_layout()
    return ax.figure, ax


def plot_bucket_timeline(result: "bench.BucketResult", ax=None):
    """One step per variant, from the recorded stamps: forward, backward, each all-reduce, optimizer.

    Per variant a lane: forward (light gray), backward compute (gray: until the last bucket was
    ready, or until backward returned without DDP's hooks), backward waiting for the all-reduces
    (hatched: DDP's backward returns only once every bucket is reduced), the optimizer step
    (green). Below it, one thin bar per all-reduce, from "ready" (the hook was called) to "done":
    where a bar lies under the gray, communication overlapped backward compute. The step shown is
    the rank's step of median length (``timeline`` of :func:`course_lib.comm.bench.ddp_bucket_benchmark`).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = [r for r in result.rows if r.get("timeline")]
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 1.4 + 0.75 * max(1, len(rows))))
    colors = ("tab:blue", "tab:orange")
    for i, r in enumerate(rows):
        tl = r["timeline"]
        y = i
        bw0, bw1, end = tl["backward_start_ms"], tl["backward_end_ms"], tl["step_ms"]
        ars = tl["allreduces_ms"]
        compute_end = max(a for a, _, _ in ars) if (ars and r["overlap"]) else bw1
        compute_end = min(max(compute_end, bw0), bw1)
        ax.broken_barh([(0, bw0)], (y - 0.4, 0.35), color="lightgray")
        ax.broken_barh([(bw0, compute_end - bw0)], (y - 0.4, 0.35), color="dimgray")
        if bw1 > compute_end:
            ax.broken_barh([(compute_end, bw1 - compute_end)], (y - 0.4, 0.35), facecolor="white",
                           edgecolor="dimgray", hatch="///")
        opt0 = max([bw1] + [b for _, b, _ in ars])
        ax.broken_barh([(opt0, max(end - opt0, 0))], (y - 0.4, 0.35), color="tab:green")
        n = len(ars)
        for j, (a, b, _) in enumerate(ars):
            h = 0.4 / max(n, 1)
            ax.broken_barh([(a, max(b - a, 1e-6))], (y + 0.0 + j * h, h * 0.85), color=colors[j % 2])
    ax.set_yticks(range(len(rows)), [_timeline_label(r) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.6)
    ax.set_xlabel("ms from the start of the step (forward first)")
    ax.set_title(f"One step per variant, {result.world_size} ranks ({result.backend}, "
                 f"{rows[0]['clock'] if rows and rows[0].get('clock') else 'recorded'} stamps; the median step)",
                 fontsize=10)
    fig = ax.figure
    fig.legend(handles=[Patch(color="lightgray", label="forward"), Patch(color="dimgray", label="backward compute"),
                       Patch(facecolor="white", edgecolor="dimgray", hatch="///",
                             label="backward waits for all-reduces"),
                       Patch(color="tab:green", label="optimizer step"),
                       Patch(color="tab:blue", label="an all-reduce, ready -> done")],
               fontsize=7, loc="lower center", ncol=5)
    fig.tight_layout(rect=(0, min(0.4, 0.4 / fig.get_size_inches()[1]), 1, 1))  # room for the legend
    return fig, ax


def _timeline_label(r: dict) -> str:
    if r["overlap"] is None:
        return "no communication"
    if r["overlap"] is False:
        return "one all-reduce\nafter backward"
    n = r.get("allreduces_per_step")
    tail = f"\n{n:.3g} bucket{'s' if n != 1 else ''}" if n is not None else ""
    if r.get("compression") not in (None, "none"):
        return f"{r['compression']} compressed\n{r['bucket_cap_mb']:g} MiB{tail}"
    return f"DDP {r['bucket_cap_mb']:g} MiB{tail}"


def plot_ring_steps(p: int, ncols: int = 4):
    """The ring all-reduce on ``p`` ranks, round by round: reduce-scatter, then all-gather.

    Drawn from lesson 08's schedules (``ring_reduce_scatter_schedule``, ``ring_all_gather_schedule``,
    replayed with :meth:`Schedule.replay` on symbols): one panel per moment, ranks top to bottom,
    the tensor's ``p`` chunks left to right; a cell says whose contributions it holds (``0+1``;
    for ``p > 4`` how many) and is darker the more ranks it sums; arrows are the round's messages,
    red where the receiver adds, black where it copies. Returns ``(fig, axes)``.
    """
    import matplotlib.pyplot as plt

    from .collectives import Schedule, ring_all_gather_schedule, ring_reduce_scatter_schedule

    rs, ag = ring_reduce_scatter_schedule(p, p), ring_all_gather_schedule(p, p)  # one element per chunk
    rounds = [("reduce-scatter", k, rnd) for k, rnd in enumerate(rs.rounds)] + \
             [("all-gather", k, rnd) for k, rnd in enumerate(ag.rounds)]
    everything = rs.rounds + ag.rounds
    start = [[(r,) for _ in range(p)] for r in range(p)]
    panels = [("start: each rank its own", start, ())]
    for i, (phase, k, rnd) in enumerate(rounds):
        state = Schedule("ring", p, p, everything[:i + 1]).replay(start)
        total = len(rs.rounds) if phase == "reduce-scatter" else len(ag.rounds)
        panels.append((f"{phase} {k + 1}/{total}", state, rnd))
    ncols = max(1, min(ncols, len(panels)))
    nrows = -(-len(panels) // ncols)
    size = 0.45 * max(p, 2) + 1.1
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(ncols * size, 6.5), nrows * (size + 0.3) + 0.5),
                             squeeze=False)
    cmap = plt.get_cmap("Blues")
    for ax, (title, state, rnd) in zip(axes.flat, panels):
        for r in range(p):
            for c in range(p):
                held = sorted(state[r][c])
                ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=cmap(0.05 + 0.5 * len(held) / p),
                                           edgecolor="white"))
                text = "+".join(map(str, held)) if p <= 4 else str(len(held))
                ax.text(c - 0.12, r, text, ha="center", va="center", fontsize=7 if p <= 4 else 6)
        for t in rnd:
            c = t.lo  # one element per chunk: the element is the chunk
            ax.annotate("", xy=(c + 0.33, t.dst), xytext=(c + 0.33, t.src),
                        arrowprops=dict(arrowstyle="-|>", color="tab:red" if t.reduce else "black", lw=1.3,
                                        connectionstyle="arc3,rad=0.25"))
        ax.set_xlim(-0.5, p - 0.5)
        ax.set_ylim(p - 0.5, -0.5)
        ax.set_xticks(range(p), [f"c{c}" for c in range(p)], fontsize=6)
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=6)
        ax.set_title(title, fontsize=8)
        ax.set_aspect("equal")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"ring all-reduce, p = {p}: {len(rs.rounds)} reduce-scatter + {len(ag.rounds)} all-gather rounds\n"
                 "each rank sends one chunk (1/p of the tensor) per round; red arrow: added, black: copied",
                 fontsize=9)
    fig.tight_layout()
    return fig, axes


# --------------------------------------------------------------------------- lesson 08: who sends what to whom


def _range_label(schedule, t) -> str:
    """'c2' for chunk 2 of a ring (chunk_bounds), else 'lo:hi'; '' for the whole tensor."""
    from .collectives import chunk_bounds

    if t.lo == 0 and t.hi == schedule.n:
        return ""
    bounds = chunk_bounds(schedule.n, schedule.p)
    if schedule.name.startswith("ring") and (t.lo, t.hi) in bounds:
        return f"c{bounds.index((t.lo, t.hi))}"
    return f"{t.lo}:{t.hi}"


def plot_schedule(schedule, ax=None):
    """One algorithm step by step: ranks top to bottom, rounds left to right, one arrow per message.

    An arrow goes from the sender at the start of a round to the receiver at its end; blue
    arrows overwrite the receiver's copy, red ones are added to it (a reduction). Labels name
    the part of the tensor sent (``c2``: chunk 2 of ``chunk_bounds``; ``3:5``: elements 3..4;
    none: the whole tensor). Drawn from the same :class:`Schedule` the executor runs.
    """
    import matplotlib.pyplot as plt

    p, rounds = schedule.p, schedule.rounds
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 + 1.1 * max(1, len(rounds)), 0.5 + 0.45 * p))
    for r in range(p):
        ax.axhline(r, color="lightgray", lw=1, zorder=0)
    for k, rnd in enumerate(rounds):
        for t in rnd:
            color = "tab:red" if t.reduce else "tab:blue"
            ax.annotate("", xy=(k + 1, t.dst), xytext=(k, t.src),
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=1.3, shrinkA=3, shrinkB=3))
            label = _range_label(schedule, t)
            if label:
                ax.text(k + 0.5, (t.src + t.dst) / 2, label, fontsize=7, ha="center", va="center",
                        bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
    if schedule.root is not None:
        ax.plot([0], [schedule.root], "k*", ms=10, zorder=3)
    ax.set_xlim(-0.3, max(1, len(rounds)) + 0.3)
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=8)
    ax.set_xticks(range(len(rounds) + 1))
    ax.set_xlabel("round", fontsize=8)
    ax.set_title(f"{schedule.name}: p = {p}, {len(rounds)} rounds, {schedule.messages} messages", fontsize=9)
    kinds = {t.reduce for rnd in rounds for t in rnd}
    ax.text(1.0, -0.02,
            "  ".join(k for k, on in (("red: added", True in kinds), ("blue: copied", False in kinds)) if on),
            transform=ax.transAxes, fontsize=7, ha="right", va="top")
    return ax.figure, ax


def plot_schedules(schedules, ncols: int = 2):
    """Several schedules in one figure (one panel each); returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    schedules = list(schedules)
    nrows = -(-len(schedules) // ncols)
    widest = max(len(s.rounds) for s in schedules)
    tallest = max(s.p for s in schedules)
    fig, axes = plt.subplots(nrows, ncols, figsize=(ncols * (1.5 + 0.75 * widest), nrows * (0.9 + 0.42 * tallest)),
                             squeeze=False)
    for ax, s in zip(axes.flat, schedules):
        plot_schedule(s, ax=ax)
    for ax in list(axes.flat)[len(schedules):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig, axes


_COLORS = {"ring": "tab:blue", "recursive doubling": "tab:orange", "tree": "tab:green", "backend": "black",
           "flat tree": "tab:purple", "binomial tree": "tab:green", "pipelined chain": "tab:blue",
           "backend broadcast": "black"}


def plot_predicted_vs_measured(result, alpha: float, beta: float, gamma: float = 0.0, kind: str = "allreduce",
                               segments: int = 8):
    """Per ``p``: measured time of each algorithm (dots) and its alpha-beta-gamma prediction (line).

    ``alpha, beta`` per message (the ping-pong's), ``gamma`` per byte added. The backend's own
    collective is drawn as black dots, with no model (we do not know which algorithm it ran).
    Returns ``(fig, axes)``.
    """
    import matplotlib.pyplot as plt

    from .collectives import COSTS

    ps = result.world_sizes
    fig, axes = plt.subplots(1, len(ps), figsize=(4.2 * len(ps), 3.6), squeeze=False, sharey=True)
    algos = [a for a in result.algorithms if any(r["kind"] == kind and r["algorithm"] == a for r in result.rows)]
    for ax, p in zip(axes[0], ps):
        for a in algos:
            n, t = result.times(p, a)
            if not len(n):
                continue
            color = _COLORS.get(a, None)
            ax.loglog(n, t * 1e6, "o", color=color, ms=4, label=f"{a} (measured)")
            if a in COSTS:
                grid = np.logspace(np.log10(n.min()), np.log10(n.max()), 100)
                kw = {"segments": segments} if a == "pipelined chain" else {}
                pred = [COSTS[a](x, p, alpha, beta, gamma, **kw) for x in grid]
                ax.loglog(grid, np.array(pred) * 1e6, "-", color=color, lw=1, alpha=0.7)
        ax.set_title(f"p = {p}", fontsize=10)
        ax.set_xlabel("message size (bytes)")
    axes[0][0].set_ylabel("time per operation (us)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{kind}: measured (dots) vs alpha-beta-gamma model (lines)", fontsize=10)
    fig.tight_layout()
    return fig, axes


def plot_extrapolation(links: dict, sizes_bytes=(8 * 2**10, 256 * 2**20), ps=None, gamma: float = 0.0):
    """Predicted all-reduce time vs number of ranks (8 ... 1024), one panel per message size.

    ``links``: name -> ``(alpha_s, beta_s_per_byte)``; one line style per link, one colour per
    algorithm (ring, recursive doubling, the binomial tree, Rabenseifner). Returns ``(fig, axes)``.
    """
    import matplotlib.pyplot as plt

    ps = list(ps or [2**k for k in range(3, 11)])
    names = {"ring": cost.ring_allreduce_time, "recursive doubling": cost.butterfly_allreduce_time,
             "tree": cost.binary_tree_allreduce_time, "rabenseifner": cost.rabenseifner_allreduce_time}
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(sizes_bytes), figsize=(5.5 * len(sizes_bytes), 4.2), squeeze=False)
    for j, n in enumerate(sizes_bytes):
        ax = axes[0][j]
        for i, (link, (a, b)) in enumerate(links.items()):
            for name, f in names.items():
                ax.loglog(ps, [f(n, p, a, b, gamma) * 1e3 for p in ps], styles[i % len(styles)],
                          color=_COLORS.get(name, "gray"), label=f"{name}, {link}" if j == 0 else None)
        ax.set_title(f"all-reduce of {cost.human_bytes(n)}", fontsize=9)
        ax.set_xlabel("ranks p")
        ax.set_ylabel("predicted time (ms)")
    fig.legend(fontsize=7, loc="lower center", ncol=len(links), bbox_to_anchor=(0.5, -0.02 - 0.04 * len(names)))
    fig.tight_layout()
    return fig, axes
