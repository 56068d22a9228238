"""The lessons' figures of training runs and their results, one function per figure (lessons 01-07, 12).

Each draws from the learner's own records (a curve, a sweep's rows, a run's history) onto a new figure
or the ``ax`` it is given, and returns the figure:

- lesson 01: ``plot_curve`` (HR@10 against training time, with the target), ``plot_results``,
  ``plot_throughput``, ``plot_loader_comparison``, ``plot_optimizer_step``, ``plot_lazy_adam``;
- lessons 02-04: ``plot_steps_to_target``, ``plot_time_to_target``, ``plot_generalization_gap``,
  ``plot_loss_curves``, ``plot_lr_schedules``, ``plot_trust_ratios``;
- lesson 05: ``plot_gradient_histogram``, ``plot_loss_scale``, ``plot_precision_phases``;
- lessons 01-06's trick ladder: ``plot_ladder``;
- lesson 07: ``plot_mlm_runs``, ``plot_lamb_trust_ratios``; lesson 12: ``plot_search_progress``,
  ``plot_hyperband_brackets``.

Figures of communication live in :mod:`course_lib.comm.plots`, drawings made from the learner's
objects in :mod:`course_lib.diagrams`. No side effects at import: pyplot is imported inside each
function and no rcParams are changed."""

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
        name = labels[i] if labels else f"batch {r.config['global_batch_size']}, lr {r.config['peak_lr']:g}"
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
    """The data-loading ladder (:func:`course_lib.bench.loader_comparison`): samples/s per rung, loading
    alone and in training (log scale), each bar labelled with its ratio to the first rung."""
    import numpy as np

    rows = [r for r in comparison["rows"] if r["measured"]]
    fig, ax = _axes(ax, figsize=(7, 0.55 * len(rows) + 1.2))
    ys = np.arange(len(rows))[::-1]
    for offset, key, label in ((0.2, "load_sps", "loading only"), (-0.2, "train_sps", "training")):
        values = [r[key] for r in rows]
        bars = ax.barh(ys + offset, values, 0.38, label=label)
        for bar, v in zip(bars, values):
            ax.text(v, bar.get_y() + bar.get_height() / 2, f" {v / values[0]:.2g}x", va="center", fontsize=7)
    ax.set_yticks(ys, [r["rung"] for r in rows], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (the label: x the first rung)")
    ax.set_title(f"The data-loading ladder, batch {comparison['batch_size']} on {comparison['device']}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")  # beside the first rung's bars, the shortest at the top
    fig.tight_layout()
    return fig


def plot_optimizer_step(comp: dict):
    """Lesson 01: the step split into the optimizer phase and the rest, per Adam variant, one panel per
    batch size (:func:`course_lib.lessons.l01_step.optimizer_comparison`)."""
    import matplotlib.pyplot as plt

    batches = sorted({r["batch size"] for r in comp["rows"]})
    fig, axes = plt.subplots(1, len(batches), figsize=(4.6 * len(batches), 2.8), squeeze=False)
    for ax, b in zip(axes[0], batches):
        rows = [r for r in comp["rows"] if r["batch size"] == b]
        ys = list(range(len(rows)))[::-1]
        opt = [r["optimizer_ms"] for r in rows]
        rest = [max(0.0, r["step_ms"] - r["optimizer_ms"]) for r in rows]
        ax.barh(ys, opt, color="C3", label="optimizer")
        ax.barh(ys, rest, left=opt, color="C0", alpha=0.6, label="sampling + forward/backward")
        ax.set_yticks(ys, [r["variant"] + (" *" if r["baseline"] else "") for r in rows], fontsize=8)
        ax.set_xlabel("ms per step")
        ax.set_title(f"batch {b}", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=2, frameon=False)
    fig.suptitle(f"Where a step's time goes, per Adam (* the baseline's), on {comp['device']}", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def plot_lazy_adam(rows, *, step_ms: dict | None = None, target_hr: float | None = None,
                   resolved: bool | None = None):
    """Lesson 01: HR@10 of dense and lazy Adam (:func:`course_lib.lessons.l01_step.lazy_adam_accuracy`) against
    optimizer steps (the same budget) and, with ``step_ms`` (ms per step per optimizer, measured side
    by side: :func:`course_lib.lessons.l01_step.step_times`), against the training time those steps cost;
    ``resolved`` False (the step-time comparison of :func:`course_lib.lessons.l01_step.accuracy_comparisons` is
    not decided) says on that axis that the two step times differ within the repeats' noise."""
    import matplotlib.pyplot as plt

    panels = 2 if step_ms else 1
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.4), sharey=True, squeeze=False)
    ax_steps = axes[0][0]
    colors = {}
    for r in rows:
        color = colors.setdefault(r["optimizer"], f"C{len(colors)}")
        style = "-" if r["seed"] == rows[0]["seed"] else "--"
        kw = dict(marker="o", ms=3, color=color, label=f"{r['optimizer']}, seed {r['seed']}")
        ax_steps.plot(r["curve"]["step"], r["curve"]["hr"], style, **kw)
        if step_ms:
            seconds = [s * step_ms[r["optimizer"]] / 1000 for s in r["curve"]["step"]]
            axes[0][1].plot(seconds, r["curve"]["hr"], style, **kw)
    for ax in axes[0]:
        if target_hr is not None:
            ax.axhline(target_hr, ls=":", color="gray", lw=1)
    ax_steps.set_xlabel("optimizer steps")
    ax_steps.set_ylabel("HR@10")
    ax_steps.legend(fontsize=7, loc="lower right")
    if step_ms:
        axes[0][1].set_xlabel("training time at the paired step times (s)" + (
            "\n(their difference is within the repeats' noise)" if resolved is False else ""))
    fig.suptitle("Lazy Adam (SparseAdam tables) and dense Adam, the same budget", fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- lessons 02-05: the large-batch ladder


def plot_steps_to_target(rows, *, ax=None, x: str = "batch size", y: str = "steps to target", group: str = "rule"):
    """Steps to target against batch size on log-log axes, with the perfect-scaling line (lesson 02).

    ``rows``: dicts with ``x``, ``y`` (None when not reached) and ``group`` (one line each).
    Perfect scaling (Shallue et al. 2018) halves the steps when the batch doubles: a line of
    slope -1 through the smallest batch that reached the target.
    """
    fig, ax = _axes(ax)
    groups = {}
    for r in rows:
        groups.setdefault(r.get(group, ""), []).append(r)
    reached = [r for r in rows if r.get(y)]
    for name, rs in groups.items():
        pts = sorted((r[x], r[y]) for r in rs if r.get(y))
        if pts:
            ax.plot(*zip(*pts), marker="o", label=str(name))
        missed = [r[x] for r in rs if not r.get(y)]
        if missed:  # along the top edge, in axes coordinates: a miss has no step count to plot
            ax.scatter(missed, [0.96] * len(missed), marker="x", color="red", zorder=3, clip_on=False,
                       transform=ax.get_xaxis_transform(),
                       label=f"{name}: not reached (top edge)" if name else "not reached (top edge)")
    if reached:
        b0, s0 = min((r[x], r[y]) for r in reached)
        xs = sorted({r[x] for r in rows})
        ax.plot(xs, [s0 * b0 / b for b in xs], ls="--", color="gray", lw=1, label="perfect scaling")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.legend(fontsize=8)
    return fig


def plot_time_to_target(rows, *, ax=None, x: str = "batch size", y: str = "time to target (s)",
                        group: str = "rule", baseline_s: float | None = None):
    """Time to target against batch size (log x), one line per group; ``baseline_s`` as a dashed line."""
    fig, ax = _axes(ax)
    groups = {}
    for r in rows:
        groups.setdefault(r.get(group, ""), []).append(r)
    for name, rs in groups.items():
        pts = sorted((r[x], r[y]) for r in rs if r.get(y))
        if pts:
            ax.plot(*zip(*pts), marker="o", label=str(name))
    if baseline_s:
        ax.axhline(baseline_s, ls="--", color="gray", lw=1, label=f"baseline {baseline_s:.0f} s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return fig


def plot_generalization_gap(results, *, ax=None, title: str = ""):
    """Train-side vs test HR@10 at the end of each run, against batch size (lesson 02, Keskar et al. 2017)."""
    fig, ax = _axes(ax)
    if title:
        ax.set_title(title, fontsize=10)
    pts = sorted((r.config["global_batch_size"], r.final_train_hr, r.final_hr) for r in results
                 if r.final_train_hr is not None and r.final_hr is not None)
    if pts:
        b, tr, te = zip(*pts)
        ax.plot(b, tr, marker="o", label="train side (latest training item)")
        ax.plot(b, te, marker="s", label="test (held-out item)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("HR@10 at the end of the run")
    ax.legend(fontsize=8)
    return fig


def plot_loss_curves(results, *, labels=None, ax=None, x: str = "epoch", y: str = "loss"):
    """Training loss (or ``y="hr"``) at the evaluation points of several runs (lesson 03)."""
    fig, ax = _axes(ax)
    for i, r in enumerate(results):
        pts = [(a, b) for a, b in zip(r.curve[x], r.curve[y]) if b is not None]
        name = labels[i] if labels else f"batch {r.config['global_batch_size']}"
        if r.diverged:
            name += " (diverged)"
        if pts:
            # past the colour cycle's 10 colours a new line style, so no two runs look alike (lesson 04's race
            # draws more than 10 runs)
            ax.plot(*zip(*pts), marker="o", ms=3, label=name, ls=("-", "--", ":", "-.")[i // 10 % 4])
    ax.set_xlabel(x)
    ax.set_ylabel({"loss": "training loss (mean BCE since the last point)", "hr": "HR@10"}.get(y, y))
    if y == "loss":
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    return fig


def plot_lr_schedules(schedules: dict, *, ax=None):
    """``{label: (steps, lrs)}`` as lines: warmup shapes (lesson 03)."""
    fig, ax = _axes(ax)
    for name, (steps, lrs) in schedules.items():
        ax.plot(steps, lrs, label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.legend(fontsize=8)
    return fig


def plot_trust_ratios(history: dict, *, ax=None, title: str = ""):
    """Each adapted layer's trust ratio over training, log y (lesson 04); from ``TrainResult.history``."""
    fig, ax = _axes(ax, figsize=(7, 4))
    steps = history["step"]
    for name, ratios in sorted(history["trust_ratio"].items()):
        ax.plot(steps[:len(ratios)], ratios, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("trust ratio")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_mlm_runs(records: dict, target: float, title: str):
    """BERT runs side by side (lesson 07): train loss per step, and held-out loss per sequence seen
    with the target, zoomed on the approach to it (where runs differ)."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, r in records.items():
        c = r["curves"]
        ax1.plot(c["step"], c["train_loss"], label=name, alpha=0.8)
        ax2.plot([s * r["config"]["global_batch_size"] for s in c["eval_step"]], c["eval_loss"], marker="o", label=name)
    ax2.axhline(target, color="gray", ls="--", lw=1, label="target")
    finite = [r["best_eval_loss"] for r in records.values() if r["best_eval_loss"] is not None]
    ax2.set_ylim(min(finite + [target]) - 0.1, target + 1.0)
    ax1.set(xlabel="optimizer step", ylabel="train MLM loss", title=title)
    ax2.set(xlabel="sequences seen", ylabel="held-out MLM loss", title="held-out loss")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_lamb_trust_ratios(ratios: dict, *, title: str = ""):
    """LAMB's trust ratio of every adapted weight per step, log y (lesson 07; ``record["trust_ratios"]``)."""
    import matplotlib.pyplot as plt

    fig, ax = _axes(None, figsize=(11, 3.8))
    # one color per layer, in depth order
    colors = plt.cm.viridis([i / max(1, len(ratios) - 1) for i in range(len(ratios))])
    for (name, row), color in zip(ratios.items(), colors):
        ax.plot(range(1, len(row) + 1), row, lw=1, color=color,
                label=name.replace("encoder.", "").replace(".weight", ""))
    ax.set(xlabel="optimizer step", ylabel="trust ratio ||w|| / ||u||", yscale="log", title=title)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# fp16's range (IEEE binary16): smallest subnormal, smallest normal, largest finite
FP16_SUBNORMAL, FP16_MIN_NORMAL, FP16_MAX = 2.0 ** -24, 2.0 ** -14, 65504.0


def plot_gradient_histogram(log2_magnitudes: dict, *, ax=None):
    """Histograms of log2|g| (``{label: 1-D array}``) with fp16's representable range marked (lesson 05)."""
    import math

    import numpy as np

    fig, ax = _axes(ax, figsize=(7, 4))
    allv = np.concatenate([np.asarray(v) for v in log2_magnitudes.values()])
    lo = min(-40.0, math.floor(allv.min())) if allv.size else -40.0
    bins = np.arange(lo, 20.0, 0.5)
    for name, v in log2_magnitudes.items():
        ax.hist(np.clip(np.asarray(v), lo, 19.5), bins=bins, alpha=0.5, label=name)
    ax.axvspan(lo, math.log2(FP16_SUBNORMAL), color="red", alpha=0.08)
    ax.set_yscale("log")
    top = ax.get_ylim()[1]
    for xv, txt, h in ((math.log2(FP16_SUBNORMAL), "2^-24 smallest\nsubnormal;\nbelow: 0", 0.9),
                       (math.log2(FP16_MIN_NORMAL), "2^-14\nsmallest\nnormal", 0.9),
                       (math.log2(FP16_MAX), "65504\nlargest", 0.9)):
        ax.axvline(xv, color="red", ls="--", lw=1)
        ax.text(xv, top * h, " " + txt, color="red", fontsize=7, va="top")
    ax.set_xlabel("log2 |gradient element|")
    ax.set_ylabel("count")
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    return fig


def plot_loss_scale(history: dict, *, ax=None, title: str = ""):
    """The dynamic loss scale over training (lesson 05), from ``TrainResult.history``."""
    fig, ax = _axes(ax)
    ax.step(history["step"], history["loss_scale"], where="post")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss scale")
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def plot_precision_phases(phases: dict, *, ax=None, title: str = ""):
    """Milliseconds per training step in each phase, one stacked bar per precision (lesson 05):
    ``{mode: {"sampling": s, "forward_backward": s, "optimizer": s}}`` (per-step seconds). Autocast
    can only change forward+backward (and fp16's unscale, in the optimizer phase)."""
    modes = list(phases)
    fig, ax = _axes(ax, figsize=(7, 0.9 + 0.5 * max(1, len(modes))))
    left = [0.0] * len(modes)
    colors = {"sampling": "#bbbbbb", "forward_backward": "tab:blue", "optimizer": "tab:orange"}
    for phase in ("sampling", "forward_backward", "optimizer"):
        ms = [1e3 * phases[m].get(phase, 0.0) for m in modes]
        ax.barh(modes, ms, left=left, color=colors[phase], label=phase.replace("_", "+"))
        left = [a + b for a, b in zip(left, ms)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step")
    ax.legend(fontsize=8, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    if title:
        ax.set_title(title, fontsize=10, pad=22)
    fig.tight_layout()
    return fig


def plot_ladder(rows, *, axes=None):
    """The trick ladder (rows from :func:`course_lib.ladder.ladder_rows`): each rung, labelled by its slot and what
    ran in it, with its time to target at lesson 01's pace and its speedup over the baseline with the speedup's
    interval (left), and its optimizer steps to target, which no load changes (right). Gray: not reached or not
    run; a rung whose pace drifted is marked (!)."""
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.8 + 0.55 * max(1, len(rows))), sharey=True)
    else:
        fig = axes[0].figure
    ax1, ax2 = axes
    names = [r["step"] + (" (!)" if r.get("flags") else "") + (f"\n{r['ran_as']}" if r.get("ran_as") else "")
             for r in rows][::-1]
    times = [r.get("paced_time_s") or 0.0 for r in rows][::-1]
    steps = [r.get("steps_to_target") or 0.0 for r in rows][::-1]
    bars = ax1.barh(names, times, color=["tab:blue" if t else "lightgray" for t in times])
    for bar_, r in zip(bars, rows[::-1]):
        t = r.get("paced_time_s")
        c = r.get("comparison")  # the table's cells: the measured speedup and its interval
        txt = ("not run" if r.get("not_run") else "not reached") if not t else \
            f"{t:.1f} s" + (f"  ({r['speedup_shown']} {c.row()['interval']})" if c else "")
        ax1.text(bar_.get_width(), bar_.get_y() + bar_.get_height() / 2, " " + txt, va="center", fontsize=8)
    ax1.set_xlabel("training time to the target at lesson 01's pace (s)")
    ax1.set_xlim(0, max(times + [1.0]) * 2.2)  # room for the label "5.3 s  (5.36x [4.05x, 7.08x])"
    low = min([n for n in steps if n] or [1.0]) / 2  # log axis: bars start here, and a missing one is a mark
    ax2.barh(names, [n - low if n else 0.0 for n in steps], left=low, color="tab:green")
    for y, n in enumerate(steps):
        ax2.text(n or low, y, f" {n:,.0f}" if n else " —", va="center", fontsize=8)
    ax2.set_xscale("log")
    ax2.xaxis.set_minor_formatter(plt.NullFormatter())  # a narrow panel: the minor ticks' labels would overlap
    ax2.set_xlim(low, max(steps + [low * 4]) * 3)
    ax2.set_xlabel("optimizer steps to the target (log)")
    target = next((r.get("target_hr") for r in rows if r.get("target_hr")), None)
    fig.suptitle("The trick ladder" + (f" (target HR@10 {target:.3f})" if target else ""), fontsize=10)
    fig.tight_layout()
    return fig


def plot_speedups_beside(labels, talk, mine, *, low=None, high=None, notes=None, ax=None):
    """Two ladders' speedups over their own baselines, slot by slot (log axis): the talk's (``talk``) beside this
    machine's (``mine``, with its interval ``low``..``high`` as an error bar). A missing speedup is None; its slot then
    shows ``notes[i]`` (what this hardware cannot show, or why there is no rung) instead of a bar, and a bar shows it
    beside its speedup."""
    fig, ax = _axes(ax, figsize=(6, 0.8 + 0.55 * max(1, len(labels))))
    n = len(labels)
    low, high, notes = low or [None] * n, high or [None] * n, notes or [None] * n
    ys = range(n)[::-1]  # the first slot on top
    for y, t, m, lo, hi, note in zip(ys, talk, mine, low, high, notes):
        if t:
            ax.barh(y + 0.2, t, height=0.38, color="tab:orange", label="the talk" if y == n - 1 else None)
            ax.text(t, y + 0.2, f" {t:.3g}x", va="center", fontsize=8)
        if m:
            err = [[m - lo], [hi - m]] if lo and hi else None
            ax.barh(y - 0.2, m, height=0.38, color="tab:blue", xerr=err, ecolor="black", capsize=2,
                    label="this machine" if y == n - 1 else None)
            ax.text(hi or m, y - 0.2, f" {m:.3g}x" + (f"  ({note})" if note else ""), va="center", fontsize=8)
        elif note:
            ax.text(1.0, y - 0.2, f" {note}", va="center", fontsize=8, color="gray")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yticks(list(ys), labels)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xscale("log")
    top = max([v for v in [*talk, *mine, *high] if v] + [2.0])
    ax.set_xlim(0.5, top * 4)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.axvline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("speedup over its own baseline (log)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return fig


def plot_search_progress(curves: dict, *, target_hr: float | None = None, ax=None,
                         xlabel: str = "epochs spent by the search (all trials)", ylabel: str = "best HR@10 seen"):
    """Lesson 12: the best HR@10 a search has seen against the epochs it has spent, per strategy: the
    median over its seeds as a line, the range (min to max) as a band. ``curves``:
    ``{strategy: [[(epochs spent, best so far), ...] per seed]}``. The BERT search passes its steps and
    best loss with their own labels (``target_hr`` is then its target loss)."""
    import warnings

    import numpy as np

    fig, ax = _axes(ax, figsize=(7, 3.8))
    end = max((p[-1][0] for runs in curves.values() for p in runs if p), default=1.0)
    grid = np.linspace(0.0, end, 200)
    # a line style per search (searches that saw the same best would hide each other), each ending at its own spend
    for k, (strategy, runs) in enumerate(curves.items()):
        ys = []
        for pts in runs:
            xs, best = [p[0] for p in pts], [p[1] for p in pts]
            idx = np.searchsorted(xs, grid, side="right") - 1  # the last finished trial at or before x
            ys.append(np.where((idx >= 0) & (grid <= (xs[-1] if xs else -1.0)), np.array(best + [0.0])[idx], np.nan))
        ys = np.array(ys)
        with warnings.catch_warnings():  # before a seed's first trial its column is all NaN: no line there
            warnings.simplefilter("ignore", RuntimeWarning)
            med, lo, hi = np.nanmedian(ys, 0), np.nanmin(ys, 0), np.nanmax(ys, 0)
        (line,) = ax.step(grid, med, where="post", ls=("-", "--", "-.", ":")[k % 4],
                          label=f"{strategy} (median of {len(runs)})")
        ax.fill_between(grid, lo, hi, step="post", alpha=0.2, color=line.get_color())
    if target_hr is not None:
        ax.axhline(target_hr, ls="--", color="gray", lw=1, label=f"target {target_hr:.4g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="best", fontsize=8)
    return fig


def plot_hyperband_brackets(brackets: list[dict], *, max_resource: int, per_point: float = 1.0, ax=None):
    """Lesson 12: each Hyperband bracket as a bar per rung: the fraction of the trials entering the bracket that
    still trains at each resource (a bracket's trials are compared only at its own rungs)."""
    fig, ax = _axes(ax, figsize=(7, 0.9 + 0.7 * len(brackets)))
    for b in brackets:
        edges = [0] + b["rungs"] + [max_resource]
        alive = [1.0] + b["survivors"]
        for (lo, hi), frac in zip(zip(edges[:-1], edges[1:]), alive):
            ax.barh(b["bracket"], (hi - lo) * per_point, left=lo * per_point, height=0.6 * max(frac, 0.08) ** 0.5,
                    color="C0", alpha=0.35 + 0.6 * frac, edgecolor="k", lw=0.5)
            # the fraction as the brackets table prints it ("1/8", not "12")
            ax.text((lo + hi) / 2 * per_point, b["bracket"], "all" if frac == 1 else f"1/{round(1 / frac)}",
                    ha="center", va="center", fontsize=8)
        ax.text(max_resource * per_point * 1.01, b["bracket"], f"{b['share']:.0%} of trials", va="center", fontsize=8)
    ax.set_yticks([b["bracket"] for b in brackets])
    ax.set_yticklabels([f"bracket {b['bracket']}" for b in brackets])
    ax.invert_yaxis()
    ax.set_xlim(0, max_resource * per_point * 1.22)
    ax.set_xlabel("epochs of training (on each bar: the fraction of the bracket's trials that trains this far)")
    ax.set_title("Hyperband's brackets: early, aggressive cuts (top) to none (bottom)", fontsize=9)
    return fig
