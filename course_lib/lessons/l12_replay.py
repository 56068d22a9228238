"""Lesson 12's tabular benchmark: a pool of configurations trained once to the end, the searches replayed
on its recorded curves over many seeds, the winner retrained on fresh seeds, and the comparison of each
pruning strategy with random search (:func:`replay_comparisons`).

A replayed search that does not reach the target within its budget counts as having spent the whole
budget: the epochs it needed are at least that, so an arm that misses often is credited with fewer
epochs than it would have needed, never more.
"""

from __future__ import annotations

import math
import statistics
import time

from .. import compare
from ..optuna_search import TPE_STARTUP_TRIALS
from ..tables import Table, cell_text
from ..train.ncf import TrainConfig, steps_per_epoch
from .l12_hyperparameter_search import base_config

def pool_params(spec: dict, seed: int = 0) -> list[dict]:
    """``spec["pool_size"]`` configurations drawn at random from the search space (Optuna's own
    ``RandomSampler``, so the pool is what random search draws)."""
    import optuna

    from ..optuna_search import NEUMF_SPACE

    sampler = optuna.samplers.RandomSampler(seed=seed)
    dists = {"base_lr": optuna.distributions.FloatDistribution(*NEUMF_SPACE["base_lr"], log=True),
             "warmup_fraction": optuna.distributions.FloatDistribution(*NEUMF_SPACE["warmup_fraction"]),
             "lr_scaling": optuna.distributions.CategoricalDistribution(list(NEUMF_SPACE["lr_scaling"])),
             "weight_decay": optuna.distributions.FloatDistribution(*NEUMF_SPACE["weight_decay"], log=True),
             "optimizer": optuna.distributions.CategoricalDistribution(list(NEUMF_SPACE["optimizer"]))}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(sampler=sampler)
    out = []
    for _ in range(spec["pool_size"]):
        t = st.ask(dists)
        out.append(dict(t.params))
        st.tell(t, 0.0)
    return out


def pool_config(data, spec: dict, params: dict, target_hr: float, *, seed: int = 0) -> TrainConfig:
    """The TrainConfig of one pool configuration: the search's setting, evaluated every ``pool_eval_every``."""
    import optuna

    from ..optuna_search import suggest_neumf

    base = base_config(spec, target_hr).replace(eval_every_epochs=spec["pool_eval_every"], seed=seed)
    return suggest_neumf(optuna.trial.FixedTrial(params), base, steps_per_epoch(data, base))


def record_pool(data, spec: dict, *, device=None, seed: int = 0) -> dict:
    """Train every pool configuration once for the full ``max_epochs``: its HR@10 at each of the
    ``pool_resource`` evaluation points (a run that diverged keeps its last value: it cannot improve).
    Recorded before any search: its top ``top_fraction`` sets the target of the live searches and the replay."""
    from ..train.ncf import train_to_target

    params, curves, start = pool_params(spec, seed), [], time.perf_counter()
    for p in params:
        # no target to stop at (a run never stops early): the whole curve is the record
        r = train_to_target(data, pool_config(data, spec, p, 1.0), device=device, progress="none")
        hr = [h if h is not None and math.isfinite(h) else 0.0 for h in r.curve["hr"][1:]]
        hr += [hr[-1] if hr else 0.0] * (spec["pool_resource"] - len(hr))
        curves.append(hr[:spec["pool_resource"]])
    return {"params": params, "curves": curves, "seconds": time.perf_counter() - start}


def replay(pool: dict, spec: dict) -> dict:
    """Random search, successive halving and Hyperband replayed on the pool's curves, ``replay_seeds``
    seeds each, to the pool's top-``top_fraction`` target; per strategy the points spent to reach it."""
    from ..optuna_search import pool_target, replay_strategies

    target = pool_target(pool["curves"], spec["top_fraction"])
    runs = replay_strategies(pool["curves"], budget=spec["replay_budget"], target=target,
                             seeds=spec["replay_seeds"], reduction_factor=spec["reduction_factor"])
    return {"target": target, "runs": runs, "reached_by": sum(max(c) >= target for c in pool["curves"]),
            "pool_size": len(pool["curves"])}


def _to_target(runs: list[dict]) -> list[float]:
    return [math.inf if r["reached_at"] is None else r["reached_at"] for r in runs]


def replay_table(rep: dict, spec: dict) -> Table:
    """Per strategy: how often a replayed search reached the target, and the epochs it had spent when a
    configuration first did (median and quartiles over the replay's seeds)."""
    per = spec["pool_eval_every"]
    t = Table(["strategy", "seeds", "reached", "median epochs to target", "quartiles (epochs)"],
              title=(f"Replayed on {rep['pool_size']} recorded curves: epochs until HR@10 >= {rep['target']:.4g} "
                     f"(reached by {rep['reached_by']} of {rep['pool_size']} configurations), budget "
                     f"{spec['replay_budget'] * per:g} epochs per search"))

    def fmt(x):
        return "not reached" if math.isinf(x) else round(x * per, 2)

    for st, runs in rep["runs"].items():
        v = sorted(_to_target(runs))
        q = [v[int(f * (len(v) - 1))] for f in (0.25, 0.5, 0.75)]
        t.add(**{"strategy": st, "seeds": len(v), "reached": f"{sum(not math.isinf(x) for x in v)}/{len(v)}",
                 "median epochs to target": fmt(q[1]),
                 "quartiles (epochs)": f"{cell_text(fmt(q[0]))} to {cell_text(fmt(q[2]))}"})
    return t


def replay_comparisons(rep: dict, spec: dict) -> list[compare.Comparison]:
    """The lesson's question, "does cutting runs early beat random search?": per pruning strategy, its
    epochs to the target relative to random search's over the replay's seeds (each strategy its own
    draws, so unpaired: :func:`course_lib.compare.ratio`); a search that missed the target counts at its
    budget. Below 1: fewer epochs than random search."""
    per, budget = spec["pool_eval_every"], spec["replay_budget"]

    def epochs(runs):
        return [min(x, budget) * per for x in _to_target(runs)]

    rand = epochs(rep["runs"]["random"])
    return [compare.ratio(f"epochs to target, {st} / random (replayed)", rand, epochs(runs),
                          needed=compare.TIME_EFFECT,
                          basis=f"{len(runs)} replay seeds each; a miss counts at the budget")
            for st, runs in rep["runs"].items() if st != "random"]


def winner_params(pool: dict) -> dict:
    """The configuration to confirm: the pool's best (the top-fraction target is set by the pool's best
    few, so every search that reaches it, whichever strategy wins, found one of them)."""
    i = max(range(len(pool["curves"])), key=lambda k: max(pool["curves"][k]))
    return {"index": i, "params": pool["params"][i], "pool_hr": max(pool["curves"][i]), "curve": pool["curves"][i]}


def _points_to(curve: list, target: float) -> int | None:
    """The evaluation point (1, 2, ...) at which ``curve`` first reaches ``target``, as the replay counts them."""
    return next((k + 1 for k, h in enumerate(curve) if h is not None and math.isfinite(h) and h >= target), None)


def confirm(data, spec: dict, win: dict, target: float, *, device=None) -> list[dict]:
    """The winner retrained for real on ``confirm_seeds`` fresh seeds: its best HR@10 and epochs to the target."""
    from ..train.ncf import train_to_target

    out = []
    for seed in range(1, spec["confirm_seeds"] + 1):
        r = train_to_target(data, pool_config(data, spec, win["params"], target, seed=seed), device=device,
                            progress="none")
        hr = [h for h in r.curve["hr"][1:] if h is not None and math.isfinite(h)]
        hit = _points_to(r.curve["hr"][1:], target)
        out.append({"seed": seed, "best HR@10": max(hr, default=0.0),
                    "epochs to target": None if hit is None else round(hit * spec["pool_eval_every"], 2)})
    return out


def confirm_table(win: dict, runs: list[dict], target: float, per: float | None = None) -> Table:
    """The winner's pool run and its retrainings: best HR@10 and epochs to the target, counted as the replay
    counts them (evaluation points x ``per``), so the two read alike."""
    hit = _points_to(win.get("curve", []), target) if per else None
    t = Table(["training seed", "best HR@10", "epochs to target"],
              title=f"The pool's best configuration (HR@10 {win['pool_hr']:.4g} in the pool) retrained; "
                    f"target {target:.4g}"
                    + (f"; epochs counted as in the replay, evaluations x {per:g}" if per else ""))
    t.add(**{"training seed": "0 (the pool)", "best HR@10": win["pool_hr"],
             "epochs to target": "-" if not per else "not reached" if hit is None else round(hit * per, 2)})
    for r in runs:
        t.add(**{"training seed": r["seed"], "best HR@10": r["best HR@10"],
                 "epochs to target": "not reached" if r["epochs to target"] is None else r["epochs to target"]})
    return t




def tpe_comparisons(rows: list[dict], confirm_tab: Table) -> list[compare.Comparison]:
    """What TPE's model adds to Hyperband's cuts: tpe_hyperband's best HR@10 minus hyperband's (the live
    searches' medians), where one search's best is known only as well as one configuration's best varies
    over training seeds (the winner's retrainings: their spread is each arm's standard error). None where
    TPE's model drew no trial (only its random startup trials ran) or fewer than two retrainings exist."""
    by = {r["strategy"]: r for r in rows}
    tpe, hb = by.get("tpe_hyperband"), by.get("hyperband")
    hrs = [r["best HR@10"] for r in confirm_tab.rows if isinstance(r["best HR@10"], (int, float))]
    if tpe is None or hb is None or len(hrs) < 2 or tpe["trials (median)"] <= TPE_STARTUP_TRIALS:
        return []
    sd = statistics.stdev(hrs)
    se_a, se_b = sd / math.sqrt(hb["seeds"]), sd / math.sqrt(tpe["seeds"])
    return [compare.difference("best HR@10, tpe_hyperband - hyperband", hb["best HR@10 (median)"], se_a,
                               tpe["best HR@10 (median)"], se_b, needed=compare.HR_EFFECT, df=len(hrs) - 1,
                               resolution=0.0 if sd > 0 else 1e-3, n=f"{hb['seeds']}/{tpe['seeds']}",
                               basis=f"one configuration's spread over {len(hrs)} training seeds")]
