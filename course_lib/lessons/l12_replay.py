"""Lesson 12's tabular benchmark: a pool trained once to the end, the searches replayed on its curves over many seeds,
the winner retrained. A replay that misses counts at its budget: fewer epochs than it needed, never more."""

from __future__ import annotations

import math
import statistics
import time

from .. import compare
from ..optuna_search import NEUMF_SPACE as S
from ..optuna_search import TPE_STARTUP_TRIALS, pool_target, replay_strategies, suggest_neumf
from ..tables import Table, cell_text
from ..train.ncf import steps_per_epoch, train_to_target
from .l12_hyperparameter_search import base_config


def pool_curve(data, spec: dict, params: dict, target_hr: float, *, seed: int = 0, device=None) -> list:
    """HR@10 at each evaluation of one pool configuration trained with the search's setting."""
    import optuna

    base = base_config(spec, target_hr).replace(eval_every_epochs=spec["pool_eval_every"], seed=seed)
    cfg = suggest_neumf(optuna.trial.FixedTrial(params), base, steps_per_epoch(data, base))
    return train_to_target(data, cfg, device=device, progress="none").curve["hr"][1:]


def record_pool(data, spec: dict, *, device=None, seed: int = 0) -> dict:
    """``pool_size`` configurations drawn as random search draws them (Optuna's ``RandomSampler``), each one's HR@10
    at the ``pool_resource`` points (a diverged run keeps its last value)."""
    import optuna

    num, cat = optuna.distributions.FloatDistribution, optuna.distributions.CategoricalDistribution
    dists = {"base_lr": num(*S["base_lr"], log=True), "warmup_fraction": num(*S["warmup_fraction"]),
             "lr_scaling": cat(list(S["lr_scaling"])), "weight_decay": num(*S["weight_decay"], log=True),
             "optimizer": cat(list(S["optimizer"]))}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    params = [dict(st.ask(dists).params) for _ in range(spec["pool_size"])]
    curves, start = [], time.perf_counter()
    for p in params:
        hr = [h if h is not None and math.isfinite(h) else 0.0 for h in pool_curve(data, spec, p, 1.0, device=device)]
        curves.append((hr + [hr[-1] if hr else 0.0] * spec["pool_resource"])[:spec["pool_resource"]])
    return {"params": params, "curves": curves, "seconds": time.perf_counter() - start}


def replay(pool: dict, spec: dict) -> dict:
    """The strategies replayed on the pool's curves to the pool's top-``top_fraction`` target; ``points``: each
    replay's evaluation points spent until it reached it (inf: missed)."""
    target = pool_target(pool["curves"], spec["top_fraction"])
    runs = replay_strategies(pool["curves"], budget=spec["replay_budget"], target=target,
                             seeds=spec["replay_seeds"], reduction_factor=spec["reduction_factor"])
    points = {st: [math.inf if r["reached_at"] is None else r["reached_at"] for r in rs] for st, rs in runs.items()}
    return {"target": target, "points": points, "reached_by": sum(max(c) >= target for c in pool["curves"])}


def _epochs(x: float, per: float):
    return "not reached" if x is None or math.isinf(x) else round(x * per, 2)


def replay_table(rep: dict, spec: dict) -> Table:
    """Per strategy: how often a replay reached the target, and its epochs until then (median, quartiles)."""
    t = Table(["strategy", "seeds", "reached", "median epochs", "quartiles"])
    for st, v in ((st, sorted(points)) for st, points in rep["points"].items()):
        q = [_epochs(v[int(f * (len(v) - 1))], spec["pool_eval_every"]) for f in (0.25, 0.5, 0.75)]
        t.add(strategy=st, seeds=len(v), reached=f"{sum(not math.isinf(x) for x in v)}/{len(v)}",
              **{"median epochs": q[1], "quartiles": f"{cell_text(q[0])} to {cell_text(q[2])}"})
    return t


def replay_comparisons(rep: dict, spec: dict) -> list[compare.Comparison]:
    """Per pruning strategy, its epochs to the target over random search's (each its own draws: unpaired)."""
    per, budget = spec["pool_eval_every"], spec["replay_budget"]
    epochs = {st: [min(x, budget) * per for x in points] for st, points in rep["points"].items()}
    return [compare.ratio(f"epochs to target, {st} / random (replayed)", epochs["random"], v,
                          basis=f"{len(v)} replay seeds each; a miss at the budget", needed=compare.TIME_EFFECT)
            for st, v in epochs.items() if st != "random"]


def winner_params(pool: dict) -> dict:
    """The pool's best configuration: every search that reaches the top-fraction target found one of the best few."""
    i = max(range(len(pool["curves"])), key=lambda k: max(pool["curves"][k]))
    return {"index": i, "params": pool["params"][i], "pool_hr": max(pool["curves"][i]), "curve": pool["curves"][i]}


def _epochs_to(curve: list, target: float, per: float):
    """Epochs until ``curve`` first reaches ``target``, counted as the replay counts them (points x ``per``)."""
    return _epochs(next((k + 1 for k, h in enumerate(curve) if h is not None and math.isfinite(h) and h >= target),
                        None), per)


def confirm(data, spec: dict, win: dict, target: float, *, device=None) -> list[dict]:
    """The winner retrained on ``confirm_seeds`` fresh seeds: its best HR@10 and epochs to the target."""
    out = []
    for seed in range(1, spec["confirm_seeds"] + 1):
        hr = pool_curve(data, spec, win["params"], target, seed=seed, device=device)
        out.append({"seed": seed, "best HR@10": max((h for h in hr if h is not None and math.isfinite(h)), default=0.0),
                    "epochs to target": _epochs_to(hr, target, spec["pool_eval_every"])})
    return out


def confirm_table(win: dict, runs: list[dict], target: float, per: float | None = None) -> Table:
    """The winner's pool run (seed 0) and its retrainings (:func:`confirm`); epochs counted as the replay counts."""
    hit = _epochs_to(win.get("curve", []), target, per) if per else "-"
    pool = {"seed": "0 (the pool)", "best HR@10": win["pool_hr"], "epochs to target": hit}
    return Table(["seed", "best HR@10", "epochs to target"], [pool] + runs)


def tpe_comparisons(rows: list[dict], confirm_tab: Table) -> list[compare.Comparison]:
    """tpe_hyperband's best HR@10 minus hyperband's, each as uncertain as one configuration's best over training
    seeds (the retrainings'); none where TPE's model drew no trial or fewer than two retrainings exist."""
    by = {r["strategy"]: r for r in rows}
    tpe, hb = by.get("tpe_hyperband"), by.get("hyperband")
    hrs = [r["best HR@10"] for r in confirm_tab.rows if isinstance(r["best HR@10"], (int, float))]
    if tpe is None or hb is None or len(hrs) < 2 or tpe["trials"] <= TPE_STARTUP_TRIALS:
        return []
    sd = statistics.stdev(hrs)
    return [compare.difference("best HR@10, tpe_hyperband - hyperband", hb["best HR@10"], sd / math.sqrt(hb["seeds"]),
                               tpe["best HR@10"], sd / math.sqrt(tpe["seeds"]), needed=compare.HR_EFFECT,
                               df=len(hrs) - 1, resolution=0.0 if sd > 0 else 1e-3, n=f"{hb['seeds']}/{tpe['seeds']}",
                               basis=f"one configuration's spread over {len(hrs)} training seeds")]
