"""Lesson 09's traps, priced by its step model: strong against weak scaling (and lesson 06's measured runs
beside them), and the batch from which a larger one stops paying (McCandlish's steps to target, fitted to
lesson 02's runs, times the predicted step)."""

from __future__ import annotations

import math

from .. import compare
from ..perf import model as M
from ..perf.model import steps_to_target
from ..tables import Table

# --------------------------------------------------------------------------- the traps, with the model


ILLUSTRATIVE_STEPS = (2000.0, 4096.0)  # S_min, B_crit when lesson 02's runs give no fit: made up, said so


def best_steps(rows) -> list[tuple[int, int]]:
    """``(batch, fewest steps to target)`` per batch of lesson 02's rows: the model assumes an lr tuned at each
    batch, so of several runs at one batch (lesson 02's two scaling rules) the fastest stands for it."""
    best: dict[int, int] = {}
    for r in rows or ():
        if r.get("steps to target"):
            b = r["batch size"]
            best[b] = min(best.get(b, r["steps to target"]), r["steps to target"])
    return sorted(best.items())


def fit_steps_to_target(rows: list[dict]) -> compare.Fit | None:
    """McCandlish's ``S = S_min + S_min B_crit / B`` fitted to lesson 02's ``(batch size, steps to target)`` rows,
    a straight line in ``1 / B`` (intercept ``S_min``, slope ``S_min B_crit``); None with fewer than two batches
    or where the line places no critical batch (intercept or slope not positive)."""
    pts = best_steps(rows)
    if len(pts) < 2:
        return None
    fit = compare.line_fit([1 / b for b, _ in pts], [s for _, s in pts])
    return fit if fit.intercept > 0 and fit.slope > 0 else None


STEPS_FROM = {"fit": "lesson 02's runs here",
              "missing": "lesson 02's steps to target are not here: illustrative values, not measured",
              "too few": "fewer than two of lesson 02's batch sizes reached the target: illustrative values",
              "no bend": "lesson 02's steps do not fit S = S_min (1 + B_crit / B) with a positive S_min and B_crit "
                         "(its steps, in the table below): illustrative values"}


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


def steps_fit(rows: list[dict] | None) -> tuple[compare.Fit | None, str]:
    """``(fit, where)``: :func:`fit_steps_to_target` of lesson 02's saved rows, and a key of :data:`STEPS_FROM`
    saying where ``S_min`` and ``B_crit`` come from."""
    if rows is None:
        return None, "missing"
    fit = fit_steps_to_target(rows)
    if fit is not None:
        return fit, "fit"
    return None, "too few" if len(best_steps(rows)) < 2 else "no bend"


def steps_estimates(fit: compare.Fit | None) -> list[compare.Estimate]:
    """``S_min`` and ``B_crit`` as rows: fitted (with the line's standard errors; ``B_crit``'s from the two
    relative errors, their covariance left out) or the illustrative values (no standard error)."""
    if fit is None:
        s_min, b_crit = ILLUSTRATIVE_STEPS
        return [compare.estimate("S_min (steps)", s_min, math.nan, basis="illustrative"),
                compare.estimate("B_crit (samples)", b_crit, math.nan, basis="illustrative")]
    b_crit = fit.slope / fit.intercept
    rel = math.hypot(fit.slope_se / fit.slope, fit.intercept_se / fit.intercept)
    df = fit.df if fit.n > 2 else None
    basis = f"line in 1/B through {fit.n} batches"
    return [compare.estimate("S_min (steps)", fit.intercept, fit.intercept_se, df=df, basis=basis),
            compare.estimate("B_crit (samples)", b_crit, b_crit * rel, df=df, basis=basis)]


def steps_parameters(fit: compare.Fit | None) -> tuple[float, float]:
    """``(S_min, B_crit)`` of the fit, or the illustrative ones."""
    return (fit.intercept, fit.slope / fit.intercept) if fit is not None else ILLUSTRATIVE_STEPS


def time_to_target_title(fitted) -> str:
    """The title of the time-to-target table: its step times are the model's; its steps from lesson 02's fit or
    from the illustrative values."""
    where = "steps from lesson 02's fit" if fitted else "steps from the illustrative S_min and B_crit"
    return f"NeuMF on one rank of this machine: time to target, predicted (step times: the model's; {where})"


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


def time_to_target_table(rows: list[dict], fitted) -> Table:
    """:func:`time_to_target_rows` with, per batch, what doubling it does to the time to target."""
    t = Table(["global batch", "steps to target", "step (ms)", "time to target (s)", "time at twice the batch"],
              title=time_to_target_title(fitted))
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
