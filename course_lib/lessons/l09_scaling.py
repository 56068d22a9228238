"""Lesson 09's traps, priced by its step model: strong against weak scaling (beside lesson 06's measured runs),
and the batch from which a larger one stops paying (McCandlish's steps to target, fitted to lesson 02's runs,
times the predicted step)."""

from __future__ import annotations

import math

from .. import batch_science
from ..perf import model as M
from ..tables import Table


def steps_fit(saved02: dict | None) -> batch_science.CriticalBatchFit | None:
    """The course's critical-batch fit of lesson 02's saved rows (the same as lesson 11's); None where lesson 02
    is missing or fewer than three of its batches reached the target."""
    return batch_science.critical_batch_fit((saved02 or {}).get("rows"), label="lesson 02's runs")


def lesson02_steps_table(rows: list[dict] | None) -> Table | None:
    """Lesson 02's fewest steps to target per batch, and the fall from the batch before against the batch's
    growth; None when lesson 02 saved none."""
    pts = [(r["batch size"], r["steps to target"]) for r in batch_science.fastest_per_batch(rows)]
    if not pts:
        return None
    t = Table(["batch", "steps", "fewer steps", "batch grew"])
    for (b0, s0), (b, st) in zip([(None, None)] + pts, pts):
        t.add(batch=b, steps=st, **{"fewer steps": "-" if s0 is None else f"{s0 / st:.2f}x",
                                    "batch grew": "-" if b0 is None else f"{b / b0:g}x"})
    return t


def time_to_target_rows(a: M.StepCounts, b: M.StepCounts, curves, link, *, step_overhead_s: float,
                        min_steps: float, critical_batch: float, batches, p: int = 1) -> list[dict]:
    """Predicted time to target per global batch on ``p`` devices: steps (McCandlish) x predicted step."""
    rows = []
    for gb in batches:
        if gb >= p:
            pred = M.predict_step(M.interpolate(a, b, gb / p), curves, world_size=p, link=link if p > 1 else None,
                                  step_overhead_s=step_overhead_s)
            steps = M.steps_to_target(gb, min_steps, critical_batch)
            rows.append({"batch": gb, "steps": steps, "step ms": pred.step_s * 1e3, "time s": steps * pred.step_s})
    return rows


def time_to_target_table(rows: list[dict]) -> Table:
    """:func:`time_to_target_rows` with, per batch, the time at twice the batch over this batch's."""
    t = Table(["batch", "steps", "step ms", "time s", "time at 2x batch"])
    for r0, r1 in zip(rows, rows[1:] + [None]):
        t.add(**r0, **{"time at 2x batch": "-" if r1 is None else f"{r1['time s'] / r0['time s']:.2f}x"})
    return t


def plot_scaling(rows_by_name: dict[str, list[dict]], title: str = ""):
    """Predicted efficiency against devices (log scale), one line per setting."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for name, rows in rows_by_name.items():
        ax.plot([r["p"] for r in rows], [r["efficiency"] for r in rows], "o-", label=name)
    ax.set(xscale="log", xlabel="devices", ylabel="predicted efficiency", ylim=(0, 1.1), title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, ax


def far_scaling_table(curves_by: dict[str, list[dict]]) -> Table:
    """The last point of each scaling curve: its efficiency, and its step over one device's, T(p)/T(1)."""
    t = Table(["setting", "p", "efficiency", "T(p)/T(1)", "global batch"])
    for k, rows in curves_by.items():
        r = rows[-1]
        grew = r["step (ms)"] / rows[0]["step (ms)"] if rows[0]["p"] == 1 else math.nan
        t.add(**{"setting": k, "p": r["p"], "efficiency": f"{r['efficiency']:.2g}", "T(p)/T(1)": f"{grew:.3g}",
                 "global batch": f"{r['global batch']:.0f}"})
    return t


def lesson06_scaling_table(saved06: dict | None) -> Table | None:
    """Lesson 06's measured efficiency per mode at the largest world size it ran; None where it has not run."""
    top: dict[str, dict] = {}
    for r in (saved06 or {}).get("scaling_rows") or []:
        if r.get("efficiency") is not None and r["world_size"] >= top.get(r["mode"], {}).get("world_size", 0):
            top[r["mode"]] = r
    if not top:
        return None
    t = Table(["mode", "ranks", "efficiency"])
    for mode, r in sorted(top.items()):
        t.add(mode=mode, ranks=r["world_size"], efficiency=f"{r['efficiency']:.2f}")
    return t
