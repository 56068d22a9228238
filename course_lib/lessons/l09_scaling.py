"""Lesson 09's traps, priced by its step model: strong against weak scaling (and lesson 06's measured runs
beside them), and the batch from which a larger one stops paying (McCandlish's steps to target, fitted to
lesson 02's runs, times the predicted step)."""

from __future__ import annotations

import math

from .. import batch_science
from ..perf import model as M
from ..perf.model import steps_to_target
from ..tables import Table

# --------------------------------------------------------------------------- the traps, with the model


NO_BEND_STATUS = ("lesson 02's steps place no positive S_min and B_crit (the fit above): no time-to-target "
                  "prediction from them")


def best_steps(rows) -> list[tuple[int, int]]:
    """``(batch, fewest steps to target)`` per batch of lesson 02's rows (:func:`batch_science.fastest_per_batch`)."""
    return [(r["batch size"], r["steps to target"]) for r in batch_science.fastest_per_batch(rows)]


MISSING_STATUS = "lesson 02's steps to target are not here (run lesson 02 first): no critical-batch fit"


def steps_fit(saved02: dict | None) -> batch_science.CriticalBatchFit | None:
    """The course's critical-batch fit (:func:`batch_science.critical_batch_fit`) of lesson 02's saved rows;
    None where lesson 02 is missing or fewer than three of its batches reached the target."""
    return batch_science.critical_batch_fit((saved02 or {}).get("rows"), label="lesson 02's runs")


def lesson02_steps_table(rows: list[dict] | None) -> Table | None:
    """Lesson 02's fewest steps to target per batch (:func:`best_steps`) and the fall from the batch before,
    against the batch's growth; None when lesson 02 saved none."""
    pts = best_steps(rows)
    if not pts:
        return None
    t = Table(["batch size", "steps to target", "fewer steps than at the batch before", "batch grew"],
              title="lesson 02's steps to target (the fastest run at each batch)")
    for (b0, s0), (b, st) in zip([(None, None)] + pts, pts):
        t.add(**{"batch size": b, "steps to target": st,
                 "fewer steps than at the batch before": "-" if s0 is None else f"{s0 / st:.2f}x",
                 "batch grew": "-" if b0 is None else f"{b / b0:g}x"})
    return t


TIME_TO_TARGET_TITLE = ("NeuMF on one rank of this machine: time to target, predicted (step times: the model's; "
                        "steps from lesson 02's fit)")


def time_to_target_rows(a: M.StepCounts, b: M.StepCounts, curves, link, *, step_overhead_s: float,
                        min_steps: float, critical_batch: float, batches, p: int = 1) -> list[dict]:
    """Predicted time to target per global batch on ``p`` devices: steps (McCandlish) x predicted step."""
    rows = []
    for gb in batches:
        per = gb / p
        if per < 1:
            continue
        pred = M.predict_step(M.interpolate(a, b, per), curves, world_size=p, link=link if p > 1 else None,
                              step_overhead_s=step_overhead_s)
        steps = steps_to_target(gb, min_steps, critical_batch)
        rows.append({"global batch": gb, "steps to target": steps, "step (ms)": pred.step_s * 1e3,
                     "time to target (s)": steps * pred.step_s})
    return rows


def stops_paying(rows: list[dict], gain: float = 1.1) -> int | None:
    """The first global batch from which doubling it no longer cuts the time to target by ``gain``x."""
    for r0, r1 in zip(rows, rows[1:]):
        if r0["time to target (s)"] / r1["time to target (s)"] < gain:
            return r0["global batch"]
    return None


def scaling_table(rows_by_name: dict[str, list[dict]], title: str) -> Table:
    t = Table(["setting", "p", "batch per device", "step (ms)", "samples/s", "efficiency"], title=title)
    for name, rows in rows_by_name.items():
        for r in rows:
            t.add(**{"setting": name, "p": r["p"], "batch per device": r["batch per device"],
                     "step (ms)": r["step (ms)"], "samples/s": r["samples/s"], "efficiency": r["efficiency"]})
    return t


def plot_scaling(rows_by_name: dict[str, list[dict]], title: str = ""):
    """Efficiency vs devices (log scale), one line per setting."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for name, rows in rows_by_name.items():
        ax.plot([r["p"] for r in rows], [r["efficiency"] for r in rows], "o-", label=name)
    ax.set(xscale="log", xlabel="devices", ylabel="predicted efficiency", ylim=(0, 1.1), title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, ax


def time_to_target_table(rows: list[dict]) -> Table:
    """:func:`time_to_target_rows` with, per batch, what doubling it does to the time to target."""
    t = Table(["global batch", "steps to target", "step (ms)", "time to target (s)", "time at twice the batch"],
              title=TIME_TO_TARGET_TITLE)
    for r0, r1 in zip(rows, rows[1:] + [None]):
        t.add(**r0, **{"time at twice the batch": "-" if r1 is None else
                       f"{r1['time to target (s)'] / r0['time to target (s)']:.2f}x"})
    return t


def far_scaling_table(curves_by: dict[str, list[dict]]) -> Table:
    """The last point of each scaling curve: its efficiency, and its step against one device's, T(p)/T(1)."""
    t = Table(["setting", "p", "efficiency", "step / one device's", "global batch"],
              title="the scaling curves at the most devices")
    for k, rows in curves_by.items():
        r = rows[-1]
        grew = r["step (ms)"] / rows[0]["step (ms)"] if rows[0]["p"] == 1 else math.nan
        t.add(**{"setting": k, "p": r["p"], "efficiency": f"{r['efficiency']:.2g}",
                 "step / one device's": f"{grew:.3g}", "global batch": f"{r['global batch']:.0f}"})
    return t


def lesson06_scaling_table(saved06: dict | None) -> Table | None:
    """Lesson 06's measured strong/weak scaling: per mode, the efficiency at the largest world size it ran (its
    saved ``scaling_rows``); None when lesson 06 has not run here."""
    top: dict[str, dict] = {}
    for r in (saved06 or {}).get("scaling_rows") or []:
        if r.get("efficiency") is not None and r["world_size"] >= top.get(r["mode"], {}).get("world_size", 0):
            top[r["mode"]] = r
    if not top:
        return None
    t = Table(["mode", "ranks", "efficiency"], title="lesson 06, measured here: scaling at its most ranks")
    for mode, r in sorted(top.items()):
        t.add(mode=mode, ranks=r["world_size"], efficiency=f"{r['efficiency']:.2f}")
    return t


LESSON06_MISSING = ("lesson 06 has not saved its strong/weak scaling runs here "
                    "(run it to put its measured efficiencies next to these)")
