"""The Optuna search of lesson 12: random search, successive halving and Hyperband at a budget,
in a journal file several processes share; the NeuMF and BERT objectives and the search worker.

- ``successive_halving``: the bracket rule on recorded curves (the exercise's reference);
- ``open_study`` / ``run_search`` / ``neumf_objective`` / ``mlm_objective`` / ``search_worker``: a study
  in a journal file, its trials run by one or several processes (a cell, ``launch`` or SLURM array tasks).
"""

from __future__ import annotations
import math
import os
import socket
import time
from typing import Callable
from .data.movielens import ImplicitData
from .fileio import pid_alive
from .train.engine import RunHooks
from .train.ncf import TrainConfig, train_to_target


def successive_halving(curves, min_resource: int = 1, reduction_factor: int = 3) -> tuple[int, int]:
    """Synchronous successive halving on recorded learning curves (lesson 12, exercise 12):
    ``curves[i][r - 1]`` is configuration ``i``'s metric (higher is better) after ``r`` units of
    resource, every curve ``R`` long. At each rung ``min_resource * reduction_factor**k < R`` the
    surviving configurations are compared at that resource and the best
    ``max(1, n_alive // reduction_factor)`` go on (ties: the lower index); the last survivors train
    to ``R``. Returns (the index of the best survivor at ``R``, the resource spent by all configurations)."""
    R = len(curves[0])
    alive, spent, rung = list(range(len(curves))), 0, min_resource
    while rung < R and len(alive) > 1:
        keep = max(1, len(alive) // reduction_factor)
        ranked = sorted(alive, key=lambda i: (-curves[i][rung - 1], i))
        spent += rung * (len(alive) - keep)  # the ones cut here trained to this rung
        alive = sorted(ranked[:keep])
        rung *= reduction_factor
    spent += R * len(alive)
    return min(alive, key=lambda i: (-curves[i][R - 1], i)), spent


STRATEGIES = ("random", "successive_halving", "hyperband", "tpe_hyperband")


# TPE's first trials are random (it needs scored trials to model): Optuna's default is 10, more than
# a lesson-sized Hyperband search runs before its budget is half spent.
TPE_STARTUP_TRIALS = 4


class Diverged(RuntimeError):
    """A trial whose weights went inf/nan: recorded as FAIL (``catch``), the study goes on."""


def journal_storage(path):
    """The study's storage: Optuna's journal file at ``path`` (shared by every process that opens it)."""
    import optuna

    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def make_sampler(strategy: str, *, seed: int):
    """The sampler of a strategy: random for the first three (so they draw the same configurations),
    TPE for "tpe_hyperband" (Bergstra et al. 2011: it models which values scored well, pruned trials'
    last reports included, and draws where that model is best; its first trials are random)."""
    import optuna

    if strategy == "tpe_hyperband":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=TPE_STARTUP_TRIALS)
    if strategy in STRATEGIES:
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"strategy={strategy!r}; choose one of {STRATEGIES}")


def make_pruner(strategy: str, *, max_resource: int, min_resource: int = 1, reduction_factor: int = 3):
    """The pruner of a strategy: "random" none (every trial runs ``max_resource``), "successive_halving"
    (Optuna's asynchronous SHA) or "hyperband" and "tpe_hyperband" (several SHA brackets, Li et al. 2018)."""
    import optuna

    if strategy == "random":
        return optuna.pruners.NopPruner()
    if strategy == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=reduction_factor)
    if strategy in ("hyperband", "tpe_hyperband"):
        return optuna.pruners.HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                                              reduction_factor=reduction_factor)
    raise ValueError(f"strategy={strategy!r}; choose one of {STRATEGIES}")


def open_study(name: str, path, *, strategy: str, seed: int, max_resource: int, min_resource: int = 1,
               reduction_factor: int = 3, direction: str = "maximize", sampler=None):
    """Create the study ``name`` in the journal at ``path``, or load it when it exists (a resumed or
    shared search): the strategy's sampler seeded by ``seed`` (or ``sampler``, e.g. a grid) and its pruner."""
    import optuna

    from .journal import prepare_journal

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prepare_journal(path)  # 0600, the learner's folder, a cut-off last line repaired
    return optuna.create_study(
        study_name=name, storage=journal_storage(path), direction=direction, load_if_exists=True,
        sampler=sampler or make_sampler(strategy, seed=seed),
        pruner=make_pruner(strategy, max_resource=max_resource, min_resource=min_resource,
                           reduction_factor=reduction_factor))


def trial_budget(t) -> float:
    """The resource a finished trial spent: what it recorded as ``budget``, else its last reported step."""
    if "budget" in t.user_attrs:
        return float(t.user_attrs["budget"])
    return float(max(t.intermediate_values, default=0))


def budget_spent(study) -> float:
    """The resource spent by the study's finished trials (complete, pruned or failed), all processes together."""
    from optuna.trial import TrialState

    return sum(trial_budget(t) for t in study.get_trials(deepcopy=False)
               if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))


def fail_orphaned_trials(study) -> list[int]:
    """FAIL the RUNNING trials whose process (on this host) is gone; returns their numbers.

    A journal storage has no heartbeat (see the note above), so a trial whose process was
    killed would stay RUNNING and be counted nowhere. Trials of other hosts are left alone."""
    from optuna.trial import TrialState

    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        host, pid = t.user_attrs.get("host"), t.user_attrs.get("pid")
        if host == socket.gethostname() and pid is not None and not pid_alive(int(pid)):
            study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
            failed.append(t.number)
    return failed


def run_search(study, objective: Callable, *, budget: float, max_trials: int | None = 1000,
               catch: tuple = (Diverged,)) -> dict:
    """Run trials of ``objective(trial)`` on ``study`` until ``budget`` (in the objective's resource)
    is spent by all the processes sharing the study, or ``max_trials`` were started here.

    Orphaned trials of killed processes are failed first (a resumed search); finished trials are
    never repeated: the budget counts them. Each trial records this process's host and pid. A trial
    raising one of ``catch`` is recorded FAIL and the search goes on. Returns what this process did."""
    orphans = fail_orphaned_trials(study)
    start, mine = time.perf_counter(), []

    def tagged(trial):
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", os.getpid())
        mine.append(trial.number)
        return objective(trial)

    def stop_when_spent(study, _trial):
        if budget_spent(study) >= budget or (max_trials is not None and len(mine) >= max_trials):
            study.stop()

    spent = budget_spent(study) >= budget
    if not spent:
        study.optimize(tagged, catch=catch, callbacks=[stop_when_spent], gc_after_trial=False)
    else:  # a reused folder or a resubmitted job: say so rather than return nothing silently
        from .journal import spent_note

        where = getattr(getattr(study._storage, "_backend", None), "_file_path", "its storage")
        print(spent_note(study.study_name, where, budget_spent(study), budget), flush=True)
    return {"trials": mine, "orphans_failed": orphans, "seconds": time.perf_counter() - start, "pid": os.getpid(),
            "already_spent": spent}


def quadratic_objective(
    trial, *, steps: int = 9, optimum: float = 2.0, sleep_s: float = 0.0, fail_above: float | None = None
):
    """A cheap objective with a known optimum (tests, the brackets figure): ``x`` in [-10, 10], the value
    ``-(x - optimum)^2`` approached over ``steps`` reports as ``-(x - optimum)^2 - 1/step``; raises
    ``RuntimeError`` when ``x > fail_above`` (a crashing trial)."""
    import optuna

    x = trial.suggest_float("x", -10.0, 10.0)
    if fail_above is not None and x > fail_above:
        raise RuntimeError(f"trial {trial.number}: x={x:.2f} crashes (fail_above={fail_above})")
    for step in range(1, steps + 1):
        if sleep_s:
            time.sleep(sleep_s)
        value = -(x - optimum) ** 2 - 1.0 / step
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return -(x - optimum) ** 2


NEUMF_SPACE = {  # the search space of lesson 12 (NeuMF at a large batch), ranges of the base lr at batch 256
    "base_lr": (1e-4, 3e-2),  # log scale
    "warmup_fraction": (0.0, 0.3),  # of the planned run
    "lr_scaling": ("linear", "sqrt"),
    "weight_decay": (1e-8, 1e-3),  # log scale
    "optimizer": ("adam", "lamb"),
}


def suggest_neumf(trial, base_cfg: TrainConfig, steps_per_epoch: int, space: dict = NEUMF_SPACE) -> TrainConfig:
    """``base_cfg`` with the trial's choice of every hyperparameter of ``space``."""
    lr = trial.suggest_float("base_lr", *space["base_lr"], log=True)
    warm = trial.suggest_float("warmup_fraction", *space["warmup_fraction"])
    rule = trial.suggest_categorical("lr_scaling", list(space["lr_scaling"]))
    wd = trial.suggest_float("weight_decay", *space["weight_decay"], log=True)
    opt = trial.suggest_categorical("optimizer", list(space["optimizer"]))
    planned = math.ceil(base_cfg.max_epochs * steps_per_epoch)
    return base_cfg.replace(base_lr=lr, warmup_steps=round(warm * planned), lr_scaling=rule, weight_decay=wd,
                            optimizer=opt, base_batch_size=base_cfg.base_batch_size or 256)


def neumf_objective(data: ImplicitData, base_cfg: TrainConfig, *, device=None, space: dict = NEUMF_SPACE,
                    predicted_seconds: Callable[[TrainConfig], float] | None = None,
                    time_limit_s: float | None = None) -> Callable:
    """The objective of lesson 12: one NeuMF run through the engine (``train_to_target``) per trial,
    its best HR@10. The resource is the epoch: HR@10 is reported to the trial at every evaluation
    point (``base_cfg.eval_every_epochs``, counted in evaluation points) so its pruner can cut the run.

    ``base_cfg.max_epochs`` is the most a trial trains (the ``max_resource``). A run that diverges
    raises :class:`Diverged` (FAIL). With ``predicted_seconds`` and ``time_limit_s`` (lesson 09's
    model), a setting predicted slower than the limit is pruned before it trains at all."""
    import optuna

    from .train.ncf import steps_per_epoch as _spe

    spe = _spe(data, base_cfg)
    per_point = base_cfg.eval_every_epochs

    def objective(trial):
        cfg = suggest_neumf(trial, base_cfg.replace(stop_at_target=False), spe, space)
        if predicted_seconds is not None and time_limit_s is not None:
            predicted = predicted_seconds(cfg)
            trial.set_user_attr("predicted_s", predicted)
            if predicted > time_limit_s:
                trial.set_user_attr("budget", 0.0)
                raise optuna.TrialPruned(f"predicted {predicted:.1f} s > limit {time_limit_s:.1f} s")

        last = round(cfg.max_epochs / per_point)

        def report(point):
            step = round(point["epoch"] / per_point)
            trial.report(point["hr"], step=step)
            # Optuna's successive halving also has a rung AT the last step (1, 2, 4, 8 for 8 points):
            # asked there, it "prunes" a run that has already trained its whole budget, which then
            # counts as PRUNED with no value. A finished run is kept: its epochs are spent anyway.
            return step < last and trial.should_prune()

        r = train_to_target(data, cfg, device=device, progress="none", hooks=RunHooks(stop_early=report))
        trial.set_user_attr("budget", len(r.curve["hr"]) - 1)  # evaluation points trained (step 0 excluded)
        trial.set_user_attr("samples_per_s", r.samples_per_s)
        trial.set_user_attr("curve_hr", [h for h in r.curve["hr"]])
        if r.diverged:
            raise Diverged(f"trial {trial.number} diverged at epoch {r.epochs:.2f} (peak lr {cfg.peak_lr:.3g})")
        if r.stopped_early:
            raise optuna.TrialPruned()
        return max(h for h in r.curve["hr"] if h is not None)

    return objective


MLM_SPACE = {  # lesson 12's BERT search: what lesson 07 tuned by hand, the lr (at this batch) and the warmup
    "base_lr": (1e-4, 1e-1),  # log scale
    "warmup_fraction": (0.0, 0.3),  # of the run's steps
}


def suggest_mlm(trial, base_cfg, space: dict = MLM_SPACE):
    """``base_cfg`` (an :class:`~course_lib.train.mlm.MLMTrainConfig`) with the trial's lr and warmup."""
    lr = trial.suggest_float("base_lr", *space["base_lr"], log=True)
    warm = trial.suggest_float("warmup_fraction", *space["warmup_fraction"])
    return base_cfg.replace(base_lr=lr, base_batch_size=base_cfg.global_batch_size,
                            warmup_steps=round(warm * base_cfg.max_steps))


def mlm_objective(data, base_cfg, *, device=None, space: dict = MLM_SPACE) -> Callable:
    """The BERT objective of lesson 12: one ``train_mlm`` run per trial, its best held-out MLM loss
    (a study with ``direction="minimize"``). The resource is the evaluation (``base_cfg.eval_every_steps``
    optimizer steps): the loss is reported to the trial at each, so its pruner can end the run inside
    the engine (``stop_early``). ``base_cfg.max_steps`` is the most a trial trains; a run whose loss
    becomes inf or nan raises :class:`Diverged` (FAIL)."""
    import optuna

    from .train.mlm import train_mlm

    every = base_cfg.eval_every_steps
    last = math.ceil(base_cfg.max_steps / every)

    def objective(trial):
        cfg = suggest_mlm(trial, base_cfg.replace(stop_at_target=False, target_loss=None), space)

        def report(point):
            step = math.ceil(point["step"] / every)
            trial.report(point["eval_loss"], step=step)
            return step < last and trial.should_prune()  # a finished run is kept (see neumf_objective)

        r = train_mlm(cfg, data, device=device, progress="none", hooks=RunHooks(stop_early=report))
        trial.set_user_attr("budget", len(r["curves"]["eval_step"]) - 1)  # evaluations trained (step 0 excluded)
        trial.set_user_attr("curve_loss", list(r["curves"]["eval_loss"]))
        if r["diverged"]:
            raise Diverged(f"trial {trial.number} diverged by step {r['steps']} (peak lr {cfg.peak_lr:.3g})")
        if r["stopped_early"]:
            raise optuna.TrialPruned()
        return r["best_eval_loss"]

    return objective


def search_worker(rank: int, world_size: int, spec: dict) -> dict:
    """One process of a parallel search, one trial at a time: from a cell (``course_lib.dist.launch``)
    or as one task of a SLURM array (``python -m course_lib.run course_lib.optuna_search:search_worker SPEC``).

    Trials are independent runs, so a process group the launcher made is dropped first (each
    trial trains on one process); the processes meet only in the study's journal. ``spec``:
    ``name``, ``path`` (the journal), ``strategy``, ``seed``, ``max_resource``, ``budget``, the data
    (``data``, or ``dataset`` and optional ``synthetic_size`` to load it here) and the base setting
    (``base_cfg``: a TrainConfig or its ``to_dict()``); ``task`` (a SLURM array index) and ``rank``
    give every process its own sampler seed."""
    from . import dist as cdist
    from .data import load_implicit

    cdist.cleanup()
    data = spec["data"] if "data" in spec else load_implicit(spec["dataset"], synthetic_size=spec.get("synthetic_size"))
    base = spec["base_cfg"]
    base = TrainConfig.from_dict(base) if isinstance(base, dict) else base
    seed = spec["seed"] + 1000 * int(spec.get("task", 0)) + rank
    study = open_study(spec["name"], spec["path"], strategy=spec["strategy"], seed=seed,
                       max_resource=spec["max_resource"], reduction_factor=spec.get("reduction_factor", 3))
    return run_search(study, neumf_objective(data, base), budget=spec["budget"])


# --------------------------------------------------------------------------- a tabular benchmark: replaying
# strategies on recorded learning curves (lesson 12). HPO research compares strategies this way when a
# real search is too dear to repeat on many seeds: record the full learning curve of every configuration
# of a pool once, then let each strategy "train" a configuration by reading its curve (Eggensperger et al.
# 2021, HPOBench; Klein & Hutter 2019, the tabular benchmarks of NAS-Bench/HPO-Bench). Training noise
# enters once, through the pool; the replay's seeds resample only the search's own randomness.

REPLAY_STRATEGIES = ("random", "successive_halving", "hyperband")


def pool_target(curves, top_fraction: float = 0.05) -> float:
    """The value only the top ``top_fraction`` of the pool's configurations reach (their best over
    the curve): the ``max(1, ceil(top_fraction * n))``-th highest best value."""
    if not curves:
        raise ValueError("pool_target: the pool has no curves; record some configurations first")
    if not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction={top_fraction!r}: give a fraction in (0, 1], e.g. 0.05 for the top 5%")
    best = sorted((max(c) for c in curves), reverse=True)
    return best[max(1, math.ceil(top_fraction * len(best))) - 1]


class _Replay:
    """The clock of one replayed search: trains configuration ``i`` from the resource it has to ``r``
    (reading its curve), counts the resource spent and notes when the target was first seen."""

    def __init__(self, curves, budget: float, target: float):
        self.curves, self.budget, self.target = curves, budget, target
        self.spent, self.reached_at, self.best = 0, None, -math.inf

    def train(self, i: int, start: int, r: int) -> bool:
        """Train configuration ``i`` from ``start`` to ``r`` points; False once the budget is spent."""
        for point in range(start + 1, r + 1):
            if self.spent >= self.budget:
                return False
            self.spent += 1
            v = self.curves[i][point - 1]
            self.best = max(self.best, v)
            if self.reached_at is None and v >= self.target:
                self.reached_at = self.spent
        return self.spent < self.budget

    def result(self) -> dict:
        return {"spent": self.spent, "reached_at": self.reached_at, "best": self.best}


def _bracket(run: _Replay, rng, n: int, r0: int, eta: int) -> bool:
    """One synchronous successive-halving bracket on ``n`` configurations drawn as random search draws
    them (with replacement: each an independent draw from the pool, which stands for the search space):
    all train to ``r0``, the best ``1/eta`` go on to ``r0 * eta``, ... up to the curves' length.

    Both draw alike: a bracket that drew without replacement would get a better chance at the pool's few top
    configurations than the same number of draws gives random search."""
    R = len(run.curves[0])
    alive = [rng.randrange(len(run.curves)) for _ in range(n)]
    had, r = 0, min(r0, R)
    while True:
        for i in alive:
            if not run.train(i, had, r):
                return False
        if r >= R:
            return True
        alive = sorted(alive, key=lambda i: -run.curves[i][r - 1])[:max(1, len(alive) // eta)]
        had, r = r, min(r * eta, R)


def hyperband_plan(R: int, reduction_factor: int = 3, min_resource: int = 1) -> list[tuple[int, int]]:
    """Li et al. 2018's brackets for curves ``R`` points long: ``(configurations, starting resource)`` for
    ``s = s_max .. 0``, ``n = ceil((s_max + 1) / (s + 1) * eta**s)`` at ``R / eta**s`` (their Table 1 for
    R = 81, eta = 3: 81 at 1, 34 at 3, 15 at 9, 8 at 27, 5 at 81)."""
    eta = reduction_factor
    s_max = max(0, math.floor(math.log(R / min_resource, eta) + 1e-9))
    return [(math.ceil((s_max + 1) / (s + 1) * eta ** s), max(min_resource, math.ceil(R / eta ** s)))
            for s in range(s_max, -1, -1)]


def replay_search(curves, strategy: str, *, budget: float, target: float, seed: int,
                  min_resource: int = 1, reduction_factor: int = 3) -> dict:
    """Replay ``strategy`` on recorded ``curves`` (``curves[i][r - 1]``: configuration ``i``'s metric after
    ``r`` points, higher is better, every curve ``R`` long) until ``budget`` points are spent.

    - "random": configurations drawn at random (with replacement, as every strategy draws), each trained to ``R``;
    - "successive_halving": brackets of ``eta**s_max`` configurations from ``min_resource`` (the most
      aggressive bracket of Hyperband), one after the other;
    - "hyperband": Li et al. 2018's brackets ``s = s_max .. 0`` in turn (bracket ``s`` starts
      ``ceil((s_max + 1) / (s + 1) * eta**s)`` configurations at ``R / eta**s``), repeated.

    Returns ``{"spent", "reached_at" (points spent when a curve first reached ``target``; None: never),
    "best"}``."""
    import random as _random

    if strategy not in REPLAY_STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; the replay knows {REPLAY_STRATEGIES}")
    if budget <= 0:
        raise ValueError(f"budget={budget!r}: give the points a search may spend (> 0)")
    rng = _random.Random(seed)
    run, R, eta = _Replay(curves, budget, target), len(curves[0]), reduction_factor
    s_max = max(0, math.floor(math.log(R / min_resource, eta) + 1e-9))
    while run.spent < run.budget:
        if strategy == "random":
            going = run.train(rng.randrange(len(curves)), 0, R)
        elif strategy == "successive_halving":
            going = _bracket(run, rng, eta ** s_max, min_resource, eta)
        else:
            for n, r0 in hyperband_plan(R, eta, min_resource):
                going = _bracket(run, rng, n, r0, eta)
                if not going:
                    break
        if not going:
            break
    return run.result()


def replay_strategies(curves, *, budget: float, target: float, seeds: int, strategies=REPLAY_STRATEGIES,
                      min_resource: int = 1, reduction_factor: int = 3) -> dict[str, list[dict]]:
    """Every strategy replayed on ``seeds`` seeds (strategy ``k`` at seed ``s`` draws with its own
    seed ``1000 * k + s``: no two strategies share their draws)."""
    return {st: [replay_search(curves, st, budget=budget, target=target, seed=1000 * k + s,
                               min_resource=min_resource, reduction_factor=reduction_factor) for s in range(seeds)]
            for k, st in enumerate(strategies)}


