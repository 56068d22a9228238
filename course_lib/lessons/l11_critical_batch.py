"""Lesson 11, section 2: the critical batch, from steps to target with the lr tuned at every batch.

Shallue et al. (2018) tune the metaparameters at every batch before reading steps against the batch; McCandlish
et al. (2018) model the steps as ``S = S_min (1 + B_crit / B)`` and find ``B_crit`` near the noise scale. This
module runs the tuned sweep, fits that curve (and reads two points of lesson 07's BERT), and compares: does the
curve bend within the batches measured, and does B_simple land within a small factor of B_crit?
"""

from __future__ import annotations

import math

from .. import batch_science, compare
from ..tables import Table
from .l11_noise_scale import b_simple_at_target

# McCandlish et al. find B_crit ~ B_noise within a factor of about 3 either way: as a relative effect, 3x is 1 + 2.
NOISE_FACTOR = 2.0

def steps_rows_from_lesson02(saved: dict | None, profile: str | None = None) -> list[dict] | None:
    """Lesson 02's steps-to-target per batch (its fastest rule at each batch), or None when its
    result is missing, from another profile (smoke and full train on different data), or has
    fewer than 3 batches that reached the target."""
    if not saved or not saved.get("rows") or (profile and saved.get("profile") != profile):
        return None
    rows = batch_science.fastest_per_batch(saved["rows"])
    return rows if len(rows) >= batch_science.MIN_FIT_POINTS else None


def best_steps_rows(rows: list[dict]) -> list[dict]:
    """The fewest steps to target at each batch size, from sweep rows (runs that missed are left out)."""
    return batch_science.fastest_per_batch(rows)


def lesson02_fit(saved: dict | None) -> dict:
    """:func:`critical_batch` of lesson 02's saved rows: the same function on the same rows as lesson 09's fit,
    so the two lessons report one critical batch ("too few points" where lesson 02 is missing or fewer than three
    of its batches reached the target)."""
    return critical_batch((saved or {}).get("rows"), label="lesson 02's runs")


# Shallue et al. (2018, "Measuring the Effects of Data Parallelism on Neural Network Training") tune the
# metaparameters at every batch size before reading steps against the batch: with one lr rule for every batch,
# a bend can be the rule failing rather than the data's noise running out. Here each batch gets a short lr
# sweep around the rule's lr (a factor grid, extended at its edge by sweeps.sweep_with_edge_extension), and a
# run that has not reached the target by the batch's best steps so far is stopped there: it cannot be the
# fewest, and the sweep costs about one run per lr at most.
SWEEP_LR_FACTORS = (0.5, 1.0, 2.0)


def rule_runs_from_lesson02(saved: dict | None, profile: str | None = None, rule: str = "sqrt") -> dict[int, dict]:
    """Lesson 02's runs at ``rule``'s lr that reached the target, by batch (``{}`` when its result is missing or
    from another profile): :func:`tuned_sweep`'s rule-lr points, measured already. Lesson 02 trains the same
    setting (lesson 01's optimizer and lr, scaled by the rule; evaluation dense near the target; seed 0) on the
    same data, and a point is taken only where its lr equals the sweep's to 1e-9 relative."""
    if not saved or not saved.get("rows") or (profile and saved.get("profile") != profile):
        return {}
    return {r["batch size"]: r for r in saved["rows"]
            if r.get("rule") == rule and r.get("steps to target") is not None and r.get("lr")}


def tuned_sweep(data, base_cfg, batches, factors=SWEEP_LR_FACTORS, *, rule: str = "sqrt", max_epochs: float,
                eval_every_epochs: float, max_extensions: int = 1, device=None,
                known: dict[int, dict] | None = None) -> list[dict]:
    """Steps to the target at each batch of ``batches``, each at its own best lr: ``base_cfg`` scaled to the
    batch by ``rule`` (lesson 02), then its lr times each of ``factors`` (the rule's own lr first), the
    grid extended while the best sits on an edge (or an edge ties it: :func:`_edge_first`). Evaluation grows
    dense near the target (lesson 02's ``ladder.NEAR_TARGET``), so the steps are resolved to 0.05 epoch. One row
    per run (``chosen``: the fewest steps at its batch, ties to the lr nearest the rule's); ``capped at``: the best
    steps so far, where a run that had not reached the target was stopped. ``known``: runs at the rule's lr measured
    already (:func:`rule_runs_from_lesson02`), used instead of running them again (``from``: "lesson 02")."""
    import time

    from ..ladder import NEAR_TARGET
    from ..sweeps import scaled_config, sweep_with_edge_extension, target_resolution
    from ..train import train_to_target

    if not factors or any(not f > 0 for f in factors):
        raise ValueError(f"SWEEP_LR_FACTORS={tuple(factors)}: give positive multiples of the rule's lr, "
                         "e.g. (0.5, 1, 2)")
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
                    "epochs to target": r.epochs_to_target, "samples to target": samples_to_target(r),
                    "capped at": cap, "best HR@10": r.best_hr, "wall_s": time.perf_counter() - t0,
                    "from": "run here"}

        seen = (known or {}).get(b)
        if seen is not None and 1.0 in factors and math.isclose(seen["lr"], start.peak_lr, rel_tol=1e-9):
            best[0] = seen["steps to target"]
            first = {1.0: _known_row(seen, data, start)}
        else:  # the rule's lr first: the others are capped by it
            first = {f: run(f) for f in factors if f == 1.0}
        done = sweep_with_edge_extension(lambda f: first.pop(f) if f in first else run(f), factors,
                                         _edge_first, max_extensions=max_extensions)
        chosen = min(done, key=lambda f: _fewest_steps(done[f]))
        for f, row in done.items():
            rows.append({**row, "chosen": f == chosen and row["steps to target"] is not None})
    return rows


def _known_row(seen: dict, data, cfg) -> dict:
    """Lesson 02's run at the rule's lr as a row of :func:`tuned_sweep` (not run again: no wall time)."""
    return {"batch size": cfg.global_batch_size, "lr": cfg.peak_lr, "x rule lr": 1.0,
            "steps to target": seen["steps to target"], "resolution (steps)": seen.get("resolution (steps)"),
            "epochs to target": seen.get("epochs to target"), "samples to target": _samples_seen(seen, data, cfg),
            "capped at": None, "best HR@10": seen.get("best HR@10"), "wall_s": 0.0, "from": "lesson 02"}


def _samples_seen(seen: dict, data, cfg) -> int:
    """Samples to target of lesson 02's row, counted as ``samples_to_target`` counts this lesson's runs (its
    epochs times the samples per epoch, the last batch of an epoch partial): steps x batch counted every
    batch whole, which overcounts the partial last batch of each epoch."""
    epochs = seen.get("epochs to target")
    if epochs is None:
        return seen["steps to target"] * cfg.global_batch_size
    from ..train.ncf import samples_per_epoch
    return int(round(epochs * samples_per_epoch(data, cfg)))


def _fewest_steps(row: dict) -> tuple:
    """Lower is better: reached, by steps to target (ties: the lr nearest the rule's), then best HR@10."""
    if row["steps to target"] is not None:
        return (0, row["steps to target"], abs(math.log(row["x rule lr"])))
    return (1, -(row["best HR@10"] or 0.0), 0.0)


def _edge_first(row: dict) -> tuple:
    """The search's score: :func:`_fewest_steps`, its ties broken toward the lr farthest from the rule's, so a run
    on the grid's edge tied with the best extends the grid past that edge (the chosen run still breaks ties toward
    the rule's lr): a tie at the edge does not bracket the fewest steps, so the grid must go on past it."""
    key = _fewest_steps(row)
    return key[:2] + (-key[2],)


def _tied_edge(runs: list[dict], chosen: dict) -> dict | None:
    """The run on its grid's edge that reached the target in the chosen run's steps (the chosen one itself when it
    sits there), else None: there the fewest steps were not bracketed, so they bound the tuned steps from above."""
    fs = [r["x rule lr"] for r in runs]
    tied = [r for r in runs if r["steps to target"] is not None and r["steps to target"] == chosen["steps to target"]
            and r["x rule lr"] in (min(fs), max(fs))]
    if not tied:
        return None
    return next((r for r in tied if r is chosen), tied[0])


def unbracketed(sweep: list[dict]) -> list[dict]:
    """The chosen run of each batch whose fewest steps sit on the edge of the grid its sweep ended with (itself there,
    or tied by a run there): a lr beyond it was never tried, so its steps bound that batch's tuned steps from above."""
    out = []
    for b in sorted({r["batch size"] for r in sweep}):
        runs = [r for r in sweep if r["batch size"] == b]
        chosen = next((r for r in runs if r["chosen"]), None)
        if chosen is not None and len(runs) > 1 and _tied_edge(runs, chosen) is not None:
            out.append(chosen)
    return out


def sweep_cost(sweep: list[dict]) -> dict:
    """What the tuned sweep cost, from its runs' own clocks: runs made here, batches, seconds, runs stopped at
    their batch's best steps so far, and rule-lr points taken from lesson 02 instead of run again."""
    reused = sum(r.get("from") == "lesson 02" for r in sweep)
    return {"runs": len(sweep) - reused, "batches": len({r["batch size"] for r in sweep}),
            "seconds": round(sum(r["wall_s"] for r in sweep), 1),
            "stopped early": sum(r["capped at"] is not None and r["steps to target"] is None for r in sweep),
            "from lesson 02": reused}


def tuned_rows(sweep: list[dict]) -> list[dict]:
    """The chosen run at each batch that reached the target: the points the critical batch is fitted to."""
    return [{k: r[k] for k in ("batch size", "lr", "steps to target", "resolution (steps)")}
            for r in sweep if r["chosen"]]


def tuned_table(sweep: list[dict], rule_rows: list[dict] | None = None, rule: str = "sqrt") -> Table:
    """Every run of :func:`tuned_sweep`, the chosen one at each batch marked; with lesson 02's rows, its
    steps at the rule's lr beside them."""
    rule_steps = {r["batch size"]: r["steps to target"] for r in rule_rows or []}
    cols = ["batch size", "lr", "x rule lr", "steps to target", "resolution (steps)", "epochs to target",
            "samples to target", "chosen"] + (["lesson 02 (best rule)"] if rule_rows else [])
    t = Table(cols, title=f"steps to the target at each batch, each at its own best lr (x the {rule} rule's); "
                          "'edge': the fewest steps came at the grid's edge, an upper bound on the tuned steps")
    edges = {id(r): " (edge)" for r in unbracketed(sweep)}
    for r in sweep:
        missed = "not reached" if r["capped at"] is None else f"not by step {r['capped at']:,}"
        t.add(**{"batch size": r["batch size"], "lr": f"{r['lr']:.3g}", "x rule lr": f"{r['x rule lr']:g}",
                 "steps to target": r["steps to target"] if r["steps to target"] is not None else missed,
                 "resolution (steps)": r["resolution (steps)"] if r["resolution (steps)"] is not None else "-",
                 "epochs to target": round(r["epochs to target"], 2) if r["epochs to target"] is not None else "-",
                 "samples to target": f"{r['samples to target']:,}" if r["samples to target"] is not None else "-",
                 "chosen": ("<-" if r["chosen"] else "") + (" (lesson 02's run)" if r.get("from") == "lesson 02"
                                                            else "") + edges.get(id(r), ""),
                 **({"lesson 02 (best rule)": rule_steps.get(r["batch size"], "-") if r["chosen"] else ""}
                    if rule_rows else {})})
    return t


def critical_batch(rows: list[dict] | None, label: str = "the tuned sweep") -> dict:
    """The course's one fit of ``S = S_min (1 + B_crit / B)`` (:func:`batch_science.critical_batch_fit`, the
    function lesson 09 applies to lesson 02's rows) with what this lesson reads from it, JSON-safe: ``points``
    (``(batch, steps)``), ``largest_batch``, ``s_min``, ``b_crit`` (``inf`` where S_min is not positive),
    ``range`` (B_crit's 95% range, unbounded above where S_min is within its errors of 0), ``estimates`` (the fit's
    rows) and ``status``: "fit", "beyond range" (``B_crit`` above the largest batch measured: an extrapolation),
    "no bend" (S_min not positive) or "too few points" (fewer than three batches reached the target); whether the
    curve bends within the batches measured is :func:`bend_comparison`'s."""
    fit = batch_science.critical_batch_fit(rows, label)
    pts = [(p["batch size"], p["steps to target"]) for p in batch_science.fastest_per_batch(rows)]
    out = {"label": label, "points": pts, "largest_batch": max((b for b, _ in pts), default=None),
           "b_crit": None, "s_min": None, "range": None, "estimates": [], "basis": None}
    if fit is None:
        return {**out, "status": "too few points"}
    status = "no bend" if fit.s_min <= 0 else "fit" if fit.b_crit <= out["largest_batch"] else "beyond range"
    return {**out, "status": status, "s_min": fit.s_min, "b_crit": fit.b_crit, "range": fit.b_crit_range,
            "estimates": [e.to_dict() for e in fit.estimates()], "basis": fit.basis()}


def fit_estimates(*fits: dict) -> list[compare.Estimate]:
    """The ``S_min`` and ``B_crit`` rows of each fit (:func:`critical_batch`) that has them, each named by the
    rows it was fitted to."""
    return [compare.Estimate.from_dict(e) for f in fits for e in f["estimates"]]


def plot_noise_and_bend(result, fit: dict, rule_rows: list[dict] | None = None, ax_pair=None):
    """Left: B_simple during training with its error bars. Right: steps to target against the
    batch (each at its tuned lr; lesson 02's rule-lr points beside them when given), the perfect-scaling
    line, the fitted ``S_min (1 + B_crit / B)``, B_crit's range and B_simple marked."""
    import matplotlib.pyplot as plt

    if ax_pair is None:
        fig, ax_pair = plt.subplots(1, 2, figsize=(11, 3.8))
    else:
        fig = ax_pair[0].figure
    ax1, ax2 = ax_pair
    ps = [p for p in result.probes if math.isfinite(p["b_simple"])]
    ax1.errorbar([p["epoch"] for p in ps], [p["b_simple"] for p in ps],
                 yerr=[p["stderr"] if math.isfinite(p["stderr"]) else 0 for p in ps], marker="o", capsize=3)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("B_simple (examples)")
    ax1.set_title("the noise scale during training", fontsize=10)
    pts = fit["points"]
    at = b_simple_at_target(result)["b_simple"]
    if rule_rows:
        ax2.loglog([r["batch size"] for r in rule_rows], [r["steps to target"] for r in rule_rows], "x", color="gray",
                   label="lesson 02 (lr from a rule)")
    if pts:
        bsz, steps = zip(*pts)
        ax2.loglog(bsz, steps, "o", label="measured, lr tuned per batch")
        b0, s0 = pts[0]
        grid = [bsz[0] * (bsz[-1] / bsz[0]) ** (i / 40) for i in range(41)]
        ax2.loglog(grid, [s0 * b0 / b for b in grid], "--", color="gray", label="perfect scaling")
        if fit["status"] in ("fit", "beyond range") and fit["b_crit"] > 0:
            ax2.loglog(grid, [fit["s_min"] * (1 + fit["b_crit"] / b) for b in grid], "-", label="S_min (1 + B_crit/B)")
        if fit.get("range"):
            lo, hi = fit["range"]
            ax2.axvspan(max(lo, bsz[0] / 2), min(hi, bsz[-1] * 2), color="C1", alpha=0.12,
                        label="B_crit's 95% range")
    if math.isfinite(at):
        ax2.axvline(at, color="C3", ls="-.", label=f"B_simple {at:,.0f}")
    ax2.set_xlabel("global batch (samples)")
    ax2.set_ylabel("steps to target")
    ax2.set_title("where the steps stop halving", fontsize=10)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def samples_to_target(r) -> int | None:
    """Training samples seen when the run first reached its target (epochs to target times its samples per
    epoch; exact for the adaptive run, whose epochs count samples; to a partial batch for the others)."""
    if not r.reached or not r.epochs:
        return None
    return int(round(r.epochs_to_target * r.samples / r.epochs))


def samples_resolution(r) -> int | None:
    """How precisely a run's samples to target are known: the samples between the evaluation that first reached the
    target and the one before it (as :func:`course_lib.sweeps.target_resolution` counts steps; None when missed)."""
    if not r.reached or not r.epochs or r.steps_to_target is None:
        return None
    steps, epochs = r.curve.get("step", []), r.curve.get("epoch", [])
    i = steps.index(r.steps_to_target) if r.steps_to_target in steps else 0
    span = epochs[i] - epochs[i - 1] if i > 0 else epochs[i]
    return int(round(span * r.samples / r.epochs))


def bend_comparison(fit: dict) -> compare.Comparison | None:
    """Does the steps curve bend within the batches measured? ``B_crit`` over the largest batch, its interval
    B_crit's 95% range (Fieller's: a ratio of two fitted parameters, its high end unbounded where S_min is within
    its errors of 0, which no symmetric interval can say). "lower": the bend lies within the batches measured;
    "higher": beyond them. None with too few points for a fit."""
    if fit["range"] is None:
        return None
    top = fit["largest_batch"]
    lo, hi = fit["range"][0] / top, fit["range"][1] / top
    return compare.Comparison("B_crit / the largest batch measured", min(max(fit["b_crit"] / top, lo), hi), lo, hi,
                              compare.EXACT, "x", str(len(fit["points"])), f"B_crit's 95% range; {fit['basis']}",
                              1.0, True)


def _ratio_to_crit(question: str, b_simple: float, stderr: float, b_crit: float, crit_range, basis: str):
    """B_simple / B_crit: B_simple's standard error as a relative one, plus B_crit's own range as a resolution
    (:func:`compare.quantity_ratio`; unbounded where the range is); None where either
    is not a positive finite number or neither carries an error."""
    if not (math.isfinite(b_simple) and b_simple > 0 and b_crit is not None and 0 < b_crit < math.inf):
        return None
    rel_se = stderr / b_simple if math.isfinite(stderr) else 0.0
    lo, hi = crit_range or (b_crit, b_crit)
    spread = math.inf if lo <= 0 else max(b_crit / lo, hi / b_crit) - 1
    if rel_se == 0 and spread == 0:
        return None
    return compare.quantity_ratio(question, b_simple / b_crit, rel_se, needed=NOISE_FACTOR, resolution=spread,
                                  basis=f"B_simple's standard error; {basis}")


def noise_comparison(b_simple: float, stderr: float, fit: dict) -> compare.Comparison | None:
    """NeuMF: B_simple at the target over the fitted B_crit. "same": within :data:`NOISE_FACTOR` of it, as
    McCandlish et al. report; "higher"/"lower": outside it; None without a positive fitted B_crit."""
    return _ratio_to_crit("B_simple / B_crit, NeuMF", b_simple, stderr, fit["b_crit"], fit["range"],
                          "B_crit's 95% range")
