"""What lesson 12 measures: grid vs random search vs successive halving vs Hyperband at one budget,
on NeuMF and (lr and warmup only) on lesson 07's BERT.

The mechanics (the study, its journal file, the pruners, NeuMF's objective) are
:mod:`course_lib.optuna_search`; this module sizes the lesson per profile, runs the searches, turns
their trials into the lesson's tables and figures, and reads them (``verdict``).

Budgets are counted in the objective's resource, the *evaluation point* (``eval_every``
epochs of training); the tables show them in epochs.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

from ..config import pick
from ..optuna_search import STRATEGIES, TPE_STARTUP_TRIALS, neumf_objective, open_study, run_search, trial_budget
from ..sweeps import sweep_with_edge_extension
from ..tables import Table, cell_text
from ..train.ncf import TrainConfig, steps_per_epoch


def lesson_spec(profile: str, *, seeds: int | None = None) -> dict:
    """The lesson's sizes. On the small synthetic set (the CPU tier) a NeuMF epoch at batch 4096 is
    ~2 s on a loaded 2-core machine: full = 4 epochs per trial, evaluated every half epoch, 4 full
    trials of budget per search, 1 seed of live searches (the comparison over many seeds is the replay
    on recorded curves, :func:`pool_spec`); smoke = a quarter epoch per trial."""
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
    ``confirm_seeds`` fresh seeds. Full: 40 configurations x 4 epochs (the 2-core CPU, 2026-12-01:
    about 2 s a trial, as many epochs as the 3 seeds of live searches this replaces), R = 16, eta = 2;
    1000 replay seeds take a few seconds (on its pool of 2026-12-01, the tenth full run's too, every strategy
    drawing as random search does: Hyperband 0.85x random search, 90% interval 0.63-0.91; at 200 seeds the
    interval was 0.59-0.99)."""
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
        e = k ** axes * max_epochs  # r10f 12-S6: a whole number of epochs as one ("12500", not "1.25e+04")
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
    # #37 (tenth full run, read r10f 12-H3): Optuna puts a trial in a Hyperband bracket by a hash of the study's name
    # and the trial's number, so tpe_hyperband's study, named for itself, put the 4 configurations it shared with
    # hyperband in other brackets (3, 0, 1, 3 against 0, 1, 1, 0): hyperband cut 2 of them, tpe_hyperband none, with
    # no model involved. In its own journal it takes hyperband's name, and both cut the same trials the same way.
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
                "pruned (median)": statistics.median(sum(t["state"] == "PRUNED" for t in r["trials"]) for r in mine),
                "best HR@10 (median)": statistics.median(
                    progress(r, per_point)[-1][1] if r["trials"] else 0.0 for r in mine
                ),
                "epochs spent (median)": statistics.median(
                    progress(r, per_point)[-1][0] if r["trials"] else 0.0 for r in mine
                ),
                # r9e 12-H4: "9.079, 10.15" s, one seed of wall time each, where the cell above printed 9.1, 10.2
                "seconds (median)": round(statistics.median(r["seconds"] for r in mine), 1),
            }
        )
    return rows


def tpe_reading(rows: list[dict], startup: int = TPE_STARTUP_TRIALS) -> str:
    """Whether TPE's model drew any of ``tpe_hyperband``'s trials, from the strategy table's trial counts (read r8d
    12-S4, eighth full run: tpe_hyperband ran only its 4 random startup trials, and no line said its model had drawn
    nothing, while the markdown sets it against hyperband to show what a model adds). "" without that row."""
    r = next((r for r in rows if r["strategy"] == "tpe_hyperband"), None)
    if r is None:
        return ""
    n, seeds = r["trials (median)"], r["seeds"]
    over = f"median over {seeds} seeds" if seeds > 1 else "one seed"
    if n <= startup:
        where = "on at least half the seeds its model" if seeds > 1 else "its model"
        return (f"tpe_hyperband ran {n:g} trials ({over}), no more than TPE's {startup} random startup trials: "
                f"{where} drew no configuration, so here its row says nothing about what a model adds to "
                "Hyperband's cuts (a larger budget would).")
    out = (f"tpe_hyperband ran {n:g} trials ({over}): past TPE's {startup} random startup trials, its model drew "
           f"the other {n - startup:g}.")
    hb = next((h for h in rows if h["strategy"] == "hyperband"), None)
    if hb is None or "best HR@10 (median)" not in r or "best HR@10 (median)" not in hb:
        return out
    # read f12j 12-H3 (twelfth full run): the line counted TPE's draws beside its best HR@10 0.673 against hyperband's
    # 0.659, one seed, and nothing said the gap was no measured gain: one configuration's training seeds alone move
    # HR@10 by about 0.015 (the winner's retraining); ``tpe_gap_reading`` sets the gap against that spread
    a, b = r["best HR@10 (median)"], hb["best HR@10 (median)"]
    side = "above" if a > b else "below" if a < b else "level with"
    return out + (f" Its best HR@10 {a:.3g} is {side} hyperband's {b:.3g} ({over}, the same pruner): whether that is "
                  "what the model adds or training noise is read under the winner's retraining below (the replay has "
                  "no TPE row).")


def tpe_gap_reading(rows: list[dict], confirm: Table) -> str:
    """TPE's best HR@10 against Hyperband's, from the strategy rows, set against the spread of one configuration's
    best HR@10 over its training seeds, from the confirmation table (read f12j 12-H3, twelfth full run: nothing read
    tpe_hyperband's 0.673 against hyperband's 0.659 on one seed, while the winner retrained reached 0.659, 0.673 and
    0.674: a 0.015 spread from the training seed alone). "" without both rows, with TPE's model drawing nothing, or
    with fewer than two confirmation rows."""
    by = {r["strategy"]: r for r in rows}
    tpe, hb = by.get("tpe_hyperband"), by.get("hyperband")
    hrs = [r["best HR@10"] for r in confirm.rows if isinstance(r["best HR@10"], (int, float))]
    if tpe is None or hb is None or len(hrs) < 2 or tpe["trials (median)"] <= TPE_STARTUP_TRIALS:
        return ""
    a, b = tpe["best HR@10 (median)"], hb["best HR@10 (median)"]
    spread, gap = max(hrs) - min(hrs), abs(a - b)
    over = f"medians over {tpe['seeds']} seeds" if tpe["seeds"] > 1 else "one seed"
    head = (f"tpe_hyperband's best HR@10 {a:.3g} against hyperband's {b:.3g} ({over}): a gap of {gap:.3f}, where one "
            f"configuration's {len(hrs)} training seeds alone span {spread:.3f} ({min(hrs):.3g} to {max(hrs):.3g}, "
            "the table above)")
    if gap > spread:
        better = "tpe_hyperband" if a > b else "hyperband"
        return head + (f": beyond that spread, so {better}'s search found the better configuration here; one search "
                       "per seed still does not measure how often it would (the replay has no TPE row).")
    return head + (": within that spread, so it is not a measured gain of TPE's model; the replay, the lesson's "
                   "many-seed comparison, has no TPE row.")


def _cut_name(t: dict) -> str:
    """A configuration by its lr (and optimizer, where the search drew one): "lr 0.00196, adam"."""
    p = t["params"]
    lr = p.get("base_lr")
    opt = f" ({p['optimizer']})" if "optimizer" in p else ""
    return (f"lr {lr:.3g}" if lr is not None else "a configuration") + opt


def cut_best_reading(records: list[dict], per_point: float) -> str:
    """Whether a pruner cut a configuration that another search trained to the end above the cutting search's own
    best, from their trials (#37, read r10f 12-H2: successive halving cut at 1 epoch, at HR@10 0.313, the configuration
    Hyperband's search trained to 0.659, the best of all the searches, while the takeaway said the pruners stop "the
    bad ones"). The searches share the sampler's seed, so one configuration is often drawn by several of them; ""
    without a finished trial.

    Read f12j 12-H1 (twelfth full run): "The best configuration the searches trained to the end (HR@10 0.673, in
    tpe_hyperband's search) was drawn by no other search here.", while successive halving had cut at epoch 1 (HR@10
    0.313) lr 0.00196/adam, which hyperband trained to 0.659, above successive halving's own best 0.656: the line
    looked at the single best configuration only. It now checks every pruned trial whose configuration another search
    trained to the end, and names each that ended there above the cutting search's best, with both HR@10s; the
    single-best sentence stays only when no such cut exists."""
    def best_of(t):
        return max((v for v in t["curve_hr"][1:] if v is not None and math.isfinite(v)), default=None)

    done = [(best_of(t), r, t) for r in records for t in r["trials"] if t["state"] == "COMPLETE"]
    done = [d for d in done if d[0] is not None]
    if not done:
        return ""
    hr, home, best = max(done, key=lambda d: d[0])
    seeds = len({r["seed"] for r in records}) > 1

    def who(r):
        return r["strategy"] + (f" (seed {r['seed']})" if seeds else "")

    late, harmless = [], 0
    for r in records:
        own = max((b for b in map(best_of, r["trials"]) if b is not None), default=0.0)  # as the table's best HR@10
        for t in r["trials"]:
            if t["state"] != "PRUNED":
                continue
            ends = [(b, r2) for b, r2, t2 in done if r2 is not r and t2["params"] == t["params"]]
            if not ends:
                continue
            end, r2 = max(ends, key=lambda e: e[0])
            if end > own:
                late.append((r, t, own, end, r2))
            else:
                harmless += 1
    rest = ("" if not harmless else f" {'The other' if late else 'All'} {harmless} cut(s) of a configuration another "
            "search trained to the end ended there at or below the cutting search's own best.")
    if late:
        said = []
        for r, t, own, end, r2 in late:
            top = " (the best configuration the searches trained to the end)" if t["params"] == best["params"] else ""
            said.append(f"{who(r)} cut {_cut_name(t)} at epoch {t['budget'] * per_point:g}, at HR@10 "
                        f"{t['curve_hr'][round(t['budget'])]:.3g} there, and {who(r2)} trained it to {end:.3g}{top}, "
                        f"above {r['strategy']}'s own best {own:.3g}")
        many = len(late) > 1
        return ("A pruner cut a configuration that another search trained to the end above the cutting search's own "
                "best: " + "; ".join(said) + (". They were late bloomers" if many else ". It was a late bloomer")
                + ": a rung compares runs where they stand at that point, and "
                + ("these looked bad there." if many else "this one looked bad there.") + rest)
    seed = f" (seed {home['seed']})" if seeds else ""
    out = (f"The best configuration the searches trained to the end (HR@10 {hr:.3g}, in {home['strategy']}'s "
           f"search{seed})")
    drew = sum(any(t["params"] == best["params"] for t in r["trials"]) for r in records)
    cut = any(t["state"] == "PRUNED" and t["params"] == best["params"] for r in records for t in r["trials"])
    out += (" was drawn by no other search here." if drew < 2 else
            f" was drawn by {drew} searches, and a pruner cut it, in a search whose own best is no lower." if cut else
            f" was drawn by {drew} searches, and no pruner cut it.")
    return out + rest


def strategy_table(rows: list[dict], target_hr: float) -> Table:
    t = Table(["strategy", "seeds", "epochs to target (per seed)", "median epochs to target", "trials (median)",
               "pruned (median)", "best HR@10 (median)", "epochs spent (median)", "seconds (median)"],
              title=f"Searches at equal budget: epochs spent until a trial reached HR@10 >= {target_hr:g}")
    for r in rows:
        t.add(**{**r, "epochs to target (per seed)": ", ".join("-" if v is None else f"{v:g}"
                                                               for v in r["epochs to target (per seed)"]),
                 "median epochs to target": "not reached" if math.isinf(r["median epochs to target"])
                 else r["median epochs to target"]})
    return t


def verdict(rows: list[dict], target_hr: float, *, goal_ratio: float = 0.5) -> str:
    """The reading of the strategy table: did a pruning strategy reach the target with at most
    ``goal_ratio`` of the epochs random search needed (medians over the seeds)?"""
    by = {r["strategy"]: r for r in rows}
    if "random" not in by or len(by) < 2:
        return "nothing to compare: the table needs random search and at least one pruning strategy"
    rand = by["random"]["median epochs to target"]
    pruned = {s: r["median epochs to target"] for s, r in by.items() if s != "random"}
    best = min(pruned, key=pruned.get)
    seeds = by[best]["seeds"]
    if math.isinf(rand) and math.isinf(pruned[best]):
        return (f"no strategy reached HR@10 {target_hr:g} within the budget (median over {seeds} seeds): "
                "the comparison needs a larger budget or a lower target")
    if math.isinf(pruned[best]):
        return (f"random search reached HR@10 {target_hr:g} in {rand:g} epochs (median) and no pruning strategy "
                "did within the budget: here cutting runs early cut the good ones too")
    if math.isinf(rand):
        return (f"{best} reached HR@10 {target_hr:g} in {pruned[best]:g} epochs (median over {seeds} seeds); random "
                "search did not within the same budget: the pruner bought more configurations for the same epochs")
    ratio = pruned[best] / rand
    met = "meets" if ratio <= goal_ratio else "misses"
    return (f"{best} reached HR@10 {target_hr:g} in {pruned[best]:g} epochs, random search in {rand:g} (medians over "
            f"{seeds} seeds): {ratio:.2f}x the epochs, which {met} the goal of at most {goal_ratio:g}x")


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
        # r10f 12-S1: 1/8 printed "0.12"; a fraction of eta^-k reads exactly as 1/eta^k
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


def parallel_reading(table: Table, tolerance: float = 0.1) -> str:
    """What the extra processes bought, from the parallel table's two rows: the wall time the learner
    waited (start-up included; closer than ``tolerance`` is "no faster") and the epochs to the target."""
    one, many = table.rows[0], table.rows[1]
    ratio = one["wall seconds"] / many["wall seconds"] if many["wall seconds"] else math.nan
    how = "faster" if ratio > 1 + tolerance else "no faster" if ratio >= 1 - tolerance else "slower"
    out = (f"{many['processes']} processes: {many['wall seconds']:g} s wall against {one['wall seconds']:g} s for one "
           f"({ratio:.2f}x, {how}; inside the processes {many['search seconds']:g} s against "
           f"{one['search seconds']:g} s).")
    if how != "faster":
        out += _why_not_faster(one, many, tolerance)
    reach = (one["epochs to target"], many["epochs to target"])
    if "not reached" not in reach and reach[0] != reach[1]:
        # r8d 12-S2: "so the pruner kept other ones" named a cause nothing measured; the count is of the epochs of the
        # trials finished before the one that reached the target, in the order they finished
        # r9e 12-C1: "the trials finished in another order" alone hid that the processes drew other configurations
        # (optuna_search.search_worker seeds process r with seed + r): half the parallel trials were never drawn by one
        out += (f" Epochs to the target: {reach[1]:g} against {reach[0]:g}: the other processes drew configurations of "
                "their own (process r with seed + r), the trials finished in another order, and the count adds up "
                "the epochs of those finished before the one that reached it.")
    return out


def _why_not_faster(one: dict, many: dict, tolerance: float) -> str:
    """Why the parallel search was no faster in wall time, from the parallel table's two rows (#37, eighth full run,
    read r8d 12-1: "They share this machine's cores, so each trial ran slower" under 12.7 s wall against 11 s, where
    inside the processes the search took 9.5 s against 11 s and trained 20.5 epochs against 16.5: it was the start-up
    in the wall seconds, not slower trials, that made the difference). Each process's pace is its epochs per second."""
    inside = one["search seconds"] / many["search seconds"] if many["search seconds"] else math.nan
    if inside > 1 + tolerance:
        # read f12j 12-S1 (twelfth full run): "what made the wall time no shorter" under 10.1 s wall against 8.7 s, a
        # wall time 1.4 s longer that the same line calls "slower": longer past the tolerance, no shorter within it
        wall = one["wall seconds"] / many["wall seconds"] if many["wall seconds"] else math.nan
        what = "longer" if wall < 1 - tolerance else "no shorter"
        return (f" Inside the processes it was faster, and trained {many['epochs spent']:g} epochs against "
                f"{one['epochs spent']:g}: what made the wall time {what} is the processes' start-up, the gap "
                "between its wall and search seconds.")
    pace_one = one["epochs spent"] / one["search seconds"] if one["search seconds"] else math.nan
    pace_each = (many["epochs spent"] / many["processes"] / many["search seconds"] if many["search seconds"]
                 else math.nan)
    if pace_each < (1 - tolerance) * pace_one:
        return (" Each process trained fewer epochs per second than the one process did: they share this machine's "
                "cores, so each trial ran slower.")
    return " Each process trained about as fast as the one process did."


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
    the trials (#37, read r9e 12-H2: the lesson printed the predictions alone, and the check it promised
    was missing)."""
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
        # #37 (tenth full run, read r10f 12-H1): "lamb: pruned (model 3.84 s, trials 3.15 s, limit 3.05 s): the
        # trials agree" read the median trial alone, 3.5% over the limit, while 9 of its 19 trials ran under it
        over = ("no limit" if time_limit_s is None else "no trial" if not v else
                f"{sum(samples_per_epoch * max_epochs / x > time_limit_s for x in v)} of {len(v)}")
        tab.add(**{"optimizer": opt, "lesson 09's model (s per full trial)": s,
                   "the trials' throughput (s)": "no trial" if m is None else m,
                   "model / trials": "-" if m is None else round(s / m, 2), **_limit_cells(s, time_limit_s),
                   "trials over the limit": over})
    return tab


def demo_time_limit(predicted_s: dict[str, float]) -> float | None:
    """A per-trial limit that lesson 09's model can act on: halfway between the fastest and the slowest
    optimizer's predicted full trial (the review of 2026-12-01 found 1.1x the fastest above every
    prediction: nothing could be pruned). None when the predictions are within 10% of each other."""
    lo, hi = min(predicted_s.values()), max(predicted_s.values())
    return None if hi <= 1.1 * lo else (lo + hi) / 2


def _model_verdict(rows: list[dict], within: float = 0.1) -> str:
    """What the pruning table's "model / trials" ratios say of the model's price (read f12j 12-H2, twelfth full run:
    "The model against what the trials measured: adam: ... (model / trials 0.73); lamb: ... (model / trials 0.72)."
    ended the check the markdown promises with the ratios and no verdict, while the model was 27-28 % low on both).
    Within ``within`` of 1 it prices trials as they ran; below, a trial runs longer than its price, so a limit set from
    it would keep trials that run over it; above, a limit would prune trials that would have run under it."""
    ratios = [(r["optimizer"], r["model / trials"]) for r in rows if isinstance(r["model / trials"], (int, float))]
    if not ratios:
        return ""

    def pct(v):
        return f"{abs(1 - v) * 100:.0f} %"

    low = [(o, v) for o, v in ratios if v < 1 - within]
    high = [(o, v) for o, v in ratios if v > 1 + within]
    good = [o for o, v in ratios if 1 - within <= v <= 1 + within]
    out = []
    if low:
        times = sorted(1 / v for _, v in low)
        span = f"{times[0]:.2f}x" if f"{times[0]:.2f}" == f"{times[-1]:.2f}" else f"{times[0]:.2f}x-{times[-1]:.2f}x"
        out.append("the model is " + " and ".join(f"{pct(v)} low on {o}" for o, v in low) + f" (a trial runs {span} "
                   "its price): a limit set from it would keep trials that run over it")
    if high:
        out.append("the model is " + " and ".join(f"{pct(v)} high on {o}" for o, v in high) + ": a limit set from it "
                   "would prune trials that would have run under it")
    if good:
        out.append(f"within {within:.0%} on {' and '.join(good)}: it prices those trials as they ran")
    text = "; ".join(out)
    return " Verdict: " + text[0].lower() + text[1:] + "."


def pruning_reading(table: Table, agree: float = 0.75) -> str:
    """Whether the model's prunes agree with what the trials' own throughput says, from the pruning
    table's rows: an optimizer pruned (or kept) rightly when at least ``agree`` of its trials' full-trial
    seconds lie on the side of the limit the model put it, wrongly when at most ``1 - agree`` do; in
    between the trials' spread straddles the limit and they do not decide."""
    model_key, trials_key = "lesson 09's model (s per full trial)", "the trials' throughput (s)"
    if table.rows and all(r["limit (s)"] == "none" for r in table.rows):
        checks = [f"{r['optimizer']}: model {r[model_key]:.3g} s, trials {r[trials_key]:.3g} s (model / trials "
                  f"{r['model / trials']:g})" for r in table.rows if r[trials_key] != "no trial"]
        return ("No limit to prune on: the model puts the optimizers' full trials within 10% of each other ("
                + ", ".join(f"{r['optimizer']} {r[model_key]:.3g} s" for r in table.rows) + "), so no limit between "
                "them prunes one and keeps the other. The model against what the trials measured: "
                + ("; ".join(checks) if checks else "no trial measured either") + "." + _model_verdict(table.rows))
    out = []
    for r in table.rows:
        measured = r["the trials' throughput (s)"]
        pruned = r["pruned before training"] == "yes"
        if measured == "no trial":
            out.append(f"{r['optimizer']}: {'pruned' if pruned else 'kept'}; no trial measured it")
            continue
        over, n = (int(x) for x in r["trials over the limit"].split(" of "))
        side = (over if pruned else n - over) / n  # the share of its trials on the side the model put it
        model = r["lesson 09's model (s per full trial)"]
        said = (f"{r['optimizer']}: {'pruned' if pruned else 'kept'} (model {model:.3g} s, trials {measured:.3g} s, "
                f"limit {r['limit (s)']:.3g} s): ")
        if side >= agree:
            said += f"the trials agree ({over} of {n} over the limit)"
        elif side <= 1 - agree:
            said += f"the trials disagree: the model put it on the wrong side ({over} of {n} over the limit)"
        else:
            said += (f"the trials do not decide: {over} of its {n} trials ran over the limit, the rest under it, so "
                     "the limit lies within the trials' own spread")
        out.append(said)
    return "; ".join(out) + "."


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
            "verdict": verdict(rows, target_hr)}


# --------------------------------------------------------------------------- lesson 07's BERT


def bert_spec(profile: str, plan, saved07: dict | None = None, *, seeds: int | None = None) -> dict:
    """The BERT search's sizes: LAMB at ``batch`` sequences for at most ``max_steps`` steps, evaluated
    every ``eval_every`` (the resource), ``budget`` evaluations per search (3 full trials' worth), random
    search against Hyperband. Lesson 07's model and target loss when it ran in this profile.

    Small on purpose: BERT-mini trains slowly on a CPU (full profile, 2 cores, 2026-12-01: the four
    searches took 292 s at batch 64, the lesson 366 s of its 8-minute goal), so the full profile
    searches at lesson 07's small batch, 32. One seed in full (two took 249 s, 64% of the lesson, and
    compared the same best trial on both: review 2026-12-01 #26); the verdict says what one seed can decide."""
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


def bert_verdict(rows: list[dict], bspec: dict, tie: float = 0.005) -> str:
    """Hyperband against random search on BERT, from the table's rows: the best loss each found with the
    same steps (medians over the seeds, as the table rounds them). Decided only when the arms' best trials
    differ (another lr), the difference exceeds ``tie`` and, with several seeds, the seeds' spread (the
    range of each arm's best losses); with lesson 07's target, the steps each needed to reach it."""
    by = {s: [r for r in rows if r["strategy"] == s] for s in ("random", "hyperband")}
    if not by["random"] or not by["hyperband"]:
        return "nothing to compare: the BERT search needs both random search and Hyperband"
    best = {s: round(statistics.median(r["best held-out loss"] for r in rs), 3) for s, rs in by.items()}
    spread = max(max(r["best held-out loss"] for r in rs) - min(r["best held-out loss"] for r in rs)
                 for rs in by.values())
    seeds = len(by["hyperband"])
    same = all(h["best trial's lr"] == r["best trial's lr"] for h, r in zip(by["hyperband"], by["random"]))
    gap = abs(best["hyperband"] - best["random"])
    out = (f"With {bspec['budget'] * bspec['eval_every']} steps per search, best held-out loss: Hyperband "
           f"{best['hyperband']:.3f}, random search {best['random']:.3f} (median over {seeds} seed(s)). ")
    if same:
        out += ("Not decided: on every seed both arms' best was the same trial (the same lr; they share the "
                "sampler's seed, and the first trials run unpruned), so this budget cannot tell them apart.")
    elif gap < max(tie, spread):
        out += (f"Not decided: the difference {gap:.3f} is within "
                + (f"the seeds' spread {spread:.3f}." if spread >= tie else f"{tie:g}, the resolution used here."))
    elif best["hyperband"] < best["random"]:
        out += f"Hyperband better by {gap:.3f}: stopping the bad runs early bought better settings."
    else:
        out += f"Random search better by {gap:.3f}: cutting runs early cut a slow starter that would have ended best."
    if bspec["target_loss"] is not None:
        steps = {s: _median([r["steps to target"] for r in rs]) for s, rs in by.items()}
        said = {s: "not reached" if math.isinf(v) else f"{v:g} steps" for s, v in steps.items()}
        out += (f" To lesson 07's target loss {bspec['target_loss']:.3f}: Hyperband {said['hyperband']}, random "
                f"search {said['random']}.")
        if all(math.isinf(v) for v in steps.values()) and bspec.get("target_steps"):
            out += (f" A trial trains at most {bspec['max_steps']} steps at batch {bspec['batch']}; lesson 07's Adam "
                    f"baseline needed {bspec['target_steps']} at batch {bspec['target_batch']} to reach it")
            # #37 (second full run, read r3b): the 48 steps were set against Adam's 36 alone; the trials train LAMB,
            # whose run in lesson 07 needed 56 at the same batch
            if bspec.get("optimizer") == "lamb" and "lamb_steps" in bspec:
                out += (f", its LAMB run (the optimizer searched here) {bspec['lamb_steps']}" if bspec["lamb_steps"]
                        else ", and its LAMB run did not reach it")
                # #37 (eighth full run, read r8d 12-4): "at most 48 steps at batch 32 ... its LAMB run ... 52" left the
                # learner to see that no trial was as long as the run it is measured against
                if (bspec["lamb_steps"] and bspec.get("target_batch") == bspec["batch"]
                        and bspec["max_steps"] < bspec["lamb_steps"]):
                    out += (f": at lesson 07's pace a trial is {bspec['lamb_steps'] - bspec['max_steps']} steps too "
                            "short to reach the target")
                    out += _lamb_at_trial_end(bspec, min(best.values()), tie)
            out += "."
    return out


def _lamb_at_trial_end(bspec: dict, found: float, tie: float) -> str:
    """Where lesson 07's LAMB run stood at a trial's last step, against the best loss the searches found: whether the
    trials' length alone kept them from the target (#37, read r9e 12-H1: "4 steps too short to reach the target,
    whatever lr or warmup a search picks" over a best of 5.627, where lesson 07's LAMB run was at 4.620 by step 48:
    the trials trained slower than lesson 07's run, not only for fewer steps)."""
    seen = [(s, v) for s, v in bspec.get("lamb_curve") or [] if s <= bspec["max_steps"]]
    if not seen:
        return ""
    step, loss = seen[-1]
    lr = f" (peak lr {bspec['lamb_lr']:.3g})" if bspec.get("lamb_lr") else ""
    said = (f"; by step {step:g} that run{lr} was at {loss:.3f}, and the best trial here at {found:.3f}")
    if found > loss + tie:
        return said + (": the settings drawn here also trained slower than lesson 07's at the same steps, so the "
                       "trials' length is not all that kept them from the target")
    return said + ": level with it, so the trials' length is what kept them from the target"


# --------------------------------------------------------------------------- the tabular benchmark


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


def record_pool(data, spec: dict, target_hr: float, *, device=None, seed: int = 0) -> dict:
    """Train every pool configuration once for the full ``max_epochs``: its HR@10 at each of the
    ``pool_resource`` evaluation points (a run that diverged keeps its last value: it cannot improve)."""
    from ..train.ncf import train_to_target

    params, curves, start = pool_params(spec, seed), [], time.perf_counter()
    for p in params:
        r = train_to_target(data, pool_config(data, spec, p, target_hr), device=device, progress="none")
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
    """Per strategy: the epochs spent until a configuration reached the target (median and quartiles over
    the replay's seeds), how often it was reached, and the ratio of medians to random search with its
    bootstrap 90% interval. The verdict reads these rows (:func:`replay_verdict`)."""
    from ..optuna_search import median_ratio_interval

    per, rows = spec["pool_eval_every"], []
    t = Table(["strategy", "seeds", "reached", "median epochs to target", "quartiles (epochs)",
               "vs random (median ratio)", "90% interval"],
              title=(f"Replayed on {rep['pool_size']} recorded curves: epochs until HR@10 >= {rep['target']:.4g} "
                     f"(reached by {rep['reached_by']} of {rep['pool_size']} configurations), budget "
                     f"{spec['replay_budget'] * per:g} epochs per search"))
    rand = _to_target(rep["runs"]["random"])
    for st, runs in rep["runs"].items():
        v = sorted(_to_target(runs))
        q = [v[int(f * (len(v) - 1))] for f in (0.25, 0.5, 0.75)]
        ratio, lo, hi = median_ratio_interval(v, rand)
        fmt = lambda x: "not reached" if math.isinf(x) else round(x * per, 2)
        rows.append({"strategy": st, "seeds": len(v), "reached": f"{sum(not math.isinf(x) for x in v)}/{len(v)}",
                     "median epochs to target": fmt(q[1]),
                     "quartiles (epochs)": f"{cell_text(fmt(q[0]))} to {cell_text(fmt(q[2]))}",  # r10f: not "28.0"
                     "vs random (median ratio)": "-" if st == "random" else
                     (round(ratio, 2) if math.isfinite(ratio) else "inf"),
                     "90% interval": "-" if st == "random" else f"{lo:.2f}-{hi:.2f}"})
    for r in rows:
        t.add(**r)
    return t


def replay_verdict(table: Table) -> str:
    """The lesson's one verdict on "does cutting runs early beat random search?", from the replay
    table's rows: the best pruning strategy's ratio of medians to random search decides when its 90%
    interval over the replay's seeds lies wholly below 1 (it needs fewer epochs) or above 1 (more)."""
    rows = {r["strategy"]: r for r in table.rows}
    if "random" not in rows or len(rows) < 2:
        return "nothing to compare: the replay needs random search and at least one pruning strategy"

    def key(r):
        v = r["vs random (median ratio)"]
        return math.inf if v in ("inf", "-") else v

    best = min((r for s, r in rows.items() if s != "random"), key=key)
    lo, hi = (float(x) for x in best["90% interval"].split("-"))
    # as the table prints its cells (r8d 12-3: "random search in 56.0" under a cell of 56)
    head = (f"{best['strategy']} reached the target in {cell_text(best['median epochs to target'])} epochs (median), "
            f"random search in {cell_text(rows['random']['median epochs to target'])}: ratio "
            f"{cell_text(best['vs random (median ratio)'])}, "
            f"90% interval {best['90% interval']} over {best['seeds']} replay seeds.")
    # #37 (full run of 2026-12-01): "Decided: cutting runs early found ..." from Hyperband's row alone, beside a
    # successive-halving row at 1.07 (0.80-1.15): the verdict names the strategy, and says how the others fared
    def decided(r):
        a, b = (float(x) for x in r["90% interval"].split("-"))
        return "fewer epochs too" if b < 1 else "more epochs" if a > 1 else "not decided"

    others = "".join(f" {r['strategy']}: ratio {r['vs random (median ratio)']} ({r['90% interval']}), {decided(r)}."
                     for s, r in rows.items() if s not in ("random", best["strategy"]))
    name = best["strategy"]
    if hi < 1:
        return head + f" Decided: {name}'s early cuts found a top configuration with fewer epochs." + others
    if lo > 1:
        return head + f" Decided: {name}'s early cuts needed more epochs (they cut the eventual winners)." + others
    return head + " Not decided: the interval contains 1, the difference is within the seeds' spread." + others


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
    counts them, evaluation points x ``per`` (#37, read r9e 12-H3: the retrainings printed 3.549 and 3.803, the
    engine's epochs at evaluations 0.2535 apart, beside the replay's nominal 0.25-epoch points, and the pool's own
    run printed "-")."""
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


def confirm_reading(table: Table, target: float, reached_by: int | None = None) -> str:
    """Whether the retrained winner reached the target again (from the confirmation table's rows). ``reached_by``:
    how many pool configurations reach the target (the replay table's title); with more than one, the winner is the
    only one retrained, and the reading says so (read f12j 12-H4, twelfth full run: "Confirmed: retrained on 2 fresh
    seed(s), the winner reached 0.656 every time (the replay's target is not one run's luck)." where 2 of 40
    configurations reach it, the target is the second one's best in its one pool run, and only the winner was
    retrained)."""
    fresh = [r for r in table.rows if r["training seed"] != "0 (the pool)"]
    hit = [r for r in fresh if r["epochs to target"] != "not reached"]
    if not fresh:
        return "no confirmation run"
    if len(hit) == len(fresh):
        if reached_by is not None and reached_by > 1:
            others = reached_by - 1
            rest = ("the other was not, and it reaches the target only by its one pool run's best, which is the "
                    "target itself" if others == 1 else f"the other {others} were not, and the lowest of them reaches "
                    "it only by its one pool run's best, which is the target itself")
            return (f"Confirmed for the winner: retrained on {len(fresh)} fresh seed(s), it reached {target:.4g} every "
                    f"time. It is one of the {reached_by} pool configurations that reach the target, and the only one "
                    f"retrained: {rest}, so a replayed search that found only that one counts one run at the "
                    "threshold.")
        return (f"Confirmed: retrained on {len(fresh)} fresh seed(s), the winner reached {target:.4g} every time "
                "(the replay's target is not one run's luck).")
    return (f"Not confirmed: retrained on {len(fresh)} fresh seed(s), the winner reached {target:.4g} on {len(hit)}: "
            "part of the pool's top is training noise, so the replay ranks the strategies on this pool only.")
