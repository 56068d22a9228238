"""Lesson 11, predictable scaling (Hestness et al. 2017): the held-out error as a power law of the training-set
size, fitted on smaller sizes and checked on the whole set; and the lesson's time budget for those runs.
"""

from __future__ import annotations

import math

import torch

from .. import compare
from ..tables import Table

def fit_power_law(sizes, errors, grid: int = 400) -> dict:
    """Hestness et al. (2017, "Deep Learning Scaling is Predictable, Empirically"): the held-out error falls
    as a power law of the training-set size down to an irreducible floor, ``err(N) = a * N^(-b) + c``.

    Least squares in the error itself. For a given floor ``c`` the rest is a straight line in log-log
    (``log(err - c) = log a - b log N``, closed form); the floor is then searched on ``[0, min(err))``: a grid
    of ``grid`` points, refined around the best by :func:`scipy.optimize.minimize_scalar`. Returns ``a``, ``b``
    (the exponent, > 0 when the error falls), ``c``, and ``rmse`` of the fit."""
    import numpy as np
    from scipy.optimize import minimize_scalar

    n, e = np.asarray(sizes, dtype=float), np.asarray(errors, dtype=float)
    if n.size != e.size or n.size < 3:
        raise ValueError(f"fit_power_law: need at least 3 (size, error) pairs of equal length, got {n.size}, {e.size}")
    if (n <= 0).any() or (e <= 0).any():
        raise ValueError("fit_power_law: sizes and errors must be positive")
    x = np.log(n)

    def line(c):
        y = np.log(e - c)
        slope, intercept = np.polyfit(x, y, 1)
        pred = np.exp(intercept) * n ** slope + c
        return float(((pred - e) ** 2).sum()), float(np.exp(intercept)), float(-slope)

    top = float(e.min()) * (1 - 1e-9)
    cs = np.linspace(0.0, top, grid, endpoint=False)
    best = int(np.argmin([line(c)[0] for c in cs]))
    lo, hi = cs[max(best - 1, 0)], cs[best + 1] if best + 1 < grid else top
    c = float(minimize_scalar(lambda c: line(c)[0], bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-12 * max(top, 1.0)}).x)
    sse, a, b = line(c)
    return {"a": a, "b": b, "c": float(c), "rmse": (sse / n.size) ** 0.5}


def power_law_error(fit: dict, size: float) -> float:
    """The fitted error at ``size``."""
    return fit["a"] * size ** -fit["b"] + fit["c"]


def size_for_error(fit: dict, target_error: float) -> float:
    """The training-set size at which the fitted law reaches ``target_error``: ``(a / (target - c))^(1/b)``.
    Raises when the target is at or below the irreducible error (no size reaches it) or the error does not fall."""
    if fit["b"] <= 0:
        raise ValueError(f"the fitted error does not fall with the size (exponent {fit['b']:.3g}): no size reaches "
                         f"{target_error:.4g}")
    if target_error <= fit["c"]:
        raise ValueError(f"target error {target_error:.4g} is at or below the fitted irreducible error "
                         f"{fit['c']:.4g}: no training-set size reaches it")
    return (fit["a"] / (target_error - fit["c"])) ** (1 / fit["b"])


def subsample_train(data, fraction: float, seed: int = 0):
    """``data`` with a random ``fraction`` of its training interactions (the same held-out users and items),
    and at least one per user (the loop's train-side HR@10 ranks one training item of every user)."""
    from dataclasses import replace

    if not 0 < fraction <= 1:
        raise ValueError(f"subsample_train(fraction={fraction}): must be in (0, 1]")
    if fraction == 1:
        return data
    n, users = data.num_train, data.train_users.cpu()
    g = torch.Generator().manual_seed(seed)
    chosen = torch.zeros(n, dtype=torch.bool)
    chosen[torch.randperm(n, generator=g)[:round(fraction * n)]] = True
    one = torch.full((data.num_users,), -1, dtype=torch.long).scatter_reduce(0, users, torch.arange(n), "amax")
    chosen[one[one >= 0]] = True
    keep = chosen.nonzero().squeeze(1).to(data.train_users.device)
    return replace(data, name=f"{data.name} ({fraction:.3g} of train)", train_users=data.train_users[keep],
                   train_items=data.train_items[keep])


def plateau(patience: int):
    """``stop_early`` for a scaling run: stop once the held-out HR@10 has not beaten its best for ``patience``
    evaluations (early stopping on the held-out metric: the run kept to its best is the converged one)."""
    best = {"hr": -math.inf, "since": 0}

    def stop(point: dict) -> bool:
        hr = point.get("hr")
        if hr is not None and hr > best["hr"]:
            best.update(hr=hr, since=0)
        else:
            best["since"] += 1
        return best["since"] >= patience

    return stop


def scaling_runs(data, cfg, fractions, *, max_steps: int, device=None, seed: int = 0, patience: int = 4,
                 evals_per_epoch: int = 4, min_eval_steps: int = 20) -> list[dict]:
    """NeuMF trained on each ``fraction`` of the training set until its held-out HR@10 stops improving
    (:func:`plateau`: ``patience`` evaluations without a new best, evaluated ``evals_per_epoch`` times per epoch of
    that subset, at least every ``min_eval_steps`` steps), or ``max_steps``: each size at its own best, as Hestness
    et al. train each size to convergence. One row per size: interactions, the best held-out HR@10, error
    ``1 - HR``, the step of the best, the steps run and whether the plateau (not the cap) ended it."""
    from ..train import RunHooks, train_to_target
    from ..train.ncf import steps_per_epoch

    rows = []
    for f in fractions:
        sub = subsample_train(data, f, seed)
        per_epoch = steps_per_epoch(sub, cfg)
        every = max(min_eval_steps, per_epoch / evals_per_epoch) / per_epoch
        r = train_to_target(sub, cfg.replace(max_epochs=max_steps / per_epoch, eval_every_epochs=every,
                                             stop_at_target=False), device=device, progress="none",
                            label=f"{f:.3g} of train", hooks=RunHooks(stop_early=plateau(patience)))
        hrs = [(h, st) for h, st in zip(r.curve["hr"], r.curve["step"]) if h is not None]
        best_hr, best_step = max(hrs, key=lambda p: (p[0], -p[1]))
        rows.append({"fraction": f, "size": sub.num_train, "metric": best_hr, "error": 1 - best_hr,
                     "best_step": best_step, "steps": r.steps, "converged": bool(r.stopped_early),
                     "train_time_s": r.train_time_s})
    return rows


def scaling_prediction(rows: list[dict], held_out: dict) -> dict:
    """Fit the law on ``rows``, then the check on ``held_out`` (a size beyond them, measured): its error
    predicted and measured, and the size the law says that measured error needs (against the size used)."""
    fit = fit_power_law([r["size"] for r in rows], [r["error"] for r in rows])
    predicted = power_law_error(fit, held_out["size"])
    try:
        needed = size_for_error(fit, held_out["error"])
    except ValueError:
        needed = None
    # the law's own misses at the sizes it was fitted on, counted as relative_error counts the held-out one's
    laws = [(r, power_law_error(fit, r["size"])) for r in rows]
    residuals = [{"size": r["size"], "error": r["error"], "law": law, "relative": (r["error"] - law) / law}
                 for r, law in laws if law > 0]
    return {"fit": fit, "size": held_out["size"], "predicted_error": predicted, "measured_error": held_out["error"],
            "relative_error": (held_out["error"] - predicted) / predicted if predicted > 0 else math.inf,
            "fit_residuals": residuals,
            "residual_rms": (math.sqrt(sum(q["relative"] ** 2 for q in residuals) / len(residuals))
                             if residuals else None),
            "size_for_measured": needed, "largest_fitted": max(r["size"] for r in rows),
            "largest_fitted_error": next(r["error"] for r in rows if r["size"] == max(q["size"] for q in rows))}


PREDICTION_GOAL = 0.05  # the prediction of the held-out size's error counts as good within 5 % of it
# one run's held-out error, as a relative standard error: HR@10's binomial error over ml-1m's 6,040 users is 1.6%
# of an error of 0.4
SCALING_NOISE = 0.02


def scaling_setting(base_cfg, data, profile: str, batch_size: int) -> tuple:
    """The setting of every size's run and its cap on steps: ``batch_size`` (sqrt rule from the base), at most
    5 epochs of the whole training set (full; smoke: 1): the plateau ends each size before it on this data."""
    from ..config import pick
    from ..sweeps import scaled_config
    from ..train.ncf import epochs_to_steps

    cfg = scaled_config(base_cfg, batch_size, "sqrt", base_batch_size=base_cfg.global_batch_size)
    return cfg, epochs_to_steps(pick(profile, full=5.0, smoke=1.0), data, cfg)


def exponent_estimate(rows: list[dict], fit: dict, what: str = "NeuMF") -> compare.Estimate:
    """The law's exponent ``b`` with its standard error: the slope of ``log(err - c)`` on ``log N`` over the fitted
    ``rows``, the floor ``c`` held at its fit (the floor's own uncertainty left out: a lower bound on the error);
    ``n - 2`` degrees of freedom, one seed per size."""
    line = compare.line_fit([math.log(r["size"]) for r in rows], [math.log(r["error"] - fit["c"]) for r in rows])
    return compare.estimate(f"{what}: the law's exponent b", -line.slope, line.slope_se, df=line.df,
                            basis=f"slope of log(err - c) on log N, c held at its fit; {len(rows)} sizes, one seed "
                                  f"each, {line.df} df")


def law_text(fit: dict) -> str:
    """``a N^-b + c`` as the fit gives it, the exponent printed with its one sign (``N^+0.001`` where it came out
    negative)."""
    return f"{fit['a']:.3g} N^{-fit['b']:+.3f} + {fit['c']:.3f}"


def scaling_table(rows: list[dict], pred: dict, held_out: dict | None = None) -> Table:
    """The fitted sizes, then the held-out one (``held_out``: its row), each at its best held-out HR@10 and the step
    of that best, with the law's error at each; "plateau" says early stopping ended the run, "cap" that the cap
    on steps did (that size may not have converged)."""
    t = Table(["training interactions", "fraction", "held-out HR@10", "error 1 - HR", "best at step", "ended by",
               "the law's error"],
              title=f"err(N) = {law_text(pred['fit'])} (fitted on all rows but the held-out one; each size at its "
                    "best)")
    for r, last in [(r, False) for r in rows] + ([(held_out, True)] if held_out else []):
        law = f"{power_law_error(pred['fit'], r['size']):.4f}"
        t.add(**{"training interactions": f"{r['size']:,}" + (" (held out)" if last else ""),
                 "fraction": f"{r['fraction']:.3g}", "held-out HR@10": f"{r['metric']:.4f}",
                 "error 1 - HR": f"{r['error']:.4f}", "best at step": f"{r['best_step']:,}",
                 "ended by": "plateau" if r["converged"] else "cap",
                 "the law's error": law + (" (predicted)" if last else "")})
    return t


def scaling_comparisons(pred: dict, what: str, noise: float = SCALING_NOISE) -> list[compare.Comparison]:
    """Hestness et al.'s check on ``what``: the held-out size's error against the law's prediction ("same":
    predicted within :data:`PREDICTION_GOAL`), and against the largest fitted size's error ("lower": more data
    lowered it). One run's error has the relative standard error ``noise``, or the law's rms miss at its fitted
    sizes where that is larger."""
    one = max(pred.get("residual_rms") or 0.0, noise)
    out = [compare.quantity_ratio(f"{what}: held-out error, measured / the law's", pred["measured_error"] /
                                  pred["predicted_error"], math.hypot(one, pred.get("residual_rms") or 0.0),
                                  needed=PREDICTION_GOAL, n=f"{len(pred['fit_residuals'])} sizes + 1",
                                  basis="one run's noise and the law's rms miss")]
    last = pred.get("largest_fitted_error")
    if last:
        out.append(compare.quantity_ratio(f"{what}: held-out error / at the largest fitted size",
                                          pred["measured_error"] / last, math.sqrt(2) * one, needed=PREDICTION_GOAL,
                                          n="1/1", basis="two runs' noise"))
    return out
