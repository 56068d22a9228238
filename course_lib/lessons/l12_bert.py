"""Lesson 12's search on lesson 07's BERT: random search over the lr and the warmup against lesson 07's
own grid (three lrs around the one it found, its warmup) at the same budget of optimizer steps, the
held-out loss the objective; its table (token frequencies alone as the floor) and its comparisons."""

from __future__ import annotations

import math
import random
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
GRID_FACTORS = (0.5, 1.0, 2.0)  # lesson 07's lr grid around its tuned lr (before any edge extension)
GRID_WARMUP = 0.1  # lesson 07's warmup at its small batch, a fraction of the run
LAMB_LR = 1e-2  # lesson 07's LAMB lr at batch 32, where it has not saved a run in this profile
BOOTSTRAP = 2000  # resamples of a search's trials for the spread of its best


def bert_spec(profile: str, plan, saved07: dict | None = None, *, seeds: int | None = None) -> dict:
    """The BERT search's sizes: LAMB at ``batch`` sequences for at most ``max_steps`` steps, evaluated
    every ``eval_every``, ``budget`` evaluations per search (3 full trials' worth, as many as the grid has
    points), in lesson 07's precision. "random" draws the lr (log scale, three decades) and the warmup;
    "grid" runs lesson 07's lr grid (``grid_lrs``: its tuned LAMB lr, sqrt-scaled to this batch, times
    :data:`GRID_FACTORS`) at its warmup. Lesson 07's model and target loss when it ran in this profile.

    Small on purpose: BERT-mini trains slowly on a CPU, so the full profile searches at lesson 07's small
    batch, 32, on one seed; with 3 trials a search the comparison is often unresolved
    (:func:`bert_comparisons`)."""
    from .l07_bert_lamb import saved_setting

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


def bert_base_config(bspec: dict):
    """The setting every BERT trial starts from (the trial fills in the lr and the warmup): lesson 07's
    precision ("auto": bf16 where the hardware has it natively)."""
    from ..train.mlm import MLMTrainConfig

    return MLMTrainConfig(optimizer=bspec["optimizer"], model=bspec["model"], global_batch_size=bspec["batch"],
                          micro_batch_size=bspec["batch"], base_batch_size=bspec["batch"], max_steps=bspec["max_steps"],
                          warmup_steps=0, eval_every_steps=bspec["eval_every"], dropout=0.0, precision="auto", seed=0)


def run_bert_one(data, bspec: dict, strategy: str, seed: int, directory, *, device=None) -> dict:
    """One BERT search (minimizing the held-out loss, no pruning) in its own journal under ``directory``; its
    record. "grid" samples ``bspec["grid_lrs"]`` at ``bspec["grid_warmup"]`` in a seeded order."""
    import optuna

    from ..optuna_search import mlm_objective

    name = f"bert-{strategy}-seed{seed}"
    path = Path(directory) / f"{name}.log"
    grid = None if strategy != "grid" else optuna.samplers.GridSampler(
        {"base_lr": bspec["grid_lrs"], "warmup_fraction": [bspec["grid_warmup"]]}, seed=seed)
    study = open_study(name, path, strategy="random", seed=seed, max_resource=bspec["max_resource"],
                       direction="minimize", sampler=grid)
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
    """Per strategy and seed: trials, best loss and the lr and warmup of the trial that gave it, steps spent
    and steps until lesson 07's target."""
    rows = []
    for r in records:
        done = bert_progress(r, bspec["eval_every"])
        reach = None if bspec["target_loss"] is None else epochs_to_target(
            r, bspec["target_loss"], bspec["eval_every"], curve="curve_loss", minimize=True)
        best = _best_trial(r)
        lr, warm = (None, None) if best is None else (best["params"].get("base_lr"),
                                                      best["params"].get("warmup_fraction"))
        rows.append({"strategy": r["strategy"], "seed": r["seed"], "trials": len(r["trials"]),
                     "best held-out loss": done[-1][1] if done else math.inf,
                     "best trial's lr": None if lr is None else float(f"{lr:.3g}"),
                     "best trial's warmup": None if warm is None else round(warm, 3),
                     "steps spent": round(done[-1][0]) if done else 0,
                     "steps to target": None if reach is None else round(reach),
                     "seconds": r["seconds"]})
    return rows


def bert_table(rows: list[dict], bspec: dict, unigram_loss: float | None = None) -> Table:
    """The searches' rows, and ``unigram_loss`` (token frequencies alone) as the floor a trial must pass to
    have learned anything about context."""
    target = bspec["target_loss"]
    t = Table(["strategy", "seed", "trials", "best held-out loss", "best trial's lr", "best trial's warmup",
               "steps spent", "steps to target", "seconds"],
              title=f"BERT-{bspec['model']}, LAMB at batch {bspec['batch']}: searches at equal budget"
              + (f" (target: lesson 07's loss {target:.3f})" if target is not None else ""))
    for r in rows:
        t.add(**{**r, "best held-out loss": round(r["best held-out loss"], 3),
                 "steps to target": "n/a" if target is None else ("not reached" if r["steps to target"] is None
                                                                   else r["steps to target"]),
                 "seconds": round(r["seconds"], 1)})
    if unigram_loss is not None:
        t.add(**{**dict.fromkeys(t.columns, "-"), "strategy": "token frequencies alone",
                 "best held-out loss": round(unigram_loss, 3)})
    return t


def _last_drop(record: dict) -> float:
    """How much the best trial's held-out loss fell between its last two evaluations: what a trial evaluated
    one step further apart could have missed."""
    best = _best_trial(record)
    if best is None:
        return 0.0
    v = [x for x in best["curve_loss"][1:] if x is not None and math.isfinite(x)]
    return max(0.0, v[-2] - v[-1]) if len(v) > 1 else 0.0


def trial_bests(record: dict) -> list[float]:
    """Each trial's lowest held-out loss (step 0 included: a trial that diverged at once found the untrained
    model's loss)."""
    return [min((v for v in t["curve_loss"] if v is not None and math.isfinite(v)), default=math.inf)
            for t in record["trials"]]


def best_spread(bests: list[float], resamples: int = BOOTSTRAP, seed: int = 0) -> float:
    """The standard error of a search's best loss from its trials' bests: their bootstrap (the trials
    resampled with replacement, the best of each resample). A search whose trials were all alike has a
    small one; one whose best is a single lucky draw a large one; fewer than two finite trials: inf."""
    finite = [b for b in bests if math.isfinite(b)]
    if len(finite) < 2:
        return math.inf
    rng = random.Random(seed)
    return statistics.stdev(min(rng.choices(finite, k=len(finite))) for _ in range(resamples))


def _arm(records: list[dict]) -> tuple[float, float, int]:
    """A strategy's best loss (the mean over its seeds), its standard error and its trials."""
    bests = [trial_bests(r) for r in records]
    m = statistics.fmean(min(b, default=math.inf) for b in bests)
    return m, math.sqrt(sum(best_spread(b) ** 2 for b in bests)) / len(bests), sum(map(len, bests))


def bert_comparisons(records: list[dict], rows: list[dict], bspec: dict,
                     unigram_loss: float | None = None) -> list[compare.Comparison]:
    """Lesson 07's grid against random search on BERT: the best held-out loss each found with the same
    steps (grid minus random: below 0, the grid found the better setting), each arm's interval the
    bootstrap of its trials (:func:`best_spread`) widened by the evaluations' resolution (the best
    trials' last drop between evaluations). With ``unigram_loss``, the best found against token
    frequencies alone (below 0: the search's best learned context). With lesson 07's LAMB curve, the best
    trial here against that run at a trial's last step (above 0: the settings tried here trained slower)."""
    by = {s: [r for r in records if r["strategy"] == s and r["trials"]] for s in bspec["strategies"]}
    if any(not v for v in by.values()) or any(math.isinf(r["best held-out loss"]) for r in rows):
        return []
    res = max([LOSS_RESOLUTION] + [_last_drop(r) for r in records])
    (a, se_a, na), (b, se_b, nb) = (_arm(v) for v in by.values())
    names = list(by)
    basis = f"each best's spread over its trials resampled; evaluations resolve {res:.3g} nats"
    out = [compare.difference(f"best held-out loss, {names[1]} - {names[0]} (BERT)", a, se_a, b, se_b,
                              needed=compare.LOSS_EFFECT, resolution=res, n=f"{na}/{nb}", basis=basis)]
    (best, se), found = min(((a, se_a), (b, se_b))), min(r["best held-out loss"] for r in rows)
    if unigram_loss is not None:
        out.append(compare.quantity("best held-out loss found - token frequencies alone (BERT)",
                                    best - unigram_loss, se, needed=compare.LOSS_EFFECT, resolution=res,
                                    n=f"{na + nb}", basis=basis))
    seen = [(s, v) for s, v in bspec.get("lamb_curve") or [] if s <= bspec["max_steps"]]
    if seen:
        step, loss = seen[-1]
        out.append(compare.difference(f"held-out loss by step {step:g}, best trial - lesson 07's LAMB run", loss, 0.0,
                                      found, 0.0, needed=compare.LOSS_EFFECT, resolution=res, n="1/1",
                                      basis=f"one run each; evaluations resolve {res:.3g} nats"))
    return out
