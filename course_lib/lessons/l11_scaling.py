"""Lesson 11, predictable scaling (Hestness et al. 2017): the held-out error as a power law of the training-set
size, fitted on smaller sizes and checked on the whole set; and the lesson's time budget for those runs.
"""

from __future__ import annotations

import math

import torch

from .. import compare
from ..tables import Table
from .l11_adaptive import SAME_SETTING

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


def scaling_runs(data, cfg, steps: int, fractions, *, device=None, seed: int = 0, evals: int = 12) -> list[dict]:
    """NeuMF trained on each ``fraction`` of the training set for the same ``steps`` (the smaller sets seen more
    often: Hestness et al. train each size to its best), evaluated ``evals`` times; one row per size:
    interactions, the best held-out HR@10 over its evaluation points, error ``1 - HR``."""
    from ..train import train_to_target
    from ..train.ncf import steps_per_epoch

    rows = []
    for f in fractions:
        sub = subsample_train(data, f, seed)
        epochs = steps / steps_per_epoch(sub, cfg)
        r = train_to_target(sub, cfg.replace(max_epochs=epochs, eval_every_epochs=epochs / evals, stop_at_target=False),
                            device=device, progress="none", label=f"{f:.3g} of train")
        rows.append({"fraction": f, "size": sub.num_train, "metric": r.best_hr, "error": 1 - r.best_hr,
                     "train_time_s": r.train_time_s})
    return rows


def mlm_scaling_runs(data, cfg, fractions, *, device=None) -> list[dict]:
    """The same for BERT (lesson 07's model and corpus): each run on the first ``fraction`` of the training
    sequences for ``cfg.max_steps`` steps, scored by its best held-out masked-LM loss (the same held-out
    sequences for every size); the loss is the error the law is fitted to."""
    from dataclasses import replace

    from ..train.mlm import train_mlm

    rows = []
    for f in fractions:
        if not 0 < f <= 1:
            raise ValueError(f"mlm_scaling_runs: fraction {f} must be in (0, 1]")
        n = max(1, round(f * data.num_train))
        record = train_mlm(cfg, replace(data, train_ids=data.train_ids[:n]), device=device, progress="none")
        rows.append({"fraction": f, "size": n, "metric": record["best_eval_loss"], "error": record["best_eval_loss"],
                     "train_time_s": record["train_time_s"]})
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
    """The setting of every size's run and its steps: ``batch_size`` (sqrt rule from the base), the same steps
    for every size (full: 1.5 epochs of the whole training set, so the six runs cost about nine epochs of
    samples; smoke: 1)."""
    from ..config import pick
    from ..sweeps import scaled_config
    from ..train.ncf import epochs_to_steps

    cfg = scaled_config(base_cfg, batch_size, "sqrt", base_batch_size=base_cfg.global_batch_size)
    return cfg, epochs_to_steps(pick(profile, full=1.5, smoke=1.0), data, cfg)


def law_text(fit: dict) -> str:
    """``a N^-b + c`` as the fit gives it, the exponent printed with its one sign (``N^+0.001`` where it came out
    negative)."""
    return f"{fit['a']:.3g} N^{-fit['b']:+.3f} + {fit['c']:.3f}"


def scaling_table(rows: list[dict], pred: dict, held_out: dict | None = None, size: str = "training interactions",
                  metric: str = "held-out HR@10", error: str = "error 1 - HR") -> Table:
    """The fitted sizes, then the held-out one (``held_out``: its row), with the law's error at each. The
    column names say what was measured (NeuMF's defaults; BERT: sequences, held-out loss)."""
    t = Table([size, "fraction", metric, error, "the law's error"],
              title=f"err(N) = {law_text(pred['fit'])} "
                    "(fitted on all rows but the held-out one)")
    for r in rows:
        t.add(**{size: f"{r['size']:,}", "fraction": f"{r['fraction']:.3g}", metric: f"{r['metric']:.4f}",
                 error: f"{r['error']:.4f}", "the law's error": f"{power_law_error(pred['fit'], r['size']):.4f}"})
    t.add(**{size: f"{pred['size']:,} (held out)", "fraction": f"{held_out['fraction']:.3g}" if held_out else "-",
             metric: f"{held_out['metric']:.4f}" if held_out else "-", error: f"{pred['measured_error']:.4f}",
             "the law's error": f"{pred['predicted_error']:.4f} (predicted)"})
    return t


def longer_run(result, cfg, steps: int, label: str = "section 1's run") -> dict | None:
    """``result`` (a NeuMF run on the whole training set) as the scaling runs' whole-set run trained past their
    ``steps``, where it is in ``cfg``'s setting (the same batch, lr, optimizer, schedule and seed): its HR@10 at the
    evaluation nearest ``steps`` and its best, for :func:`scaling_comparisons`. None in another setting, or when it
    trained no further than ``steps``."""
    c = result.config
    for k in SAME_SETTING:
        if k in c and hasattr(cfg, k):
            a, b = c[k], getattr(cfg, k)
            same = math.isclose(a, b, rel_tol=1e-9) if isinstance(a, float) and isinstance(b, float) else a == b
            if not same:
                return None
    pts = [(st, h) for st, h in zip(result.curve.get("step", []), result.curve.get("hr", [])) if h is not None]
    if not pts or pts[-1][0] <= steps:
        return None
    near = min(pts, key=lambda p: abs(p[0] - steps))
    best = max(pts, key=lambda p: p[1])
    return {"label": label, "scaling_steps": steps, "steps": near[0], "metric": near[1], "best_steps": best[0],
            "best": best[1]}


SCALING_FLOOR = 1 / 3  # the shortest scaling runs: a third of the full plan's steps (0.5 epoch of the whole NeuMF
# training set, a third of lesson 07's BERT run); shorter, the larger sizes stop before their best and the fit reads
# the budget instead of the data
SCALING_REST_S = 40.0  # the lesson's cells after the scaling sections (the BatchNorm launch, the figures, the save)


def size_scaling(budget: float, elapsed_s: float, *, neumf_run, neumf_eval_run, neumf_runs: int, neumf_steps: int,
                 neumf_evals: int, bert_run: dict, bert_runs: int, bert_steps: int, rest_s: float = SCALING_REST_S):
    """The two scaling sections (NeuMF's and BERT's runs at several data sizes, the last and costliest of the
    lesson) sized to what the lesson's ``budget`` has left after ``elapsed_s`` seconds and ``rest_s`` for the cells
    after them: :func:`course_lib.budget.size_plan` over their runs, at the paces this lesson's own runs measured
    (``neumf_run``: a NeuMF run at the scaling batch; ``neumf_eval_run``: one without probes, for the cost of an
    evaluation; ``bert_run``: the BERT run at lesson 07's setting). Every run's steps are cut alike (the same sizes,
    the same fit), down to :data:`SCALING_FLOOR`."""
    from ..budget import Runs, size_plan

    def per(total, n):
        return total / max(1, n)

    neumf_step = per(neumf_run.train_time_s, neumf_run.steps)
    neumf_eval = per(neumf_eval_run.eval_time_s, len(neumf_eval_run.curve.get("step", [])))
    bert_step = per(bert_run["train_time_s"], bert_run["steps"])
    bert_eval = per(bert_run["eval_time_s"], len(bert_run["curves"]["eval_step"]))
    runs = [Runs("NeuMF sizes", neumf_runs, neumf_steps, neumf_step, overhead_s=neumf_evals * neumf_eval),
            Runs("BERT sizes", bert_runs, bert_steps, bert_step,
                 overhead_s=len(bert_run["curves"]["eval_step"]) * bert_eval)]
    left = budget - elapsed_s - rest_s
    return size_plan(runs, max(left, 1.0), floor_scale=SCALING_FLOOR)


def sized_bert_config(cfg, steps: int):
    """Lesson 07's BERT setting (``cfg``, as :func:`bert_setting` builds it) at ``steps`` steps, with the same
    rules for its warmup (a tenth) and evaluations (twenty)."""
    return cfg.replace(max_steps=steps, warmup_steps=round(0.1 * steps), eval_every_steps=max(1, steps // 20))


def scaling_comparisons(pred: dict, what: str, longer: dict | None = None,
                        noise: float = SCALING_NOISE) -> list[compare.Comparison]:
    """Hestness et al.'s check on ``what`` (NeuMF, BERT): the held-out size's error against the law's prediction
    ("same": predicted within :data:`PREDICTION_GOAL`), and against the largest fitted size's error ("lower": more
    data lowered it; "same": it did not move at these steps). One run's error has the relative standard error
    ``noise``, or the law's rms miss at its fitted sizes where that is larger. With ``longer``
    (:func:`longer_run`): the same model on the whole set, its best error with more steps against the held-out
    run's ("lower": the steps, not the data, held these runs)."""
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
    if longer:
        out.append(compare.quantity_ratio(f"{what}: whole-set error, best with more steps / at the scaling steps",
                                          (1 - longer["best"]) / pred["measured_error"], math.sqrt(2) * noise,
                                          needed=PREDICTION_GOAL, n="1/1", basis="two evaluations' noise"))
    return out
