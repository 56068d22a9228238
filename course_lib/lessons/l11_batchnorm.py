"""Lesson 11, section 5: BatchNorm when each rank holds a few samples.

Every variant of :mod:`course_lib.parallel.sync_batchnorm` trains the same steps at each per-rank batch; its
test accuracy is a fraction of ``n_test`` examples (a binomial standard error), its step time one average
per variant and batch (its interval: the machine's pace drift between the variants' timings).
"""

from __future__ import annotations

import math

from .. import compare
from ..parallel.sync_batchnorm import BN_VARIANTS
from ..tables import Table

ACC_EFFECT = 0.01  # one point of test accuracy: smaller differences between BatchNorm variants change no choice
PACE_DRIFT = 0.10  # one averaged timing per variant, taken one after another on a shared CPU: its pace moves ~10%

def bn_spec(profile: str) -> dict:
    """What lesson 11's BatchNorm launch runs (smoke: two batches, few steps)."""
    from ..config import pick

    return {"per_rank_batches": pick(profile, full=[4, 16, 64, 256], smoke=[4, 32]),
            "steps": pick(profile, full=100, smoke=10), "lr": 1e-2, "hidden": 32, "in_features": 8,
            "n_train": pick(profile, full=8192, smoke=1024), "n_test": pick(profile, full=4096, smoke=512), "seed": 0}


def bn_table(rows: list[dict]) -> Table:
    """Test accuracy and time per step, per variant (rows) and per-rank batch (columns)."""
    batches = sorted({r["per_rank_batch"] for r in rows})
    cols = ["variant"] + [f"b={b}/rank: acc" for b in batches] + [f"b={b}/rank: ms/step" for b in batches]
    t = Table(cols, title=f"BatchNorm with few samples per rank ({_ranks(rows)} ranks): "
                          "test accuracy and time per step")
    for v in [v for v in BN_VARIANTS if any(r["variant"] == v for r in rows)]:
        row = {"variant": v}
        for r in rows:
            if r["variant"] == v:
                row[f"b={r['per_rank_batch']}/rank: acc"] = round(r["test_accuracy"], 3)
                row[f"b={r['per_rank_batch']}/rank: ms/step"] = round(r["step_ms"], 1)
        t.add(**row)
    return t


def _ranks(rows):
    r = rows[0]
    return r["global_batch"] // r["per_rank_batch"]


def plot_bn(rows: list[dict]):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for v in BN_VARIANTS:
        rs = sorted((r for r in rows if r["variant"] == v), key=lambda r: r["per_rank_batch"])
        if rs:
            ax1.semilogx([r["per_rank_batch"] for r in rs], [r["test_accuracy"] for r in rs], "-o", label=v, base=2)
            ax2.semilogx([r["per_rank_batch"] for r in rs], [r["step_ms"] for r in rs], "-o", label=v, base=2)
    ax1.set_xlabel("samples per rank")
    ax1.set_ylabel("test accuracy")
    ax2.set_xlabel("samples per rank")
    ax2.set_ylabel("ms per step")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _acc(question: str, a: dict, b: dict, n_test: int) -> compare.Comparison:
    se = [math.sqrt(r["test_accuracy"] * (1 - r["test_accuracy"]) / n_test) for r in (a, b)]
    return compare.difference(question, a["test_accuracy"], se[0], b["test_accuracy"], se[1], needed=ACC_EFFECT,
                              n="1/1", basis=f"binomial errors over {n_test:,} test examples",
                              resolution=0.0 if any(se) else 1 / n_test)


def bn_comparisons(rows: list[dict], n_test: int) -> list[compare.Comparison]:
    """At the smallest per-rank batch: does synchronizing the statistics, or recomputing them for evaluation, beat
    local BN (the cause: the statistics' noise, or their running averages)? Recomputing at the largest batch too
    (a running-average cost shows there as well); what the batch itself cost local BN, and weight norm (no batch
    statistics at all) against local BN at both ends; what synchronizing costs in step time at the largest."""
    small, large = min(r["per_rank_batch"] for r in rows), max(r["per_rank_batch"] for r in rows)
    at = {r["variant"]: r for r in rows if r["per_rank_batch"] == small}
    big = {r["variant"]: r for r in rows if r["per_rank_batch"] == large}
    local = "local BN"
    pairs = [(at, "synchronized BN", small), (at, "local BN, recomputed stats", small),
             (big, "local BN, recomputed stats", large), (at, "weight norm (no BN)", small),
             (big, "weight norm (no BN)", large)]
    out = [_acc(f"accuracy at {b}/rank: {v} - local BN", where[local], where[v], n_test)
           for where, v, b in pairs if v in where and local in where and (b == small or large != small)]
    if local in at and local in big and large != small:
        out.append(_acc(f"accuracy of local BN: {small}/rank - {large}/rank", big[local], at[local], n_test))
    if "synchronized BN" in big and local in big:
        out.append(compare.ratio(f"step time at {large}/rank: synchronized / local BN", [big[local]["step_ms"]],
                                 [big["synchronized BN"]["step_ms"]], needed=compare.SPEED_EFFECT,
                                 resolution=PACE_DRIFT, basis="one averaged timing each; pace drift"))
    return out
