"""Lesson 11, predictable scaling (Hestness et al. 2017): the error as a power law of the training-set size."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from .. import compare
from ..tables import Table

PREDICTION_GOAL = 0.05  # the prediction of the held-out size's error counts as good within 5 % of it
SCALING_NOISE = 0.02  # one run's error, relative: HR@10's binomial error over ml-1m's 6,040 users is 1.6% of 0.4


def fit_power_law(sizes, errors, grid: int = 400) -> dict:
    """``err(N) = a * N^(-b) + c``, least squares in the error: for a floor ``c`` the rest is a line in log-log
    (closed form); ``c`` is searched on a grid over ``[0, min(err))``, refined by ``minimize_scalar``."""
    from scipy.optimize import minimize_scalar

    n, e = np.asarray(sizes, dtype=float), np.asarray(errors, dtype=float)
    if n.size != e.size or n.size < 3 or (n <= 0).any() or (e <= 0).any():
        raise ValueError(f"fit_power_law: need at least 3 positive (size, error) pairs, got {n.size}, {e.size}")

    def line(c):
        slope, intercept = np.polyfit(np.log(n), np.log(e - c), 1)
        return float(((np.exp(intercept) * n ** slope + c - e) ** 2).sum()), float(np.exp(intercept)), float(-slope)

    top = float(e.min()) * (1 - 1e-9)
    cs = np.linspace(0.0, top, grid, endpoint=False)
    best = int(np.argmin([line(c)[0] for c in cs]))
    lo, hi = cs[max(best - 1, 0)], cs[best + 1] if best + 1 < grid else top
    c = float(minimize_scalar(lambda c: line(c)[0], bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-12 * max(top, 1.0)}).x)
    sse, a, b = line(c)
    return {"a": a, "b": b, "c": c, "rmse": (sse / n.size) ** 0.5}


def power_law_error(fit: dict, size: float) -> float:
    return fit["a"] * size ** -fit["b"] + fit["c"]


def subsample_train(data, fraction: float, seed: int = 0):
    """``data`` with a ``fraction`` of its training interactions, and one per user at least (for train HR@10)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"subsample_train(fraction={fraction}): must be in (0, 1]")
    if fraction == 1:
        return data
    n, users = data.num_train, data.train_users.cpu()
    chosen = torch.zeros(n, dtype=torch.bool)
    chosen[torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:round(fraction * n)]] = True
    one = torch.full((data.num_users,), -1, dtype=torch.long).scatter_reduce(0, users, torch.arange(n), "amax")
    chosen[one[one >= 0]] = True
    keep = chosen.nonzero().squeeze(1).to(data.train_users.device)
    return replace(data, name=f"{data.name} ({fraction:.3g} of train)", train_users=data.train_users[keep],
                   train_items=data.train_items[keep])


def plateau(patience: int):
    """``stop_early`` once the held-out HR@10 has not beaten its best for ``patience`` evaluations."""
    hrs = []

    def stop(point: dict) -> bool:
        hrs.append(-math.inf if point.get("hr") is None else point["hr"])
        return len(hrs) - 1 - hrs.index(max(hrs)) >= patience  # evaluations since the first of the best

    return stop


def scaling_runs(data, base_cfg, fractions, *, batch_size: int, cap_epochs: float, device=None, seed: int = 0,
                 patience: int = 4, evals_per_epoch: int = 4, min_eval_steps: int = 20) -> list[dict]:
    """NeuMF at ``batch_size`` on each ``fraction`` of the training set, converged (Hestness et al.) or capped."""
    from ..sweeps import scaled_config
    from ..train import RunHooks, train_to_target
    from ..train.ncf import epochs_to_steps, steps_per_epoch

    cfg = scaled_config(base_cfg, batch_size, "sqrt", base_batch_size=base_cfg.global_batch_size)
    max_steps = epochs_to_steps(cap_epochs, data, cfg)
    rows = []
    for f in fractions:
        sub = subsample_train(data, f, seed)
        per_epoch = steps_per_epoch(sub, cfg)
        every = max(min_eval_steps, per_epoch / evals_per_epoch) / per_epoch
        r = train_to_target(sub, cfg.replace(max_epochs=max_steps / per_epoch, eval_every_epochs=every,
                                             stop_at_target=False), device=device, progress="none",
                            label=f"{f:.3g} of train", hooks=RunHooks(stop_early=plateau(patience)))
        best_hr, best_step = max(((h, s) for h, s in zip(r.curve["hr"], r.curve["step"]) if h is not None),
                                 key=lambda p: (p[0], -p[1]))
        rows.append({"fraction": f, "size": sub.num_train, "metric": best_hr, "error": 1 - best_hr,
                     "best_step": best_step, "steps": r.steps, "converged": bool(r.stopped_early),
                     "train_time_s": r.train_time_s})
    return rows


def scaling_prediction(rows: list[dict], held_out: dict) -> dict:
    """The law fitted on ``rows``; its prediction at ``held_out``'s size, and its misses at the fitted sizes."""
    fit = fit_power_law([r["size"] for r in rows], [r["error"] for r in rows])
    predicted = power_law_error(fit, held_out["size"])
    reachable = fit["b"] > 0 and held_out["error"] > fit["c"]
    needed = (fit["a"] / (held_out["error"] - fit["c"])) ** (1 / fit["b"]) if reachable else None
    residuals = [{"size": r["size"], "error": r["error"], "law": law, "relative": (r["error"] - law) / law}
                 for r, law in ((r, power_law_error(fit, r["size"])) for r in rows) if law > 0]
    largest = max(rows, key=lambda r: r["size"])
    rms = math.sqrt(sum(q["relative"] ** 2 for q in residuals) / len(residuals)) if residuals else None
    return {"fit": fit, "size": held_out["size"], "predicted_error": predicted, "measured_error": held_out["error"],
            "relative_error": (held_out["error"] - predicted) / predicted if predicted > 0 else math.inf,
            "fit_residuals": residuals, "residual_rms": rms,
            "size_for_measured": needed, "largest_fitted": largest["size"], "largest_fitted_error": largest["error"]}


def exponent_estimate(rows: list[dict], fit: dict) -> compare.Estimate:
    """``b`` with its error: the slope of ``log(err - c)`` on ``log N``, ``c`` fixed (the error a lower bound)."""
    line = compare.line_fit([math.log(r["size"]) for r in rows], [math.log(r["error"] - fit["c"]) for r in rows])
    return compare.estimate("exponent b", -line.slope, line.slope_se, df=line.df, basis=f"{len(rows)} sizes, 1 seed")


def scaling_table(rows: list[dict], pred: dict, held_out: dict | None = None) -> Table:
    fit = pred["fit"]  # the exponent printed with its one sign: N^+0.001 where it came out negative
    t = Table(["interactions", "fraction", "HR@10", "error", "best at step", "ended by", "law"],
              title=f"err(N) = {fit['a']:.3g} N^{-fit['b']:+.3f} + {fit['c']:.3f}")
    for r, last in [(r, False) for r in rows] + ([(held_out, True)] if held_out else []):
        t.add(**{"interactions": f"{r['size']:,}" + (" (held out)" if last else ""), "fraction": f"{r['fraction']:.3g}",
                 "HR@10": f"{r['metric']:.4f}", "error": f"{r['error']:.4f}", "best at step": f"{r['best_step']:,}",
                 "ended by": "plateau" if r["converged"] else "cap",
                 "law": f"{power_law_error(pred['fit'], r['size']):.4f}" + (" (predicted)" if last else "")})
    return t


def scaling_comparisons(pred: dict, noise: float = SCALING_NOISE) -> list[compare.Comparison]:
    """The held-out error over the law's and the largest fitted size's; a run's error: ``noise`` or the law's miss."""
    rms = pred.get("residual_rms") or 0.0
    one, measured = max(rms, noise), pred["measured_error"]
    return [compare.quantity_ratio("error, measured / law", measured / pred["predicted_error"], math.hypot(one, rms),
                                   needed=PREDICTION_GOAL, n=f"{len(pred['fit_residuals'])} sizes + 1",
                                   basis="run noise, law's rms miss"),
            compare.quantity_ratio("error, whole set / largest fitted", measured / pred["largest_fitted_error"],
                                   math.sqrt(2) * one, needed=PREDICTION_GOAL, n="1/1", basis="two runs' noise")]
