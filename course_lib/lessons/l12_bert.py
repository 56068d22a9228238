"""Lesson 12's search on lesson 07's BERT: the lr and the warmup, random search against Hyperband at the
same budget of optimizer steps, the held-out loss the resource; its table and its comparisons."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

from .. import compare
from ..config import pick
from ..optuna_search import open_study, run_search, trial_budget
from ..tables import Table
from .l12_hyperparameter_search import epochs_to_target, progress

# The least a best loss is known to where the best trial's last evaluations no longer moved: the table's
# rounding of a held-out loss.
LOSS_RESOLUTION = 1e-3

def bert_spec(profile: str, plan, saved07: dict | None = None, *, seeds: int | None = None) -> dict:
    """The BERT search's sizes: LAMB at ``batch`` sequences for at most ``max_steps`` steps, evaluated
    every ``eval_every`` (the resource), ``budget`` evaluations per search (3 full trials' worth), random
    search against Hyperband. Lesson 07's model and target loss when it ran in this profile.

    Small on purpose: BERT-mini trains slowly on a CPU (on 2 cores the searches at batch 64 took most of
    the lesson's time), so the full profile searches at lesson 07's small batch, 32, on one seed; with one
    seed the comparison's interval is the evaluations' resolution (:func:`bert_comparisons`)."""
    from .l07_bert_lamb import saved_setting

    max_steps = pick(profile, full=48, smoke=8)
    eval_every = pick(profile, full=6, smoke=2)
    max_resource = math.ceil(max_steps / eval_every)
    return {"profile": profile, **saved_setting(saved07, profile, plan), "batch": pick(profile, full=32, smoke=8),
            "optimizer": "lamb", "max_steps": max_steps, "eval_every": eval_every, "max_resource": max_resource,
            "reduction_factor": 2, "budget": 3 * max_resource,
            "seeds": list(range(seeds or pick(profile, full=1, smoke=1))), "strategies": ["random", "hyperband"]}


def bert_base_config(bspec: dict):
    """The setting every BERT trial starts from (the trial fills in the lr and the warmup)."""
    from ..train.mlm import MLMTrainConfig

    return MLMTrainConfig(optimizer=bspec["optimizer"], model=bspec["model"], global_batch_size=bspec["batch"],
                          micro_batch_size=bspec["batch"], base_batch_size=bspec["batch"], max_steps=bspec["max_steps"],
                          warmup_steps=0, eval_every_steps=bspec["eval_every"], dropout=0.0, precision="fp32", seed=0)


def run_bert_one(data, bspec: dict, strategy: str, seed: int, directory, *, device=None) -> dict:
    """One BERT search (minimizing the held-out loss) in its own journal under ``directory``; its record."""
    from ..optuna_search import mlm_objective

    name = f"bert-{strategy}-seed{seed}"
    path = Path(directory) / f"{name}.log"
    study = open_study(name, path, strategy=strategy, seed=seed, max_resource=bspec["max_resource"],
                       reduction_factor=bspec["reduction_factor"], direction="minimize")
    start = time.perf_counter()
    run_search(study, mlm_objective(data, bert_base_config(bspec), device=device), budget=bspec["budget"])
    trials = [{"number": t.number, "state": t.state.name, "budget": trial_budget(t), "value": t.value,
               "curve_loss": list(t.user_attrs.get("curve_loss", [])), "params": dict(t.params)}
              for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    trials.sort(key=lambda t: t["number"])
    return {"strategy": strategy, "seed": seed, "seconds": time.perf_counter() - start, "journal": str(path),
            "trials": trials}


def bert_progress(record: dict, eval_every: int) -> list[tuple[float, float]]:
    """(optimizer steps spent, best held-out loss seen so far) after each finished trial of a BERT search."""
    return progress(record, eval_every, curve="curve_loss", minimize=True)


def _best_trial(record: dict, curve: str = "curve_loss"):
    """The trial with the lowest finite value on its curve (None: no trial has one)."""
    scored = [(min(v for v in t[curve][1:] if v is not None and math.isfinite(v)), t["number"], t)
              for t in record["trials"] if any(v is not None and math.isfinite(v) for v in t[curve][1:])]
    return min(scored, key=lambda x: x[:2])[2] if scored else None


def bert_rows(records: list[dict], bspec: dict) -> list[dict]:
    """Per strategy and seed: trials, pruned, best loss and the lr of the trial that gave it, steps spent
    and steps until lesson 07's target."""
    rows = []
    for r in records:
        done = bert_progress(r, bspec["eval_every"])
        reach = None if bspec["target_loss"] is None else epochs_to_target(
            r, bspec["target_loss"], bspec["eval_every"], curve="curve_loss", minimize=True)
        best = _best_trial(r)
        lr = None if best is None else best["params"].get("base_lr")
        rows.append({"strategy": r["strategy"], "seed": r["seed"], "trials": len(r["trials"]),
                     "pruned": sum(t["state"] == "PRUNED" for t in r["trials"]),
                     "best held-out loss": done[-1][1] if done else math.inf,
                     "best trial's lr": None if lr is None else float(f"{lr:.3g}"),
                     "steps spent": round(done[-1][0]) if done else 0,
                     "steps to target": None if reach is None else round(reach),
                     "seconds": r["seconds"]})
    return rows


def bert_table(rows: list[dict], bspec: dict) -> Table:
    target = bspec["target_loss"]
    t = Table(["strategy", "seed", "trials", "pruned", "best held-out loss", "best trial's lr", "steps spent",
               "steps to target", "seconds"],
              title=f"BERT-{bspec['model']}, LAMB at batch {bspec['batch']}: lr and warmup searched at equal budget"
              + (f" (target: lesson 07's loss {target:.3f})" if target is not None else ""))
    for r in rows:
        t.add(**{**r, "best held-out loss": round(r["best held-out loss"], 3),
                 "steps to target": "n/a" if target is None else ("not reached" if r["steps to target"] is None
                                                                   else r["steps to target"]),
                 "seconds": round(r["seconds"], 1)})
    return t




def _last_drop(record: dict) -> float:
    """How much the best trial's held-out loss fell between its last two evaluations: what a trial evaluated
    one step further apart could have missed."""
    best = _best_trial(record)
    if best is None:
        return 0.0
    v = [x for x in best["curve_loss"][1:] if x is not None and math.isfinite(x)]
    return max(0.0, v[-2] - v[-1]) if len(v) > 1 else 0.0


def _arm(rows: list[dict]) -> tuple[float, float]:
    losses = [r["best held-out loss"] for r in rows]
    m = statistics.fmean(losses)
    return m, (statistics.stdev(losses) / math.sqrt(len(losses)) if len(losses) > 1 else 0.0)


def bert_comparisons(records: list[dict], rows: list[dict], bspec: dict) -> list[compare.Comparison]:
    """Hyperband against random search on BERT: the best held-out loss each found with the same steps
    (Hyperband minus random: below 0, Hyperband found the better setting), the seeds' spread where there
    are several, widened by the evaluations' resolution (the best trials' last drop between evaluations).
    With lesson 07's LAMB curve, also the best trial here against that run at a trial's last step: above 0,
    the settings drawn here trained slower than lesson 07's, not only for fewer steps."""
    by = {s: [r for r in rows if r["strategy"] == s] for s in ("random", "hyperband")}
    if not by["random"] or not by["hyperband"] or any(math.isinf(r["best held-out loss"]) for r in rows):
        return []
    res = max([LOSS_RESOLUTION] + [_last_drop(r) for r in records])
    (a, se_a), (b, se_b) = _arm(by["random"]), _arm(by["hyperband"])
    n = min(len(by["random"]), len(by["hyperband"]))
    out = [compare.difference("best held-out loss, hyperband - random (BERT)", a, se_a, b, se_b,
                              needed=compare.LOSS_EFFECT, df=n - 1 if n > 1 else None, resolution=res,
                              n=f"{len(by['random'])}/{len(by['hyperband'])}",
                              basis=f"{n} seed(s); evaluations resolve {res:.3g} nats")]
    seen = [(s, v) for s, v in bspec.get("lamb_curve") or [] if s <= bspec["max_steps"]]
    if seen:
        step, loss = seen[-1]
        found = min(r["best held-out loss"] for r in rows)
        out.append(compare.difference(f"held-out loss by step {step:g}, best trial - lesson 07's LAMB run", loss, 0.0,
                                      found, 0.0, needed=compare.LOSS_EFFECT, resolution=res, n="1/1",
                                      basis=f"one run each; evaluations resolve {res:.3g} nats"))
    return out
