"""Diagrams the lessons draw instead of describing: generated with matplotlib from the objects
the learner has (the model, the world size, the measured gradients), so no image file can
drift from the code.

Each function returns a matplotlib figure (or ``(figure, table)``) and changes no global
state. Which lesson uses which:

* :func:`launch_diagram` - lesson 00: what ``launch`` does from a cell.
* :func:`neumf_diagram` - lesson 01: NeuMF's two branches, sized from the learner's model.
* :func:`small_steps_vs_big_step` - lesson 02: k steps at lr vs one step at k x lr on k x the batch.
* :func:`fp16_number_line` - lesson 05: gradients on fp16's number line, and what a loss scale shifts;
  :func:`fp16_number_lines`: several kinds of gradient (parameter, activation), one panel each.
* :func:`kinds_of_parallelism` - lessons 06/07: what each device holds under data, tensor,
  pipeline and sharded parallelism.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import torch

from .plots import FP16_MAX, FP16_MIN_NORMAL, FP16_SUBNORMAL
from .precision import fp16_fates
from .tables import Table



def _figure(figsize):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    ax.set_axis_off()
    return fig, ax


def _box(ax, x, y, w, h, text, color="#dbe9f6", fontsize=8, edge="#333333"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.02",
                                fc=color, ec=edge, lw=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, x0, y0, x1, y1, text="", color="#333333"):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", color=color, lw=0.9))
    if text:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, text, fontsize=7, ha="center", va="bottom", color=color)


# --------------------------------------------------------------------------- lesson 00


def launch_diagram(world_size: int = 2, backend: str = "gloo"):
    """The notebook's process spawns ``world_size`` workers that join one process group on
    loopback, run the same function on their rank, and send their return values back."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    shown = min(world_size, 4)
    fig, ax = _figure((7, 2.2 + 0.5 * shown))
    height = 0.8 / shown
    _box(ax, 0.0, 0.3, 0.24, 0.4, "notebook kernel\nlaunch(fn,\n  world_size="
         f"{world_size})", color="#fde7c8")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    for i in range(shown):
        rank = i if i < shown - 1 or shown == world_size else world_size - 1
        y = 0.1 + (shown - 1 - i) * height  # rank 0 on top
        label = f"rank {rank}: fn(rank {rank})" if not (shown < world_size and i == shown - 2) else "..."
        _box(ax, 0.42, y, 0.26, height * 0.8, label)
        _arrow(ax, 0.24, 0.5, 0.42, y + height * 0.4, "start" if i == 0 else "")
        _arrow(ax, 0.68, y + height * 0.4, 0.78, 0.5)
    _box(ax, 0.78, 0.3, 0.22, 0.4, "return values\nby rank\n(or the first error)", color="#e3f3e1")
    ax.text(0.55, 0.96, f"one process group ({backend}), addresses on loopback only",
            ha="center", fontsize=8, style="italic")
    ax.set_title(f"launch: {world_size} worker process{'es' if world_size > 1 else ''} from one cell", fontsize=10)
    return fig


# --------------------------------------------------------------------------- lesson 01


def neumf_diagram(model: torch.nn.Module):
    """NeuMF as the learner built it: each box carries its shape and parameter count."""
    def n(m):
        return sum(p.numel() for p in m.parameters())

    fig, ax = _figure((8, 4.2))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    users, f = model.gmf_user.weight.shape
    items = model.gmf_item.weight.shape[0]
    half = model.mlp_user.weight.shape[1]
    linears = [m for m in model.mlp if isinstance(m, torch.nn.Linear)]
    emb_color, mlp_color = "#f6d5d5", "#dbe9f6"
    _box(ax, 0.00, 0.80, 0.18, 0.12, "user id", color="#eeeeee")
    _box(ax, 0.00, 0.08, 0.18, 0.12, "item id", color="#eeeeee")
    _box(ax, 0.24, 0.80, 0.22, 0.12, f"GMF user emb\n{users} x {f} ({n(model.gmf_user):,})", emb_color)
    _box(ax, 0.24, 0.62, 0.22, 0.12, f"GMF item emb\n{items} x {f} ({n(model.gmf_item):,})", emb_color)
    _box(ax, 0.24, 0.26, 0.22, 0.12, f"MLP user emb\n{users} x {half} ({n(model.mlp_user):,})", emb_color)
    _box(ax, 0.24, 0.08, 0.22, 0.12, f"MLP item emb\n{items} x {half} ({n(model.mlp_item):,})", emb_color)
    for y in (0.86, 0.32):
        _arrow(ax, 0.18, 0.86, 0.24, y)
    for y in (0.68, 0.14):
        _arrow(ax, 0.18, 0.14, 0.24, y)
    _box(ax, 0.52, 0.71, 0.16, 0.12, f"element-wise\nproduct ({f})", mlp_color)
    _arrow(ax, 0.46, 0.86, 0.52, 0.79)
    _arrow(ax, 0.46, 0.68, 0.52, 0.75)
    sizes = " -> ".join([str(linears[0].in_features)] + [str(m.out_features) for m in linears])
    _box(ax, 0.52, 0.17, 0.16, 0.12 + 0.03 * len(linears),
         f"MLP, ReLU\n{sizes}\n({sum(n(m) for m in linears):,})", mlp_color)
    _arrow(ax, 0.46, 0.32, 0.52, 0.25)
    _arrow(ax, 0.46, 0.14, 0.52, 0.21)
    _box(ax, 0.76, 0.44, 0.16, 0.14, f"output layer\n{model.out.in_features} -> 1\nlogit", mlp_color)
    _arrow(ax, 0.68, 0.77, 0.76, 0.53)
    _arrow(ax, 0.68, 0.25, 0.76, 0.49)
    emb = sum(n(m) for m in (model.gmf_user, model.gmf_item, model.mlp_user, model.mlp_item))
    total = n(model)
    ax.set_title(f"NeuMF: {total:,} parameters, {emb / total:.1%} of them in the embedding tables "
                 "(red)", fontsize=10)
    return fig


# --------------------------------------------------------------------------- lesson 02


def small_steps_vs_big_step(k: int = 4, lr: float = 0.1, batch: int = 8, *, seed: int = 0,
                            curvature=(1.0, 0.25)):
    """k SGD steps at ``lr`` on k batches of ``batch`` against one step at ``k * lr`` on the k
    batches together, on a noisy 2-D quadratic loss.

    The linear scaling rule assumes the gradient barely changes over the k small steps, so the
    one big step lands where they did; it holds while ``lr * curvature * k`` is small and fails
    as it grows (the big step overshoots where the small steps would have turned). Returns
    ``(figure, table)``, the table giving each path's end and the distance between them.
    """
    if k < 1 or batch < 1 or lr <= 0:
        raise ValueError(f"need k >= 1, batch >= 1 and lr > 0; got k={k}, batch={batch}, lr={lr}")
    g = torch.Generator().manual_seed(seed)
    h = torch.tensor(curvature, dtype=torch.float64)
    # per-sample losses 0.5 * sum h (w - c_i)^2 with centres c_i scattered around the minimum 0
    centres = torch.randn(k * batch, 2, generator=g, dtype=torch.float64) * 0.5
    start = torch.tensor([2.0, 2.0], dtype=torch.float64)

    def grad(w, c):
        return (h * (w - c)).mean(0)

    small = [start.clone()]
    for i in range(k):
        small.append(small[-1] - lr * grad(small[-1], centres[i * batch:(i + 1) * batch]))
    big = [start.clone(), start - k * lr * grad(start, centres)]
    gap = float((small[-1] - big[-1]).norm())
    moved = float((small[-1] - start).norm())

    fig, ax = _figure((5.5, 4.2))
    ax.set_axis_on()
    xs = np.linspace(-0.8, 2.4, 80)
    X, Y = np.meshgrid(xs, xs)
    ax.contour(X, Y, 0.5 * (curvature[0] * X ** 2 + curvature[1] * Y ** 2), levels=12, colors="#cccccc",
               linewidths=0.6)
    s = torch.stack(small).numpy()
    b = torch.stack(big).numpy()
    ax.plot(s[:, 0], s[:, 1], "o-", color="tab:blue", ms=4, label=f"{k} steps, lr {lr:g}, batch {batch}")
    ax.plot(b[:, 0], b[:, 1], "s--", color="tab:red", ms=5, label=f"1 step, lr {k * lr:g}, batch {k * batch}")
    ax.plot([0], [0], "k*", ms=9, label="minimum")
    ax.set_aspect("equal")
    ax.legend(fontsize=7, loc="upper left")
    share = f" ({gap / moved:.0%} of the distance travelled)" if moved > 0 else ""
    ax.set_title(f"end points {gap:.3g} apart{share}", fontsize=9)
    t = Table(["path", "end x", "end y"], title=f"k = {k}, lr x curvature x k = {lr * max(curvature) * k:.2f}")
    t.add(path=f"{k} small steps", **{"end x": float(s[-1, 0]), "end y": float(s[-1, 1])})
    t.add(path="1 big step", **{"end x": float(b[-1, 0]), "end y": float(b[-1, 1])})
    return fig, t


# --------------------------------------------------------------------------- lesson 05


def fp16_fractions(log2_magnitudes, scale: float = 1.0) -> dict:
    """Of the gradient elements (``log2|g|``, zeros excluded), scaled by ``scale``: the fractions that
    fp16 flushes to zero, stores as subnormals (fewer bits of precision), stores as normals, and
    overflows to inf (:func:`course_lib.precision.fp16_fates`, the cast itself)."""
    v = torch.as_tensor(np.asarray(log2_magnitudes, dtype=np.float64))
    return fp16_fates(torch.exp2(v[torch.isfinite(v)] + math.log2(scale)))


def fp16_number_line(log2_magnitudes, scale: float = 1.0, *, ax=None, title: str = ""):
    """fp16's number line (zero / subnormal / normal / overflow) with the histogram of the
    gradients on it, shifted by ``log2(scale)``: what a loss scale moves, and where. Returns
    ``(figure, fractions)`` from :func:`fp16_fractions`; ``title`` names the gradients."""
    import matplotlib.pyplot as plt

    if scale <= 0:
        raise ValueError(f"the loss scale must be > 0, got {scale}")
    v = np.asarray(log2_magnitudes, dtype=np.float64)
    v = v[np.isfinite(v)]
    shift = math.log2(scale)
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 3.2))
    else:
        fig = ax.figure
    lo, hi = -50.0, 20.0
    regions = ((lo, math.log2(FP16_SUBNORMAL) - 1, "#f4b6b6", "flushed to 0"),
               (math.log2(FP16_SUBNORMAL) - 1, math.log2(FP16_MIN_NORMAL), "#fbe3b6", "subnormal"),
               (math.log2(FP16_MIN_NORMAL), math.log2(FP16_MAX), "#d6ecd2", "normal"),
               (math.log2(FP16_MAX), hi, "#f4b6b6", "inf"))
    for a, b, color, label in regions:
        ax.axvspan(a, b, color=color, alpha=0.6, lw=0)
        ax.text((a + b) / 2, 1.02, label, transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    bins = np.arange(lo, hi + 0.5, 0.5)
    if v.size:
        ax.hist(np.clip(v, lo, hi), bins=bins, histtype="step", color="#777777", label="gradients as computed")
        ax.hist(np.clip(v + shift, lo, hi), bins=bins, color="tab:blue", alpha=0.6,
                label=f"x {scale:g} (loss-scaled)" if scale != 1 else "as stored in fp16")
    ax.set_xlim(lo, hi)
    ax.set_yscale("log")
    ax.set_xlabel("log2 |gradient element|")
    ax.set_ylabel("count")
    ax.legend(fontsize=8, loc="upper left")
    fr = fp16_fractions(v, scale)
    ax.set_title(f"{title + ': ' if title else ''}scale 2^{shift:.0f}: {fr['zero']:.1%} lost to zero, "
                 f"{fr['subnormal']:.1%} subnormal, {fr['inf']:.2%} overflow", fontsize=9, pad=16)
    fig.tight_layout()
    return fig, fr


def fp16_number_lines(panels: dict, scale: float = 1.0):
    """:func:`fp16_number_line` for each ``{label: log2 magnitudes}``, one panel per label on a shared
    x axis (lesson 05: the parameter gradients next to the activation gradients backward stores in
    fp16). Returns ``(figure, {label: fractions})``."""
    import matplotlib.pyplot as plt

    if not panels:
        raise ValueError("fp16_number_lines needs at least one {label: log2 magnitudes} panel")
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.9 * len(panels)), sharex=True, squeeze=False)
    fractions = {}
    for ax, (label, values) in zip(axes[:, 0], panels.items()):
        _, fractions[label] = fp16_number_line(values, scale, ax=ax, title=label)
    return fig, fractions


# --------------------------------------------------------------------------- lessons 06-07


KINDS = {
    "data": ("every device: the whole model, its slice of the batch",
             "all-reduce of the gradients each step"),
    "tensor": ("every device: a slice of every layer's weights, the whole batch",
               "all-reduce of activations inside each layer"),
    "pipeline": ("every device: a run of whole layers, micro-batches in turn",
                 "send/recv of activations between stages"),
    "sharded data": ("every device: its slice of the batch, 1/P of weights, gradients and optimizer state",
                     "all-gather weights, reduce-scatter gradients"),
}


def kinds_of_parallelism(p: int = 4, layers: int = 4):
    """One panel per kind of parallelism: P devices (rows) by the model's layers (columns); a
    filled cell is what that device holds; the panel says what each step communicates."""
    import matplotlib.pyplot as plt

    if p < 2 or layers < 1:
        raise ValueError(f"need p >= 2 devices and layers >= 1, got p={p}, layers={layers}")
    fig, axes = plt.subplots(1, 4, figsize=(11, 2.2 + 0.3 * p))
    colors = plt.get_cmap("tab10")
    for ax, kind in zip(axes, KINDS):
        ax.set_xlim(0, layers)
        ax.set_ylim(0, p)
        ax.invert_yaxis()
        ax.set_xticks([i + 0.5 for i in range(layers)], [f"L{i}" for i in range(layers)], fontsize=7)
        ax.set_yticks([d + 0.5 for d in range(p)], [f"dev {d}" for d in range(p)], fontsize=7)
        ax.tick_params(length=0)
        for d in range(p):
            for layer in range(layers):
                if kind == "pipeline" and layer * p // layers != d:
                    continue  # another stage's layer
                full = kind in ("data", "pipeline")  # the whole layer is kept on this device
                ax.add_patch(plt.Rectangle((layer + 0.05, d + 0.1), 0.9, 0.8, color=colors(d),
                                           alpha=0.85 if full else 0.2))
                if kind == "tensor":  # kept: this device's column slice of the layer
                    ax.add_patch(plt.Rectangle((layer + 0.05 + 0.9 * d / p, d + 0.1), 0.9 / p, 0.8, color=colors(d)))
                elif kind == "sharded data":  # kept: 1/P of the layer, gathered whole for its turn only
                    ax.add_patch(plt.Rectangle((layer + 0.05, d + 0.1 + 0.8 * d / p), 0.9, 0.8 / p, color=colors(d)))
        holds, comm = KINDS[kind]
        ax.set_title(f"{kind} parallel", fontsize=9)
        ax.set_xlabel(textwrap.fill(holds.removeprefix("every device: "), 34) + "\n"
                      + textwrap.fill("comm: " + comm, 34),
                      fontsize=7)
        for spine in ax.spines.values():
            spine.set_visible(False)
    fig.suptitle("what each device holds (dark: kept; light: gathered or not stored)", fontsize=9)
    fig.tight_layout()
    return fig
