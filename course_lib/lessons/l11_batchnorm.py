"""Lesson 11, section 5: BatchNorm with few samples per rank (:mod:`course_lib.parallel.sync_batchnorm`)."""

from __future__ import annotations

from .. import compare
from ..parallel.sync_batchnorm import BN_VARIANTS
from ..tables import Table

ACC_EFFECT = 0.01  # one point of test accuracy: smaller differences between BatchNorm variants change no choice
PACE_DRIFT = 0.10  # one averaged timing per variant, taken one after another on a shared CPU: its pace moves ~10%
LOCAL, SYNC, RECOMPUTED, WEIGHT_NORM = BN_VARIANTS


def bn_table(rows: list[dict]) -> Table:
    """Per variant: test accuracy (``acc b=N``) and ms per step (``ms b=N``) at each per-rank batch N."""
    batches = sorted({r["per_rank_batch"] for r in rows})
    t = Table(["variant"] + [f"acc b={b}" for b in batches] + [f"ms b={b}" for b in batches])
    for v in BN_VARIANTS:
        mine = [r for r in rows if r["variant"] == v]
        if mine:
            t.add(variant=v, **{f"acc b={r['per_rank_batch']}": round(r["test_accuracy"], 3) for r in mine},
                  **{f"ms b={r['per_rank_batch']}": round(r["step_ms"], 1) for r in mine})
    return t


def plot_bn(rows: list[dict]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, key, label in zip(axes, ("test_accuracy", "step_ms"), ("test accuracy", "ms per step")):
        for v in BN_VARIANTS:
            rs = sorted((r for r in rows if r["variant"] == v), key=lambda r: r["per_rank_batch"])
            if rs:
                ax.semilogx([r["per_rank_batch"] for r in rs], [r[key] for r in rs], "-o", label=v, base=2)
        ax.set_xlabel("samples per rank")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def bn_comparisons(rows: list[dict], n_test: int) -> list[compare.Comparison]:
    """Each remedy's accuracy against local BN at the smallest and the largest per-rank batch (synchronized BN at
    the smallest only), local BN's smallest against its largest, and synchronizing's step time at the largest."""
    small, large = min(r["per_rank_batch"] for r in rows), max(r["per_rank_batch"] for r in rows)
    at = {(r["per_rank_batch"], r["variant"]): r for r in rows}
    pairs = [(small, SYNC), (small, RECOMPUTED), (large, RECOMPUTED), (small, WEIGHT_NORM), (large, WEIGHT_NORM)]
    acc = [(f"acc at {b}/rank: {v} - {LOCAL}", (b, LOCAL), (b, v)) for b, v in dict.fromkeys(pairs)]
    if large != small:
        acc.append((f"acc of {LOCAL}: {small}/rank - {large}/rank", (large, LOCAL), (small, LOCAL)))
    out = []
    for q, x, y in (c for c in acc if c[1] in at and c[2] in at):
        a, b = at[x]["test_accuracy"], at[y]["test_accuracy"]
        se_a, se_b = ((p * (1 - p) / n_test) ** 0.5 for p in (a, b))  # binomial, over the test examples
        out.append(compare.difference(q, a, se_a, b, se_b, needed=ACC_EFFECT, n="1/1", basis=f"binomial, {n_test:,}",
                                      resolution=0.0 if se_a or se_b else 1 / n_test))
    if (large, SYNC) in at and (large, LOCAL) in at:
        out.append(compare.ratio(f"ms/step at {large}/rank: sync / local", [at[large, LOCAL]["step_ms"]],
                                 [at[large, SYNC]["step_ms"]], needed=compare.SPEED_EFFECT,
                                 resolution=PACE_DRIFT, basis="pace drift"))
    return out
