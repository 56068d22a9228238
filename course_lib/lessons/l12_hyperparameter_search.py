"""Lesson 12: grid, random search, successive halving and Hyperband at one budget on NeuMF (the mechanics are
:mod:`course_lib.optuna_search`). Budgets count evaluation points (``eval_every`` epochs); the tables show epochs."""

from __future__ import annotations

import math
import statistics
import time
from itertools import count, takewhile
from pathlib import Path

from .. import compare
from ..config import pick
from ..optuna_search import STRATEGIES, neumf_objective, open_study, run_search, trial_budget
from ..sweeps import sweep_with_edge_extension
from ..tables import Table
from ..train.ncf import TrainConfig, steps_per_epoch
from . import l09_performance_model as performance_study


def lesson_spec(profile: str, *, seeds: int | None = None) -> dict:
    """Sizes. A NeuMF epoch at batch 4096 on the small synthetic set takes ~0.6 s on 2 quiet cores; a replay seed
    takes about a millisecond, and 5000 of them give a strategy's ratio to random search within about ±3.5%, finer
    than the 5% that counts (the interval narrows as one over the square root of the seeds)."""
    max_epochs = pick(profile, full=4.0, smoke=0.25)
    eval_every = pick(profile, full=0.5, smoke=0.125)
    max_resource = round(max_epochs / eval_every)
    every = pick(profile, full=0.25, smoke=0.0625)
    full_trials = pick(profile, full=30, smoke=6)
    return {"profile": profile, "batch": 4096, "max_epochs": max_epochs, "eval_every": eval_every,
            "max_resource": max_resource, "reduction_factor": 2,
            "budget": max_resource * pick(profile, full=4, smoke=2),
            "seeds": list(range(seeds or pick(profile, full=1, smoke=1))), "strategies": list(STRATEGIES),
            "pool_size": pick(profile, full=40, smoke=6), "pool_eval_every": every,
            "pool_resource": round(max_epochs / every), "replay_seeds": pick(profile, full=5000, smoke=20),
            "replay_full_trials": full_trials, "replay_budget": full_trials * round(max_epochs / every),
            "top_fraction": pick(profile, full=0.05, smoke=0.2), "confirm_seeds": pick(profile, full=2, smoke=1)}


def base_config(spec: dict, target_hr: float) -> TrainConfig:
    """The large-batch setting every trial starts from (the search fills in lr, warmup, rule, wd, optimizer)."""
    return TrainConfig(global_batch_size=spec["batch"], base_batch_size=256, optimizer="adam",
                       max_epochs=spec["max_epochs"], eval_every_epochs=spec["eval_every"], target_hr=target_hr,
                       stop_at_target=False)


def grid_cost_table(max_epochs: float, axes: int = 5, points=(2, 3, 4, 5)) -> Table:
    """Runs (``k ** axes``) and epochs of a full grid, ``k`` points per axis."""
    epochs = [k ** axes * max_epochs for k in points]
    return Table(["k", "runs", "epochs"], [{"k": k, "runs": k ** axes, "epochs": round(e) if e == round(e) else e}
                                           for k, e in zip(points, epochs)])


def edge_extension_runs(best_lr_factor: float, factors=(0.5, 1.0, 2.0), max_extensions: int = 2) -> list[float]:
    """The lr factors lesson 07's edge-extending grid runs when the best lr is at ``best_lr_factor``."""
    return sorted(sweep_with_edge_extension(lambda f: f, factors, lambda f: abs(math.log2(f / best_lr_factor)),
                                            max_extensions=max_extensions))


def trial_records(study, curve: str = "curve_hr") -> list[dict]:
    """The study's finished trials in the order they finished, as plain dicts (saved as JSON)."""
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    finished.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete or 0, t.number))
    return [{"number": t.number, "state": t.state.name, "budget": trial_budget(t), "value": t.value,
             curve: list(t.user_attrs.get(curve, [])), "params": dict(t.params),
             "samples_per_s": t.user_attrs.get("samples_per_s")} for t in finished]


def searched(study, objective, budget: int, strategy: str, seed: int, path, curve: str = "curve_hr") -> dict:
    start = time.perf_counter()
    run_search(study, objective, budget=budget)
    return {"strategy": strategy, "seed": seed, "seconds": time.perf_counter() - start, "journal": str(path),
            "trials": trial_records(study, curve)}


def run_all(data, spec: dict, target_hr: float, directory, *, device=None) -> list[dict]:
    """Every strategy at every seed of ``spec``, each in its own journal under ``directory`` (a line per search)."""
    records = []
    for seed in spec["seeds"]:
        for strategy in spec["strategies"]:
            path = Path(directory) / f"{strategy}-seed{seed}.log"
            # Optuna's Hyperband brackets hash the study's name: tpe_hyperband's trials go where hyperband's go
            name = "hyperband" if strategy == "tpe_hyperband" else strategy
            study = open_study(f"{name}-seed{seed}", path, strategy=strategy, seed=seed,
                               max_resource=spec["max_resource"], reduction_factor=spec["reduction_factor"])
            objective = neumf_objective(data, base_config(spec, target_hr), device=device)
            records.append(r := searched(study, objective, spec["budget"], strategy, seed, path))
            print(f"{strategy:18s} seed {seed}: {len(r['trials'])} trials, {r['seconds']:.1f} s", flush=True)
    return records


def parallel_spec(data, spec: dict, target_hr: float, directory, strategy: str = "hyperband", seed: int = 0) -> dict:
    """What :func:`course_lib.optuna_search.search_worker` needs: every process opens the same study."""
    name = f"parallel-{strategy}-seed{seed}"
    return {"name": name, "path": str(Path(directory) / f"{name}.log"), "strategy": strategy, "seed": seed,
            "max_resource": spec["max_resource"], "reduction_factor": spec["reduction_factor"],
            "budget": spec["budget"], "data": data, "base_cfg": base_config(spec, target_hr)}


def parallel_record(pspec: dict, outs: list[dict], wall_s: float) -> dict:
    """The record of a parallel search: the shared study's trials, what each process did, the wall time."""
    study = open_study(pspec["name"], pspec["path"], strategy=pspec["strategy"], seed=pspec["seed"],
                       max_resource=pspec["max_resource"], reduction_factor=pspec["reduction_factor"])
    return {"strategy": pspec["strategy"], "seed": pspec["seed"], "seconds": max(o["seconds"] for o in outs),
            "wall_s": wall_s, "processes": len(outs), "trials_per_process": [len(o["trials"]) for o in outs],
            "trials": trial_records(study)}


def finite(values) -> list[float]:
    """The values of a trial's curve that are numbers (a pruned or diverged point is None or nan)."""
    return [v for v in values if v is not None and math.isfinite(v)]


def progress(record: dict, per_point: float, *, curve: str = "curve_hr", minimize: bool = False) -> list[tuple]:
    """(epochs spent, best so far) after each finished trial (BERT: its loss curve, minimized, in steps)."""
    spent, best, out = 0.0, (math.inf if minimize else 0.0), []
    for t in record["trials"]:
        spent += t["budget"] * per_point
        best = (min if minimize else max)([best] + finite(t[curve][1:]))
        out.append((spent, best))
    return out


def epochs_to_target(record: dict, target: float, per_point: float, *, curve: str = "curve_hr",
                     minimize: bool = False) -> float | None:
    """Epochs spent (earlier trials, plus this one's points) when a trial first reached ``target``; None: none did."""
    spent = 0.0
    for t in record["trials"]:
        for i, v in enumerate(t[curve][1:], start=1):
            if v is not None and math.isfinite(v) and (v <= target if minimize else v >= target):
                return (spent + i) * per_point
        spent += t["budget"]
    return None


def strategy_rows(records: list[dict], target_hr: float, per_point: float) -> list[dict]:
    """Per strategy: epochs to the target and trials at it per seed, medians over seeds of the rest (None: missed)."""
    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        mine = [r for r in records if r["strategy"] == strategy]
        reach = [epochs_to_target(r, target_hr, per_point) for r in mine]
        ends = [progress(r, per_point)[-1] if r["trials"] else (0.0, 0.0) for r in mine]
        median = statistics.median([math.inf if v is None else v for v in reach])
        rows.append({"strategy": strategy, "seeds": len(mine), "to target": reach,
                     "median to target": None if math.isinf(median) else median,
                     "trials": statistics.median(len(r["trials"]) for r in mine),
                     "at target": [sum(any(v >= target_hr for v in finite(t["curve_hr"][1:])) for t in r["trials"])
                                   for r in mine],
                     "pruned": statistics.median(sum(t["state"] == "PRUNED" for t in r["trials"]) for r in mine),
                     "best HR@10": statistics.median(e[1] for e in ends),
                     "epochs": statistics.median(e[0] for e in ends),
                     "s": round(statistics.median(r["seconds"] for r in mine), 1)})
    return rows


def strategy_table(rows: list[dict]) -> Table:
    return Table(list(rows[0]) if rows else [], [
        {**r, "to target": ", ".join("-" if v is None else f"{v:g}" for v in r["to target"]),
         "at target": ", ".join(map(str, r["at target"])), "median to target": r["median to target"] or "not reached"}
        for r in rows])


def hyperband_brackets(max_resource: int, min_resource: int = 1, reduction_factor: int = 3) -> list[dict]:
    """The brackets Optuna's HyperbandPruner runs (its source's arithmetic): share of trials, rungs, survivors."""
    n = math.floor(math.log(max_resource / min_resource, reduction_factor)) + 1
    alloc = [math.ceil(n * reduction_factor ** (n - 1 - s) / (n - s)) for s in range(n)]
    rungs = [list(takewhile(lambda r: r < max_resource, (min_resource * reduction_factor ** k for k in count(s))))
             for s in range(n)]
    return [{"bracket": s, "share": alloc[s] / sum(alloc), "rungs": rungs[s],
             "survivors": [reduction_factor ** -(i + 1) for i in range(len(rungs[s]))]} for s in range(n)]


def brackets_table(brackets: list[dict], per_point: float) -> Table:
    return Table(["bracket", "share", "rungs (epochs)", "past each rung"], [
        {"bracket": b["bracket"], "share": f"{b['share']:.0%}",
         "rungs (epochs)": ", ".join(f"{r * per_point:g}" for r in b["rungs"]) or "none",
         "past each rung": ", ".join(f"1/{round(1 / f)}" for f in b["survivors"]) or "-"} for b in brackets])


def parallel_table(sequential: dict, parallel: dict, target_hr: float, per_point: float) -> Table:
    """The search on 1 and on N processes: search and wall seconds (start-up included), trials, epochs."""
    t = Table(["processes", "search s", "wall s", "trials", "per process", "epochs", "best HR@10", "to target"])
    for procs, r in ((1, sequential), (parallel["processes"], parallel)):
        spent, best = progress(r, per_point)[-1] if r["trials"] else (0.0, 0.0)
        t.add(**{"processes": procs, "search s": round(r["seconds"], 1),
                 "wall s": round(r.get("wall_s", r["seconds"]), 1), "trials": len(r["trials"]),
                 "per process": ", ".join(map(str, r.get("trials_per_process", [len(r["trials"])]))),
                 "epochs": spent, "best HR@10": best,
                 "to target": epochs_to_target(r, target_hr, per_point) or "not reached"})
    return t


def trial_seconds(records: list[dict], data, spec: dict) -> dict[str, list[float]]:
    """Per optimizer, each trial's seconds for a full trial at the samples/s it trained at."""
    cfg, out = base_config(spec, 0.5), {}
    samples = steps_per_epoch(data, cfg) * cfg.global_batch_size * spec["max_epochs"]
    for t in (t for r in records for t in r["trials"] if t["samples_per_s"]):
        out.setdefault(t["params"].get("optimizer", "?"), []).append(samples / t["samples_per_s"])
    return out


def model_trial_seconds(data, spec: dict, curves, *, optimizers=("adam", "lamb"), device=None) -> dict[str, float]:
    """Per optimizer, lesson 09's predicted step on this device's ``curves`` x a full trial's steps (no evaluation)."""
    base = base_config(spec, 0.5)
    steps = math.ceil(spec["max_epochs"] * steps_per_epoch(data, base))
    return {opt: performance_study.ncf_step_prediction(data, base.replace(optimizer=opt), curves, device=device).step_s
            * steps for opt in optimizers}


def pruning_table(trial_s: dict[str, list[float]], predicted_s: dict[str, float], time_limit_s: float | None) -> Table:
    """Per optimizer: lesson 09's and the trials' (median) full-trial seconds, and what the limit prunes (of each)."""
    t = Table(["optimizer", "model s", "trials s", "model / trials", "limit s", "pruned", "trials over"])
    for opt, s in sorted(predicted_s.items()):
        v = trial_s.get(opt, [])
        m = statistics.median(v) if v else None
        t.add(**{"optimizer": opt, "model s": s, "trials s": "no trial" if m is None else m,
                 "model / trials": "-" if m is None else round(s / m, 2), "limit s": time_limit_s or "none",
                 "pruned": "no limit" if time_limit_s is None else "yes" if s > time_limit_s else "no",
                 "trials over": "no limit" if time_limit_s is None else "no trial" if not v else
                 f"{sum(x > time_limit_s for x in v)} of {len(v)}"})
    return t


def demo_time_limit(predicted_s: dict[str, float]) -> float | None:
    """Halfway between the fastest and slowest predicted full trial; None when they are within 10% of each other."""
    lo, hi = min(predicted_s.values()), max(predicted_s.values())
    return None if hi <= 1.1 * lo else (lo + hi) / 2


def live_comparisons(rows: list[dict], spec: dict) -> list[compare.Comparison]:
    """Per pruning strategy, epochs to the target over random search's, widened by an evaluation's spacing; a miss
    counts at the budget, and where both missed on every seed nothing bounds the ratio."""
    per, budget = spec["eval_every"], spec["budget"] * spec["eval_every"]
    by = {r["strategy"]: [budget if v is None else v for v in r["to target"]] for r in rows}
    missed = {r["strategy"]: all(v is None for v in r["to target"]) for r in rows}
    if "random" not in by:
        return []
    res = per / min(by["random"] + [v for vs in by.values() for v in vs])
    basis = "seed(s); evaluations {:g} epochs apart; a miss at the budget"
    return [compare.Comparison(f"epochs to target, {s} / random (live)", 1.0, 0.0, math.inf, compare.TIME_EFFECT,
                               "x", f"{len(by['random'])}/{len(v)}", "both missed on every seed", 1.0, True)
            if missed["random"] and missed[s] else
            compare.ratio(f"epochs to target, {s} / random (live)", by["random"], v, needed=compare.TIME_EFFECT,
                          resolution=res, basis=f"{len(v)} " + basis.format(per))
            for s, v in by.items() if s != "random"]


def late_cuts_table(records: list[dict], per_point: float) -> Table:
    """Every pruned trial that another search (same sampler seed) trained to the end; above the cutter's best: late."""
    best_of = lambda t: max(finite(t["curve_hr"][1:]), default=None)
    done = [(best_of(t), r, t) for r in records for t in r["trials"]
            if t["state"] == "COMPLETE" and best_of(t) is not None]
    seeds = len({r["seed"] for r in records}) > 1
    t = Table(["cut by", "lr", "optimizer", "cut at epoch", "HR@10 there", "ended by", "final HR@10", "cutter's best",
               "late bloomer"])
    for r in records:
        own = max((b for b in map(best_of, r["trials"]) if b is not None), default=0.0)
        for tr in r["trials"]:
            ends = [(b, r2) for b, r2, t2 in done if r2 is not r and t2["params"] == tr["params"]]
            if tr["state"] != "PRUNED" or not ends:
                continue
            end, r2 = max(ends, key=lambda e: e[0])
            t.add(**{"cut by": r["strategy"] + (f" (seed {r['seed']})" if seeds else ""),
                     "lr": tr["params"].get("base_lr"), "optimizer": tr["params"].get("optimizer", "-"),
                     "cut at epoch": tr["budget"] * per_point, "HR@10 there": tr["curve_hr"][round(tr["budget"])],
                     "ended by": r2["strategy"], "final HR@10": end, "cutter's best": own,
                     "late bloomer": "yes" if end > own else "no"})
    return t


def parallel_comparisons(sequential: dict, parallel: dict) -> list[compare.Comparison]:
    """N processes over one: the wall time (known to a trial: the budget is checked between trials), samples/s."""
    n = parallel["processes"]
    walls = [sequential.get("wall_s", sequential["seconds"]), parallel["wall_s"]]
    per_trial = sequential["seconds"] / max(1, len(sequential["trials"]))
    out = [compare.ratio(f"wall seconds, {n} processes / 1", walls[:1], walls[1:], needed=compare.TIME_EFFECT,
                         resolution=per_trial / min(walls), basis="one search each; known to about one trial")]
    speeds = [[t["samples_per_s"] for t in r["trials"] if t.get("samples_per_s")] for r in (sequential, parallel)]
    if min(map(len, speeds)) > 1:
        out.append(compare.ratio(f"samples/s per trial, {n} processes / 1", speeds[0], speeds[1],
                                 needed=compare.SPEED_EFFECT))
    return out


def pruning_comparisons(trial_s: dict[str, list[float]], predicted_s: dict[str, float]) -> list[compare.Comparison]:
    """Per optimizer, lesson 09's full-trial seconds over the trials' geometric mean (their spread its error).
    Above 1 a limit set from the model prunes trials that would run under it; below 1 it keeps ones over it."""
    out = []
    for opt, s in sorted(predicted_s.items()):
        logs = [math.log(x) for x in trial_s.get(opt, [])]
        if len(logs) > 1:
            out.append(compare.quantity_ratio(
                f"full trial seconds, lesson 09's model / the trials ({opt})", s / math.exp(statistics.fmean(logs)),
                statistics.stdev(logs) / math.sqrt(len(logs)), needed=compare.MODEL_EFFECT, df=len(logs) - 1,
                n=str(len(logs)), basis=f"{len(logs)} trials' throughput"))
    return out
