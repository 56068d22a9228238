"""What lesson 12 measures: grid vs random search vs successive halving vs Hyperband at one budget,
on NeuMF and (lr and warmup only) on lesson 07's BERT.

The mechanics (the study, its journal file, the pruners, NeuMF's objective) are
:mod:`course_lib.optuna_search`; this module sizes the lesson per profile, runs the searches, turns
their trials into the lesson's tables and figures, and compares the searches (``*_comparisons``). The
tabular benchmark is :mod:`.l12_replay`, the BERT search :mod:`.l12_bert`.

Budgets are counted in the objective's resource, the *evaluation point* (``eval_every``
epochs of training); the tables show them in epochs.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

from .. import compare
from ..config import pick
from ..optuna_search import STRATEGIES, neumf_objective, open_study, run_search, trial_budget
from ..sweeps import sweep_with_edge_extension
from ..tables import Table
from ..train.ncf import TrainConfig, steps_per_epoch


def lesson_spec(profile: str, *, seeds: int | None = None) -> dict:
    """The lesson's sizes. On the small synthetic set (the CPU tier) a NeuMF epoch at batch 4096 is
    ~0.6 s on a quiet 2-core machine: full = 4 epochs per trial, evaluated every half epoch, 4 full
    trials of budget per search, 1 seed of live searches (the comparison over many seeds is the replay
    on recorded curves, :func:`pool_spec`, whose pool also sets the live searches' target); smoke = a
    quarter epoch per trial."""
    max_epochs = pick(profile, full=4.0, smoke=0.25)
    eval_every = pick(profile, full=0.5, smoke=0.125)
    max_resource = round(max_epochs / eval_every)
    return {"profile": profile, "batch": 4096, "max_epochs": max_epochs, "eval_every": eval_every,
            "max_resource": max_resource, "reduction_factor": 2,
            "budget": max_resource * pick(profile, full=4, smoke=2),
            "seeds": list(range(seeds or pick(profile, full=1, smoke=1))), "strategies": list(STRATEGIES),
            **pool_spec(profile, max_epochs)}


def pool_spec(profile: str, max_epochs: float) -> dict:
    """The tabular benchmark's sizes: ``pool_size`` configurations trained once for ``max_epochs``,
    evaluated every ``pool_eval_every`` epochs (``pool_resource`` points); each strategy replayed on
    ``replay_seeds`` seeds with ``replay_budget`` points (``replay_full_trials`` full trials) to reach a
    target only the top ``top_fraction`` of the pool reaches; the winner's pick retrained on
    ``confirm_seeds`` fresh seeds. Full: 40 configurations x 4 epochs (on a 2-core CPU about 2 s a trial,
    as many epochs as 3 seeds of live searches), R = 16, eta = 2; 1000 replay seeds take a few seconds, and
    at 200 the interval of a strategy's ratio to random search was about twice as wide."""
    every = pick(profile, full=0.25, smoke=0.0625)
    resource = round(max_epochs / every)
    full_trials = pick(profile, full=30, smoke=6)
    return {"pool_size": pick(profile, full=40, smoke=6), "pool_eval_every": every, "pool_resource": resource,
            "replay_seeds": pick(profile, full=1000, smoke=20), "replay_full_trials": full_trials,
            "replay_budget": full_trials * resource, "top_fraction": pick(profile, full=0.05, smoke=0.2),
            "confirm_seeds": pick(profile, full=2, smoke=1)}


def base_config(spec: dict, target_hr: float) -> TrainConfig:
    """The large-batch setting every trial starts from (the search fills in lr, warmup, rule, wd, optimizer)."""
    return TrainConfig(global_batch_size=spec["batch"], base_batch_size=256, optimizer="adam",
                       max_epochs=spec["max_epochs"], eval_every_epochs=spec["eval_every"], target_hr=target_hr,
                       stop_at_target=False)


# --------------------------------------------------------------------------- the cost of a grid


def grid_cost_table(max_epochs: float, axes: int = 5, points=(2, 3, 4, 5)) -> Table:
    """Runs and epochs of a full grid over ``axes`` hyperparameters, ``k`` points per axis (deterministic)."""
    t = Table(["points per axis", "runs (k^axes)", "epochs (runs x epochs per run)"],
              title=f"A grid over {axes} hyperparameters, {max_epochs:g} epochs per run")
    for k in points:
        e = k ** axes * max_epochs  # a whole number of epochs as one
        t.add(**{"points per axis": k, "runs (k^axes)": k ** axes,
                 "epochs (runs x epochs per run)": round(e) if e == round(e) else e})
    return t


def edge_extension_runs(best_lr_factor: float, factors=(0.5, 1.0, 2.0), max_extensions: int = 2) -> list[float]:
    """The lr factors lesson 07's edge-extending grid (``sweep_with_edge_extension``) runs when the
    best lr lies at ``best_lr_factor`` (a stand-in score: the distance to it, in octaves)."""
    done = sweep_with_edge_extension(lambda f: f, factors, lambda f: abs(math.log2(f / best_lr_factor)),
                                     max_extensions=max_extensions)
    return sorted(done)


# --------------------------------------------------------------------------- running the searches


def trial_records(study) -> list[dict]:
    """The study's finished trials in the order they finished, as plain dicts (saved as JSON)."""
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    finished.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete or 0, t.number))
    return [{"number": t.number, "state": t.state.name, "budget": trial_budget(t), "value": t.value,
             "curve_hr": list(t.user_attrs.get("curve_hr", [])), "params": dict(t.params),
             "samples_per_s": t.user_attrs.get("samples_per_s")} for t in finished]


def run_one(data, spec: dict, target_hr: float, strategy: str, seed: int, directory, *, device=None) -> dict:
    """One search of ``strategy`` at seed ``seed`` in its own journal under ``directory``; its record."""
    path = Path(directory) / f"{strategy}-seed{seed}.log"
    # Optuna puts a trial in a Hyperband bracket by a hash of the study's name and the trial's number: in its own
    # journal tpe_hyperband takes hyperband's name, so both put their shared configurations in the same brackets.
    name = "hyperband" if strategy == "tpe_hyperband" else strategy
    study = open_study(f"{name}-seed{seed}", path, strategy=strategy, seed=seed,
                       max_resource=spec["max_resource"], reduction_factor=spec["reduction_factor"])
    start = time.perf_counter()
    run_search(study, neumf_objective(data, base_config(spec, target_hr), device=device), budget=spec["budget"])
    return {"strategy": strategy, "seed": seed, "seconds": time.perf_counter() - start, "journal": str(path),
            "trials": trial_records(study)}


def run_all(data, spec: dict, target_hr: float, directory, *, device=None) -> list[dict]:
    """Every strategy at every seed of ``spec``, one after the other (prints one line per search)."""
    records = []
    for seed in spec["seeds"]:
        for strategy in spec["strategies"]:
            r = run_one(data, spec, target_hr, strategy, seed, directory, device=device)
            print(f"{strategy:18s} seed {seed}: {len(r['trials'])} trials, {r['seconds']:.1f} s", flush=True)
            records.append(r)
    return records


def parallel_spec(data, spec: dict, target_hr: float, directory, strategy: str = "hyperband", seed: int = 0,
                  name: str = "parallel") -> dict:
    """What :func:`course_lib.optuna_search.search_worker` needs: every process opens the same study."""
    return {"name": f"{name}-{strategy}-seed{seed}", "path": str(Path(directory) / f"{name}-{strategy}-seed{seed}.log"),
            "strategy": strategy, "seed": seed, "max_resource": spec["max_resource"],
            "reduction_factor": spec["reduction_factor"], "budget": spec["budget"], "data": data,
            "base_cfg": base_config(spec, target_hr)}


def parallel_record(pspec: dict, outs: list[dict], wall_s: float) -> dict:
    """The record of a parallel search: the shared study's trials, what each process did, the wall time."""
    study = open_study(pspec["name"], pspec["path"], strategy=pspec["strategy"], seed=pspec["seed"],
                       max_resource=pspec["max_resource"], reduction_factor=pspec["reduction_factor"])
    return {"strategy": pspec["strategy"], "seed": pspec["seed"], "seconds": max(o["seconds"] for o in outs),
            "wall_s": wall_s, "processes": len(outs), "trials_per_process": [len(o["trials"]) for o in outs],
            "trials": trial_records(study)}


# --------------------------------------------------------------------------- reading the trials


def progress(record: dict, per_point: float, *, curve: str = "curve_hr",
             minimize: bool = False) -> list[tuple[float, float]]:
    """(epochs spent, best HR@10 seen so far) after each finished trial of a search. The BERT search:
    ``curve="curve_loss", minimize=True`` and ``per_point`` in steps (the best held-out loss)."""
    spent, best, out = 0.0, (math.inf if minimize else 0.0), []
    pick_best = min if minimize else max
    for t in record["trials"]:
        spent += t["budget"] * per_point
        values = [v for v in t[curve][1:] if v is not None and math.isfinite(v)]
        best = pick_best([best] + values)
        out.append((spent, best))
    return out


def epochs_to_target(record: dict, target: float, per_point: float, *, curve: str = "curve_hr",
                     minimize: bool = False) -> float | None:
    """Epochs the search had spent (all earlier trials, plus this one up to that point) when a trial
    first reached ``target`` (HR@10 at or above it; with ``minimize``, a loss at or below it); None
    when none did. The BERT search: ``curve="curve_loss", minimize=True`` and ``per_point`` in steps."""
    spent = 0.0
    for t in record["trials"]:
        for i, v in enumerate(t[curve][1:], start=1):
            if v is not None and math.isfinite(v) and (v <= target if minimize else v >= target):
                return (spent + i) * per_point
        spent += t["budget"]
    return None


def trials_at_target(record: dict, target: float, *, curve: str = "curve_hr") -> int:
    """How many of a search's trials reached HR@10 ``target`` at some evaluation point."""
    return sum(any(v is not None and math.isfinite(v) and v >= target for v in t[curve][1:])
               for t in record["trials"])


def _median(values: list) -> float:
    return statistics.median([math.inf if v is None else v for v in values]) if values else math.inf


def strategy_rows(records: list[dict], target_hr: float, per_point: float) -> list[dict]:
    """Per strategy: epochs to the target per seed and their median, trials, best HR@10, epochs spent."""
    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        mine = [r for r in records if r["strategy"] == strategy]
        reach = [epochs_to_target(r, target_hr, per_point) for r in mine]
        rows.append(
            {
                "strategy": strategy,
                "seeds": len(mine),
                "epochs to target (per seed)": reach,
                "median epochs to target": _median(reach),
                "trials (median)": statistics.median(len(r["trials"]) for r in mine),
                "trials at target (per seed)": [trials_at_target(r, target_hr) for r in mine],
                "pruned (median)": statistics.median(sum(t["state"] == "PRUNED" for t in r["trials"]) for r in mine),
                "best HR@10 (median)": statistics.median(
                    progress(r, per_point)[-1][1] if r["trials"] else 0.0 for r in mine
                ),
                "epochs spent (median)": statistics.median(
                    progress(r, per_point)[-1][0] if r["trials"] else 0.0 for r in mine
                ),
                "seconds (median)": round(statistics.median(r["seconds"] for r in mine), 1),
            }
        )
    return rows


def strategy_table(rows: list[dict], target_hr: float) -> Table:
    t = Table(["strategy", "seeds", "epochs to target (per seed)", "median epochs to target", "trials (median)",
               "trials at target (per seed)", "pruned (median)", "best HR@10 (median)", "epochs spent (median)",
               "seconds (median)"],
              title=f"Searches at equal budget: epochs spent until a trial reached HR@10 >= {target_hr:.4g}")
    for r in rows:
        t.add(**{**r, "epochs to target (per seed)": ", ".join("-" if v is None else f"{v:g}"
                                                               for v in r["epochs to target (per seed)"]),
                 "trials at target (per seed)": ", ".join(map(str, r["trials at target (per seed)"])),
                 "median epochs to target": "not reached" if math.isinf(r["median epochs to target"])
                 else r["median epochs to target"]})
    return t


def hyperband_brackets(max_resource: int, min_resource: int = 1, reduction_factor: int = 3) -> list[dict]:
    """The brackets Optuna's HyperbandPruner runs (same arithmetic as its source): per bracket, its
    share of the trials and the rungs (resources) where its trials are compared and the top
    ``1 / reduction_factor`` go on."""
    n = math.floor(math.log(max_resource / min_resource, reduction_factor)) + 1
    alloc = [math.ceil(n * reduction_factor ** (n - 1 - s) / (n - 1 - s + 1)) for s in range(n)]
    out = []
    for s in range(n):
        rungs, k = [], 0
        while min_resource * reduction_factor ** (s + k) < max_resource:
            rungs.append(min_resource * reduction_factor ** (s + k))
            k += 1
        out.append({"bracket": s, "share": alloc[s] / sum(alloc), "rungs": rungs,
                    "survivors": [reduction_factor ** -(i + 1) for i in range(len(rungs))]})
    return out


def brackets_table(brackets: list[dict], per_point: float) -> Table:
    t = Table(["bracket", "share of trials", "rungs (epochs)", "fraction past each rung"],
              title="The brackets of Hyperband (Li et al. 2018) as Optuna runs them")
    for b in brackets:
        # a fraction eta^-k reads exactly as 1/eta^k
        t.add(**{"bracket": b["bracket"], "share of trials": f"{b['share']:.0%}",
                 "rungs (epochs)": ", ".join(f"{r * per_point:g}" for r in b["rungs"]) or "none: runs to the end",
                 "fraction past each rung": ", ".join(f"1/{round(1 / f)}" for f in b["survivors"]) or "-"})
    return t


def parallel_table(sequential: dict, parallel: dict, target_hr: float, per_point: float) -> Table:
    """The sequential and the parallel search side by side: search seconds (inside the processes), wall
    seconds (process start-up included: what the learner waits), trials, epochs and the target."""
    t = Table(["processes", "search seconds", "wall seconds", "trials", "trials per process", "epochs spent",
               "best HR@10", "epochs to target"], title=f"The {parallel['strategy']} search on 1 and "
                                                        f"{parallel['processes']} processes (process r draws with "
                                                        "seed + r; one trial per process at a time; wall seconds "
                                                        "include process start-up)")
    for procs, r in ((1, sequential), (parallel["processes"], parallel)):
        spent, best = progress(r, per_point)[-1] if r["trials"] else (0.0, 0.0)
        reach = epochs_to_target(r, target_hr, per_point)
        t.add(**{"processes": procs, "search seconds": round(r["seconds"], 1),
                 "wall seconds": round(r.get("wall_s", r["seconds"]), 1), "trials": len(r["trials"]),
                 "trials per process": ", ".join(map(str, r.get("trials_per_process", [len(r["trials"])]))),
                 "epochs spent": spent, "best HR@10": best,
                 "epochs to target": "not reached" if reach is None else reach})
    return t


def _limit_cells(seconds: float, time_limit_s: float | None) -> dict:
    """The limit and prune columns the too-slow and pruning tables share ("none" / "no limit" with no limit)."""
    if time_limit_s is None:
        return {"limit (s)": "none", "pruned before training": "no limit"}
    return {"limit (s)": time_limit_s, "pruned before training": "yes" if seconds > time_limit_s else "no"}


def _trial_speeds(records: list[dict]) -> dict[str, list[float]]:
    """Per optimizer, the samples per second each trial of the searches trained at."""
    speeds: dict[str, list[float]] = {}
    for r in records:
        for t in r["trials"]:
            if t["samples_per_s"]:
                speeds.setdefault(t["params"].get("optimizer", "?"), []).append(t["samples_per_s"])
    return speeds


def too_slow_table(records: list[dict], samples_per_epoch: int, max_epochs: float, time_limit_s: float) -> Table:
    """Lesson 09's question before training: per optimizer, a full trial's predicted seconds from the
    measured throughput (samples/s of the trials) against a time limit; over it, prune unseen."""
    speeds = _trial_speeds(records)
    tab = Table(["optimizer", "samples/s (median of trials)", "predicted s per full trial", "limit (s)",
                 "pruned before training"], title="Pruning before training: predicted time of a full trial")
    for opt, v in sorted(speeds.items()):
        s = samples_per_epoch * max_epochs / statistics.median(v)
        tab.add(**{"optimizer": opt, "samples/s (median of trials)": statistics.median(v),
                   "predicted s per full trial": s, **_limit_cells(s, time_limit_s)})
    return tab


def model_trial_seconds(data, spec: dict, curves, *, optimizers=("adam", "lamb"), device=None) -> dict[str, float]:
    """Per optimizer, lesson 09's model's seconds for one full trial of the search (``spec["max_epochs"]``
    at its batch): the predicted step (:func:`course_lib.lessons.l09_performance_model.ncf_step_prediction`, priced with
    this device's ``curves``) times the trial's steps. Training only: evaluation is not on the clock."""
    from . import l09_performance_model as performance_study

    base = base_config(spec, 0.5)
    steps = math.ceil(spec["max_epochs"] * steps_per_epoch(data, base))
    return {opt: performance_study.ncf_step_prediction(data, base.replace(optimizer=opt), curves, device=device).step_s
            * steps for opt in optimizers}


def pruning_table(records: list[dict], predicted_s: dict[str, float], samples_per_epoch: int, max_epochs: float,
                  time_limit_s: float | None) -> Table:
    """Per optimizer: lesson 09's model's seconds for a full trial, the seconds the trials' own
    throughput gives, and whether the model prunes it (over ``time_limit_s``) before it trains. With no
    limit (``None``: the predictions too close to put one between them) the model is still set against
    the trials."""
    measured = {r["optimizer"]: r["predicted s per full trial"]
                for r in too_slow_table(records, samples_per_epoch, max_epochs, time_limit_s).rows}
    speeds = _trial_speeds(records)
    tab = Table(
        [
            "optimizer",
            "lesson 09's model (s per full trial)",
            "the trials' throughput (s)",
            "model / trials",
            "limit (s)",
            "pruned before training",
            "trials over the limit",
        ],
        title="Pruning before training: a full trial's time, predicted",
    )
    for opt, s in sorted(predicted_s.items()):
        m, v = measured.get(opt), speeds.get(opt, [])
        # every trial counted, not the median: the trials' own spread can straddle the limit
        over = ("no limit" if time_limit_s is None else "no trial" if not v else
                f"{sum(samples_per_epoch * max_epochs / x > time_limit_s for x in v)} of {len(v)}")
        tab.add(**{"optimizer": opt, "lesson 09's model (s per full trial)": s,
                   "the trials' throughput (s)": "no trial" if m is None else m,
                   "model / trials": "-" if m is None else round(s / m, 2), **_limit_cells(s, time_limit_s),
                   "trials over the limit": over})
    return tab


def demo_time_limit(predicted_s: dict[str, float]) -> float | None:
    """A per-trial limit that lesson 09's model can act on: halfway between the fastest and the slowest
    optimizer's predicted full trial (a limit above every prediction prunes nothing). None when the
    predictions are within 10% of each other."""
    lo, hi = min(predicted_s.values()), max(predicted_s.values())
    return None if hi <= 1.1 * lo else (lo + hi) / 2


def samples_per_epoch(data, spec: dict) -> int:
    """Samples in one epoch at the lesson's batch (positives and their negatives)."""
    cfg = base_config(spec, 0.5)
    return steps_per_epoch(data, cfg) * cfg.global_batch_size


def summary(records: list[dict], rows: list[dict], spec: dict, target_hr: float) -> dict:
    """What the lesson saves (``save_result``): the spec, the table rows and the per-seed progress."""
    per = spec["eval_every"]
    return {"spec": {k: v for k, v in spec.items()}, "target_hr": target_hr,
            "rows": [{**r, "median epochs to target": None if math.isinf(r["median epochs to target"])
                      else r["median epochs to target"]} for r in rows],
            "progress": {f"{r['strategy']}-seed{r['seed']}": progress(r, per) for r in records},
            "verdict": [c.to_dict() for c in live_comparisons(rows, spec)]}




def live_comparisons(rows: list[dict], spec: dict) -> list[compare.Comparison]:
    """Per pruning strategy, its epochs to the target relative to random search's in the live searches (the
    seeds' spread where there are several), widened by one evaluation's spacing, the least an epoch count
    is known to; a search that missed the target counts at its budget. Below 1: fewer epochs. Where both
    missed on every seed, each needed more than the budget and nothing bounds their ratio: unresolved."""
    per, budget = spec["eval_every"], spec["budget"] * spec["eval_every"]
    missed = {r["strategy"]: all(v is None for v in r["epochs to target (per seed)"]) for r in rows}
    by = {r["strategy"]: [budget if v is None else v for v in r["epochs to target (per seed)"]] for r in rows}
    if "random" not in by:
        return []
    res = per / min(by["random"] + [v for s, vs in by.items() for v in vs])
    basis = f"seed(s); evaluations {per:g} epochs apart; a miss counts at the budget"
    return [compare.Comparison(f"epochs to target, {s} / random (live)", 1.0, 0.0, math.inf, compare.TIME_EFFECT,
                               "x", f"{len(by['random'])}/{len(v)}", "both missed the target on every seed", 1.0, True)
            if missed["random"] and missed[s] else
            compare.ratio(f"epochs to target, {s} / random (live)", by["random"], v, needed=compare.TIME_EFFECT,
                          resolution=res, basis=f"{len(v)} {basis}")
            for s, v in by.items() if s != "random"]


def late_cuts_table(records: list[dict], per_point: float) -> Table:
    """Every trial a pruner cut whose configuration another search (they share the sampler's seed) trained to
    the end: where it was cut, the HR@10 it had there, where it ended, and the cutting search's own best. A
    cut configuration that ended above the cutting search's best was a late bloomer."""
    def best_of(t):
        return max((v for v in t["curve_hr"][1:] if v is not None and math.isfinite(v)), default=None)

    done = [(best_of(t), r, t) for r in records for t in r["trials"] if t["state"] == "COMPLETE"]
    done = [d for d in done if d[0] is not None]
    seeds = len({r["seed"] for r in records}) > 1
    t = Table(["cut by", "lr", "optimizer", "cut at epoch", "HR@10 there", "trained to the end by", "final HR@10",
               "cutting search's best", "late bloomer"],
              title="Cuts of a configuration another search trained to the end")
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
                     "trained to the end by": r2["strategy"], "final HR@10": end, "cutting search's best": own,
                     "late bloomer": "yes" if end > own else "no"})
    return t


def parallel_comparisons(sequential: dict, parallel: dict) -> list[compare.Comparison]:
    """What the extra processes bought: the wall time the learner waited, N processes over one (a search's
    length is known to about one trial: each process checks the budget between trials), and each trial's
    training speed in the parallel search over the one-process search's (they share the machine's cores)."""
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


def pruning_comparisons(records: list[dict], predicted_s: dict[str, float], samples_per_epoch: int,
                        max_epochs: float) -> list[compare.Comparison]:
    """Per optimizer, lesson 09's predicted seconds for a full trial over what the trials' own throughput gives
    (their geometric mean, with the trials' spread as its standard error). Above 1, a limit set from the model
    would prune trials that would have run under it; below 1, it would keep trials that run over it."""
    out = []
    for opt, s in sorted(predicted_s.items()):
        logs = [math.log(samples_per_epoch * max_epochs / x) for x in _trial_speeds(records).get(opt, [])]
        if len(logs) < 2:
            continue
        rel_se = statistics.stdev(logs) / math.sqrt(len(logs))
        out.append(compare.quantity_ratio(f"full trial seconds, lesson 09's model / the trials ({opt})",
                                          s / math.exp(statistics.fmean(logs)), rel_se, needed=compare.MODEL_EFFECT,
                                          df=len(logs) - 1, n=str(len(logs)), basis=f"{len(logs)} trials' throughput"))
    return out
