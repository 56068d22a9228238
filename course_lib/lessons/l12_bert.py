"""Lesson 12's search on lesson 07's BERT: random search over the lr and the warmup against lesson 07's own grid
at the same budget of optimizer steps, the held-out loss the objective."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

from .. import compare
from ..config import pick
from ..optuna_search import mlm_objective, open_study
from ..tables import Table
from ..train.mlm import MLMTrainConfig
from ..bert_setting import saved_setting
from .l12_hyperparameter_search import epochs_to_target, finite, progress, searched

LOSS_RESOLUTION = 1e-3  # the table's rounding of a held-out loss: the least a best loss is known to
GRID_FACTORS = (0.5, 1.0, 2.0)  # lesson 07's lr grid around its tuned lr (before any edge extension)
GRID_WARMUP = 0.1  # lesson 07's warmup at its small batch, a fraction of the run
LAMB_LR = 1e-2  # lesson 07's LAMB lr at batch 32, where it has not saved a run in this profile
BOOTSTRAP = 2000  # resamples of a search's trials for the spread of its best


def bert_spec(profile: str, plan, saved07: dict | None = None, *, seeds: int | None = None) -> dict:
    """The sizes: a search's budget is the grid's 3 full trials; the grid lesson 07's LAMB lr sqrt-scaled to this
    batch. Small on purpose (BERT-mini is slow on a CPU), so the comparison is often unresolved."""
    max_steps = pick(profile, full=48, smoke=8)
    eval_every = pick(profile, full=6, smoke=2)
    max_resource = math.ceil(max_steps / eval_every)
    batch = pick(profile, full=32, smoke=8)
    setting = saved_setting(saved07, profile, plan)
    lr = LAMB_LR if setting["lamb_lr"] is None else setting["lamb_lr"] * math.sqrt(batch / setting["target_batch"])
    return {"profile": profile, **setting, "batch": batch, "optimizer": "lamb", "max_steps": max_steps,
            "eval_every": eval_every, "max_resource": max_resource, "budget": len(GRID_FACTORS) * max_resource,
            "grid_lrs": [lr * f for f in GRID_FACTORS], "grid_warmup": GRID_WARMUP,
            "seeds": list(range(seeds or pick(profile, full=1, smoke=1))), "strategies": ["random", "grid"]}


def run_bert_one(data, bspec: dict, strategy: str, seed: int, directory, *, device=None) -> dict:
    """One BERT search (no pruning) in its own journal; "grid" samples the grid's lrs in a seeded order."""
    import optuna

    name = f"bert-{strategy}-seed{seed}"
    path = Path(directory) / f"{name}.log"
    grid = None if strategy != "grid" else optuna.samplers.GridSampler(
        {"base_lr": bspec["grid_lrs"], "warmup_fraction": [bspec["grid_warmup"]]}, seed=seed)
    study = open_study(name, path, strategy="random", seed=seed, max_resource=bspec["max_resource"],
                       direction="minimize", sampler=grid)
    return searched(study, mlm_objective(data, bert_base_config(bspec), device=device), bspec["budget"], strategy,
                    seed, path, "curve_loss")


def bert_base_config(bspec: dict):
    """The setting every BERT trial starts from (the trial sets the lr and the warmup), in lesson 07's precision."""
    b = bspec["batch"]
    return MLMTrainConfig(optimizer=bspec["optimizer"], model=bspec["model"], global_batch_size=b, micro_batch_size=b,
                          base_batch_size=b, max_steps=bspec["max_steps"], warmup_steps=0,
                          eval_every_steps=bspec["eval_every"], dropout=0.0, precision="auto", seed=0)


def _finite(t: dict, start: int = 1) -> list[float]:
    return finite(t["curve_loss"][start:])


def _best_trial(record: dict):
    """The trial with the lowest finite loss after step 0 (None: no trial has one)."""
    scored = [(min(_finite(t)), t["number"], t) for t in record["trials"] if _finite(t)]
    return min(scored, key=lambda x: x[:2])[2] if scored else None


def bert_rows(records: list[dict], bspec: dict) -> list[dict]:
    """Per search: trials, best loss and its trial's lr and warmup, steps spent and steps to lesson 07's target."""
    rows = []
    for r in records:
        done = progress(r, bspec["eval_every"], curve="curve_loss", minimize=True)
        reach = None if bspec["target_loss"] is None else epochs_to_target(
            r, bspec["target_loss"], bspec["eval_every"], curve="curve_loss", minimize=True)
        lr, warm = map((_best_trial(r) or {"params": {}})["params"].get, ("base_lr", "warmup_fraction"))
        rows.append({"strategy": r["strategy"], "seed": r["seed"], "trials": len(r["trials"]),
                     "loss": done[-1][1] if done else math.inf, "lr": None if lr is None else float(f"{lr:.3g}"),
                     "warmup": None if warm is None else round(warm, 3), "steps": round(done[-1][0]) if done else 0,
                     "to target": None if reach is None else round(reach), "s": r["seconds"]})
    return rows


def bert_table(rows: list[dict], bspec: dict, unigram_loss: float | None = None) -> Table:
    """The searches' rows and the unigram loss (token frequencies alone): a trial that learned context is below it."""
    t = Table(["strategy", "seed", "trials", "loss", "lr", "warmup", "steps", "to target", "s"])
    for r in rows:
        t.add(**{**r, "loss": round(r["loss"], 3), "s": round(r["s"], 1),
                 "to target": "n/a" if bspec["target_loss"] is None else r["to target"] or "not reached"})
    if unigram_loss is not None:
        t.add(**{**dict.fromkeys(t.columns, "-"), "strategy": "unigram", "loss": round(unigram_loss, 3)})
    return t


def _arm(records: list[dict]) -> tuple[float, float, int]:
    """A strategy's best loss (mean over seeds), its standard error (each search's bootstrap over its trials; inf
    with fewer than two) and its trials. A trial's best includes step 0: one that diverged found the untrained loss."""
    bests = [[min(_finite(t, 0), default=math.inf) for t in r["trials"]] for r in records]
    var = 0.0
    for b in bests:
        f, rng = [x for x in b if math.isfinite(x)], random.Random(0)
        var += math.inf if len(f) < 2 else statistics.variance(min(rng.choices(f, k=len(f))) for _ in range(BOOTSTRAP))
    m = statistics.fmean(min(b, default=math.inf) for b in bests)
    return m, math.sqrt(var) / len(bests), sum(map(len, bests))


def bert_comparisons(records: list[dict], rows: list[dict], bspec: dict,
                     unigram_loss: float | None = None) -> list[compare.Comparison]:
    """Grid minus random best loss at equal steps; the best found minus the unigram loss; lesson 07's LAMB run
    against the best trial here at a trial's last step."""
    by = {s: [r for r in records if r["strategy"] == s and r["trials"]] for s in bspec["strategies"]}
    if any(not v for v in by.values()) or any(math.isinf(r["loss"]) for r in rows):
        return []
    # widened by the best trials' last drop between evaluations: what a coarser evaluation would have missed
    lasts = [_finite(_best_trial(r) or {"curve_loss": []}) for r in records]
    res = max([LOSS_RESOLUTION] + [v[-2] - v[-1] for v in lasts if len(v) > 1])
    (a, se_a, na), (b, se_b, nb) = (_arm(v) for v in by.values())
    basis = f"trials resampled; evaluations resolve {res:.3g} nats"
    out = [compare.difference("best loss, {1} - {0} (BERT)".format(*by), a, se_a, b, se_b,
                              needed=compare.LOSS_EFFECT, resolution=res, n=f"{na}/{nb}", basis=basis)]
    (best, se), found = min(((a, se_a), (b, se_b))), min(r["loss"] for r in rows)
    if unigram_loss is not None:
        out.append(compare.quantity("best loss - unigram (BERT)", best - unigram_loss, se,
                                    needed=compare.LOSS_EFFECT, resolution=res, n=f"{na + nb}", basis=basis))
    seen = [(s, v) for s, v in bspec.get("lamb_curve") or [] if s <= bspec["max_steps"]]
    if seen:
        step, loss = seen[-1]
        out.append(compare.difference(f"loss by step {step:g}, best trial - lesson 07", loss, 0.0, found, 0.0,
                                      needed=compare.LOSS_EFFECT, resolution=res, n="1/1",
                                      basis=f"one run each; resolution {res:.3g} nats"))
    return out
