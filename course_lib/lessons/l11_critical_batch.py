"""Lesson 11, section 2: the critical batch, from steps to target with the lr tuned at every batch (Shallue et al.)."""

from __future__ import annotations

import math
import time

from .. import batch_science, compare
from ..tables import Table
from .l11_noise_scale import plot_b_simple

NOISE_FACTOR = 2.0  # McCandlish et al. find B_crit ~ B_noise within about 3x either way: 3x is 1 + 2, relative
SWEEP_LR_FACTORS = (0.5, 1.0, 2.0)  # each batch's lr grid: multiples of the rule's lr, extended at its edge


def lesson02_rows(saved: dict | None, profile: str, rule: str = "sqrt") -> tuple[list[dict] | None, dict]:
    """From lesson 02's result in this profile (smoke and full train on different data): its fewest steps per batch
    (None under three batches), and its runs at ``rule``'s lr that reached the target, by batch (measured already)."""
    rows = saved["rows"] if saved and saved.get("rows") and saved.get("profile") == profile else []
    fastest = batch_science.fastest_per_batch(rows)
    return (fastest if len(fastest) >= batch_science.MIN_FIT_POINTS else None,
            {r["batch size"]: r for r in rows if r.get("rule") == rule and r.get("steps to target") and r.get("lr")})


def lesson02_fit(saved: dict | None) -> dict:
    """:func:`critical_batch` of lesson 02's rows: lesson 09's fit, on the same rows."""
    return critical_batch((saved or {}).get("rows"), label="lesson 02's runs")


def tuned_sweep(data, base_cfg, batches, factors=SWEEP_LR_FACTORS, *, rule: str = "sqrt", max_epochs: float,
                eval_every_epochs: float, max_extensions: int = 1, device=None,
                known: dict[int, dict] | None = None) -> list[dict]:
    """Steps to the target at each batch at its own best lr (the rule's times ``factors``; ``known``: measured), the
    grid extended while its edge holds or ties the best; a run stops at its batch's best steps so far."""
    from ..ladder import NEAR_TARGET
    from ..sweeps import scaled_config, sweep_with_edge_extension, target_resolution
    from ..train import train_to_target

    if not factors or any(not f > 0 for f in factors):
        raise ValueError(f"SWEEP_LR_FACTORS={tuple(factors)}: give positive multiples of the rule's lr")
    near = {**NEAR_TARGET, "dense_eval_every_epochs": min(NEAR_TARGET["dense_eval_every_epochs"], eval_every_epochs)}
    rows = []
    for b in batches:
        start = scaled_config(base_cfg, b, rule, base_batch_size=base_cfg.global_batch_size).replace(
            max_epochs=float(max_epochs), eval_every_epochs=float(eval_every_epochs), **near)
        best: list = [None]  # the fewest steps to target at this batch so far

        def run(f, start=start, best=best):
            cap = best[0]
            cfg = start.replace(base_lr=start.base_lr * f, max_steps=cap)
            t0 = time.perf_counter()
            r = train_to_target(data, cfg, device=device, progress="none",
                                label=f"b{cfg.global_batch_size} lr {cfg.peak_lr:.3g}")
            if r.steps_to_target is not None and (cap is None or r.steps_to_target < cap):
                best[0] = r.steps_to_target
            return {"batch size": cfg.global_batch_size, "lr": cfg.peak_lr, "x rule lr": f,
                    "steps to target": r.steps_to_target, "resolution (steps)": target_resolution(r),
                    "epochs to target": r.epochs_to_target, "samples to target": samples_to_target(r)[0],
                    "capped at": cap, "best HR@10": r.best_hr, "wall_s": time.perf_counter() - t0,
                    "from": "run here"}

        seen = (known or {}).get(b)
        if seen is not None and 1.0 in factors and math.isclose(seen["lr"], start.peak_lr, rel_tol=1e-9):
            best[0] = seen["steps to target"]
            first = {1.0: _known_row(seen, data, start)}
        else:  # the rule's lr first: the others are capped by it
            first = {f: run(f) for f in factors if f == 1.0}
        done = sweep_with_edge_extension(lambda f: first.pop(f) if f in first else run(f), factors,
                                         lambda row: _fewest_steps(row, True), max_extensions=max_extensions)
        chosen = min(done, key=lambda f: _fewest_steps(done[f]))
        rows += [{**row, "chosen": f == chosen and row["steps to target"] is not None} for f, row in done.items()]
    return rows


def _known_row(seen: dict, data, cfg) -> dict:
    """Lesson 02's run as a sweep row, its samples epochs x samples per epoch (steps x batch overcounts)."""
    from ..train.ncf import samples_per_epoch

    epochs = seen.get("epochs to target")
    return {"batch size": cfg.global_batch_size, "lr": cfg.peak_lr, "x rule lr": 1.0,
            "steps to target": seen["steps to target"], "resolution (steps)": seen.get("resolution (steps)"),
            "epochs to target": epochs, "capped at": None, "best HR@10": seen.get("best HR@10"), "wall_s": 0.0,
            "samples to target": (seen["steps to target"] * cfg.global_batch_size if epochs is None
                                  else int(round(epochs * samples_per_epoch(data, cfg)))), "from": "lesson 02"}


def _fewest_steps(row: dict, toward_edge: bool = False) -> tuple:
    """Lower is better: reached, by steps to target, ties to the lr nearest the rule's (``toward_edge``: farthest, so
    a run on the grid's edge tied with the best extends the grid: a tie there brackets nothing), then best HR@10."""
    if row["steps to target"] is None:
        return (1, -(row["best HR@10"] or 0.0), 0.0)
    return (0, row["steps to target"], abs(math.log(row["x rule lr"])) * (-1 if toward_edge else 1))


def unbracketed(sweep: list[dict]) -> list[dict]:
    """The chosen run of each batch whose fewest steps sit on its grid's edge (itself or a tie): an upper bound."""
    out = []
    for chosen in (r for r in sweep if r["chosen"]):
        runs = [r for r in sweep if r["batch size"] == chosen["batch size"]]
        edges = (min(r["x rule lr"] for r in runs), max(r["x rule lr"] for r in runs))
        if len(runs) > 1 and any(r["x rule lr"] in edges and r["steps to target"] == chosen["steps to target"]
                                 for r in runs):
            out.append(chosen)
    return out


def sweep_cost(sweep: list[dict]) -> dict:
    """Runs made here, batches, seconds, runs stopped at their batch's best steps, rule-lr points from lesson 02."""
    reused = sum(r.get("from") == "lesson 02" for r in sweep)
    return {"runs": len(sweep) - reused, "batches": len({r["batch size"] for r in sweep}), "from lesson 02": reused,
            "seconds": round(sum(r["wall_s"] for r in sweep), 1),
            "stopped early": sum(r["capped at"] is not None and r["steps to target"] is None for r in sweep)}


def tuned_rows(sweep: list[dict]) -> list[dict]:
    """The chosen run at each batch that reached the target: the points the critical batch is fitted to."""
    return [{k: r[k] for k in ("batch size", "lr", "steps to target", "resolution (steps)")}
            for r in sweep if r["chosen"]]


def tuned_table(sweep: list[dict], rule_rows: list[dict] | None = None) -> Table:
    """Every run of the sweep, the chosen one at each batch marked; ``lesson 02``: its steps at the rule's lr."""
    rule_steps = {r["batch size"]: r["steps to target"] for r in rule_rows or []}
    t = Table(["batch size", "lr", "x rule lr", "steps to target", "resolution (steps)", "epochs to target",
               "samples to target", "chosen"] + (["lesson 02"] if rule_rows else []))
    edges = {id(r) for r in unbracketed(sweep)}
    for r in sweep:
        missed = "not reached" if r["capped at"] is None else f"not by step {r['capped at']:,}"
        t.add(**{"batch size": r["batch size"], "lr": f"{r['lr']:.3g}", "x rule lr": f"{r['x rule lr']:g}",
                 "steps to target": missed if r["steps to target"] is None else r["steps to target"],
                 "resolution (steps)": r["resolution (steps)"] or "-",
                 "epochs to target": "-" if r["epochs to target"] is None else round(r["epochs to target"], 2),
                 "samples to target": "-" if r["samples to target"] is None else f"{r['samples to target']:,}",
                 "chosen": ("<-" if r["chosen"] else "") + (" (lesson 02's run)" if r.get("from") == "lesson 02"
                                                            else "") + (" (edge)" if id(r) in edges else ""),
                 **({"lesson 02": rule_steps.get(r["batch size"], "-") if r["chosen"] else ""} if rule_rows else {})})
    return t


def critical_batch(rows: list[dict] | None, label: str = "the tuned sweep") -> dict:
    """``S = S_min (1 + B_crit / B)`` fitted (McCandlish et al. 2018; lesson 09's fit), JSON-safe, B_crit's 95%
    ``range`` and a ``status``: "fit", "beyond range" (of the batches), "no bend" (S_min <= 0) or "too few points"."""
    fit = batch_science.critical_batch_fit(rows, label)
    pts = [(p["batch size"], p["steps to target"]) for p in batch_science.fastest_per_batch(rows)]
    top = max((b for b, _ in pts), default=None)
    status = ("too few points" if fit is None else "no bend" if fit.s_min <= 0 else "fit" if fit.b_crit <= top
              else "beyond range")
    return {"label": label, "points": pts, "largest_batch": top, "status": status, "s_min": fit and fit.s_min,
            "b_crit": fit and fit.b_crit, "range": fit and fit.b_crit_range, "basis": fit and fit.basis(),
            "estimates": [e.to_dict() for e in fit.estimates()] if fit else []}


def fit_estimates(*fits: dict) -> list[compare.Estimate]:
    return [compare.Estimate.from_dict(e) for f in fits for e in f["estimates"]]


def plot_noise_and_bend(result, fit: dict, rule_rows: list[dict] | None, at: float):
    """Left: B_simple during training. Right: steps to target against the batch, the fitted curve, B_simple ``at``."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    plot_b_simple(ax1, result.probes, "epoch", "B_simple (examples)")
    if rule_rows:
        ax2.loglog([r["batch size"] for r in rule_rows], [r["steps to target"] for r in rule_rows], "x", color="gray",
                   label="lesson 02 (rule lr)")
    if fit["points"]:
        bsz, steps = zip(*fit["points"])
        ax2.loglog(bsz, steps, "o", label="tuned lr")
        grid = [bsz[0] * (bsz[-1] / bsz[0]) ** (i / 40) for i in range(41)]
        ax2.loglog(grid, [steps[0] * bsz[0] / b for b in grid], "--", color="gray", label="perfect scaling")
        if fit["status"] in ("fit", "beyond range") and fit["b_crit"] > 0:
            ax2.loglog(grid, [fit["s_min"] * (1 + fit["b_crit"] / b) for b in grid], "-", label="S_min (1 + B_crit/B)")
        if fit.get("range"):
            ax2.axvspan(max(fit["range"][0], bsz[0] / 2), min(fit["range"][1], bsz[-1] * 2), color="C1", alpha=0.12,
                        label="B_crit's 95% range")
    if math.isfinite(at):
        ax2.axvline(at, color="C3", ls="-.", label=f"B_simple {at:,.0f}")
    ax2.set(xlabel="global batch (samples)", ylabel="steps to target")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def samples_to_target(r) -> tuple[int | None, int | None]:
    """Samples seen when the run first reached its target, and since the evaluation before; None where it missed."""
    if not r.reached or not r.epochs:
        return None, None
    steps, epochs, per_epoch = r.curve.get("step", []), r.curve.get("epoch", []), r.samples / r.epochs
    i = steps.index(r.steps_to_target) if r.steps_to_target in steps else 0
    span = epochs[i] - epochs[i - 1] if i > 0 else epochs[i]
    return int(round(r.epochs_to_target * per_epoch)), int(round(span * per_epoch))


def bend_comparison(fit: dict) -> compare.Comparison | None:
    """``B_crit`` over the largest batch measured, its interval B_crit's 95% range (Fieller's: its high end is
    unbounded where S_min is within its errors of 0). "lower": the curve bends within the batches measured."""
    if fit["range"] is None:
        return None
    top = fit["largest_batch"]
    lo, hi = fit["range"][0] / top, fit["range"][1] / top
    return compare.Comparison("B_crit / largest batch", min(max(fit["b_crit"] / top, lo), hi), lo, hi,
                              compare.EXACT, "x", str(len(fit["points"])), f"95% range; {fit['basis']}", 1.0, True)


def noise_comparison(b_simple: float, stderr: float, fit: dict) -> compare.Comparison | None:
    """B_simple over the fitted B_crit ("same": within :data:`NOISE_FACTOR`): its relative standard error, widened
    by B_crit's range (unbounded where the range is); None without a positive finite pair or any error."""
    b_crit, (lo, hi) = fit["b_crit"], fit["range"] or (fit["b_crit"], fit["b_crit"])
    if not (math.isfinite(b_simple) and b_simple > 0 and b_crit is not None and 0 < b_crit < math.inf):
        return None
    rel_se = stderr / b_simple if math.isfinite(stderr) else 0.0
    spread = math.inf if lo <= 0 else max(b_crit / lo, hi / b_crit) - 1
    if rel_se == 0 and spread == 0:
        return None
    return compare.quantity_ratio("B_simple / B_crit", b_simple / b_crit, rel_se, needed=NOISE_FACTOR,
                                  resolution=spread, basis="B_simple's error; B_crit's 95% range")
