"""Sweeps: scaled settings, sweeps and their tables, lr grids that extend at their edge (lessons 01-07, 11).

Every run goes through the one engine (``train_to_target`` for NeuMF, ``train_mlm`` for
BERT); this module only builds their inputs, collects their outputs and picks among them.
What a sweep shows is read in each lesson's own module (``course_lib.lessons``); lesson 12's
Optuna search is :mod:`course_lib.optuna_search`.

- ``scaled_config`` / ``scaling_table``: what the linear and square-root rules give
  (pure arithmetic, the lessons' deterministic NBVAL cells);
- ``run_sweep`` / ``sweep_rows`` / ``sweep_table`` / ``fastest``: a sweep and its table;
- ``lr_sweep``: short runs per lr, the best one, the grid extended at its edge (lesson 01);
- ``sweep_with_edge_extension``: a grid that grows while its best point sits on an edge
  (lesson 07's lr search);
- ``race`` / ``race_score``: several optimizers, each at its own best lr from such a grid, swept
  at full length or with cut runs and then the best at full length (lesson 04);
- ``confirm``: the deciding comparison of a sweep again at more seeds, as ``compare`` rows
  (lessons 02-06: the choice that makes a ladder rung).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from .optim.schedules import LR_RULES, linear_scaled_lr, sqrt_scaled_lr
from .data.movielens import ImplicitData
from . import compare
from .compare import Comparison
from .tables import Table
from .train.ncf import TrainConfig, TrainResult, train_to_target


def scaled_config(base_cfg, batch_size: int, rule: str = "linear", base_batch_size: int | None = None, **changes):
    """``base_cfg`` at ``batch_size`` with its lr scaled by ``rule`` ("linear" | "sqrt") (lesson 02).

    The base lr stays what it was; the setting records its base batch (``base_batch_size``,
    else the base setting's own) and its rule, and derives ``peak_lr`` from them."""
    if rule not in LR_RULES:
        raise ValueError(f"rule={rule!r}; choose one of {sorted(LR_RULES)}")
    base = base_batch_size or base_cfg.base_batch_size or base_cfg.global_batch_size
    return base_cfg.replace(global_batch_size=batch_size, base_batch_size=base, lr_scaling=rule, **changes)


def at_batch(cfg, batch_size: int, rule_if_given: str = "sqrt"):
    """The same recipe at another global batch (lesson 06's weak scaling): a setting with a scaling
    rule re-derives its peak lr from its own base; one whose lr was given as it is ("none") is
    scaled from its current batch by ``rule_if_given``."""
    if cfg.lr_scaling != "none":
        return cfg.replace(global_batch_size=batch_size)
    return scaled_config(cfg, batch_size, rule_if_given, base_batch_size=cfg.global_batch_size)


def scaling_table(base_lr: float, base_batch_size: int, batch_sizes) -> Table:
    """The lr each rule gives at each batch size (deterministic: a lesson's NBVAL_CHECK_OUTPUT cell)."""
    t = Table(["batch size", "k", "lr (linear: k x)", "lr (sqrt: sqrt(k) x)"],
              title=f"Scaled learning rates from lr {base_lr:g} at batch {base_batch_size}")
    for b in batch_sizes:
        t.add(**{"batch size": b, "k": b / base_batch_size,
                 "lr (linear: k x)": linear_scaled_lr(base_lr, b, base_batch_size),
                 "lr (sqrt: sqrt(k) x)": sqrt_scaled_lr(base_lr, b, base_batch_size)})
    return t


def run_sweep(data, cfgs, *, device=None, labels=None, progress: str = "auto", **kwargs) -> list:
    """``train_to_target`` for each setting (each carries its own budget and target)."""
    return [
        train_to_target(
            data,
            cfg,
            device=device,
            progress=progress,
            **kwargs,
            label=labels[i] if labels else f"b{cfg.global_batch_size} {cfg.optimizer} lr {cfg.peak_lr:.3g}",
        )
        for i, cfg in enumerate(cfgs)
    ]


def sweep_rows(results, labels=None) -> list[dict]:
    """One dict per run: the quantities the lessons tabulate and plot."""
    rows = []
    for i, r in enumerate(results):
        c = r.config
        rows.append(
            {
                "rule": labels[i] if labels else "",
                "batch size": c["global_batch_size"],
                "optimizer": c["optimizer"],
                "lr": c["peak_lr"],
                "warmup steps": c.get("warmup_steps", 0),
                "precision": r.precision.get("mode", c["precision"]),
                "time to target (s)": r.time_to_target_s,
                "steps to target": r.steps_to_target,
                "epochs to target": r.epochs_to_target,
                "final HR@10": r.final_hr,
                "best HR@10": r.best_hr,
                "train HR@10": r.final_train_hr,
                "epochs run": r.epochs,
                "samples/s": r.samples_per_s,
                "diverged": r.diverged,
                "resolution (steps)": target_resolution(r),
            }
        )
    return rows


def target_resolution(r: TrainResult) -> int | None:
    """How precisely a run's steps to target are known: the steps between the evaluation that first
    reached the target and the one before it (None when it was not reached)."""
    if r.steps_to_target is None:
        return None
    steps = r.curve.get("step", [])
    i = steps.index(r.steps_to_target) if r.steps_to_target in steps else 0
    return steps[i] - steps[i - 1] if i > 0 else r.steps_to_target


def sweep_table(results, labels=None, *, title: str = "",
                columns=("rule", "batch size", "lr", "time to target (s)", "steps to target", "epochs to target",
                         "final HR@10", "epochs run", "samples/s")) -> Table:
    """The measured table of a sweep; "not reached" (never the run length) where the target was missed."""
    t = Table(list(columns), title=title)
    for row in sweep_rows(results, labels):
        if row["time to target (s)"] is None:
            row["time to target (s)"] = "diverged" if row["diverged"] else "not reached"
        t.add(**{c: row[c] for c in columns})
    return t


def fastest(results):
    """The run that reached its target in the least training time (None when none did)."""
    reached = [r for r in results if r.time_to_target_s is not None]
    return min(reached, key=lambda r: r.time_to_target_s) if reached else None


def best_label(results, labels, optimizers) -> str:
    """The label of the best run (:func:`race_score`) among those of ``optimizers`` (lesson 04's race)."""
    mine = [i for i, r in enumerate(results) if r.config["optimizer"] in optimizers]
    if not mine:
        raise ValueError(f"no run of {list(optimizers)} among {sorted({r.config['optimizer'] for r in results})}")
    return labels[min(mine, key=lambda i: race_score(results[i]))]


def lr_sweep(data: ImplicitData, cfg: TrainConfig, lrs, *, max_epochs: float = 0.3, device=None,
             extra: tuple[TrainConfig, ...] = (), progress: str = "log",
             max_extensions: int = 0) -> tuple[Table, float, list[TrainResult]]:
    """Short runs (``max_epochs`` each, the whole budget: no target) at each base lr of ``cfg``
    (plus ``extra`` settings for comparison); returns the table, the base lr of ``cfg.optimizer``
    with the best final HR@10, and the results. With ``max_extensions``, a best lr at the edge
    of ``lrs`` gets up to that many more points beyond it (``sweep_with_edge_extension``).

    ``progress="log"``: one line per run as it ends (and one a minute in a long run), in a notebook too:
    a long sweep on a loaded machine must say it is alive, and a bar and live figure per run would bury the
    table. ``$COURSE_PROGRESS`` overrides it."""
    short = dict(max_epochs=float(max_epochs), max_steps=None, stop_at_target=False)

    def run(c):
        return train_to_target(data, c, device=device, progress=progress, label=f"{c.optimizer} lr {c.peak_lr:g}")

    own = sweep_with_edge_extension(lambda lr: run(cfg.replace(base_lr=lr, **short)), lrs,
                                    lambda r: -r.final_hr, max_extensions=max_extensions)
    results = list(own.values()) + [run(c.replace(**short)) for c in extra]
    # the steps too: "0.5 epochs" is ceil(0.5 x steps per epoch) here but 2 x round(0.25 x ...) at an evaluation
    # point elsewhere, so the same setting can differ by a step
    t = Table(["optimizer", "lr", "steps", "epochs", "HR@10", "NDCG@10", "train loss"],
              title=f"lr sweep at batch {cfg.global_batch_size}, {max_epochs:g} epoch each")
    # an lr as the runs' lines say it, the metrics to four decimals throughout (not the generic four figures)
    for r in results:
        t.add(optimizer=r.config["optimizer"], lr=f"{r.config['peak_lr']:g}", steps=r.steps, epochs=round(r.epochs, 2),
              **{k: f"{v:.4f}" for k, v in (("HR@10", r.final_hr), ("NDCG@10", r.final_ndcg),
                                            ("train loss", r.curve["loss"][-1]))})
    best = max(own.values(), key=lambda r: r.final_hr)
    return t, best.config["base_lr"], results


def sweep_with_edge_extension(run: Callable[[float], dict], factors, score: Callable[[dict], float], *,
                              max_extensions: int = 2) -> dict[float, dict]:
    """``{factor: run(factor)}`` over a grid that grows while its best point sits on an edge.

    Runs every factor of ``factors``; while the best (lowest ``score``) is the smallest
    factor, one more at half of it, while it is the largest, one more at double it — at
    most ``max_extensions`` times. A best point inside the grid ends the search: a minimum
    is bracketed. Each factor runs once.
    """
    todo, done = sorted(factors), {}
    for _ in range(max_extensions + 1):
        for f in todo:
            if f not in done:
                done[f] = run(f)
        best = min(done, key=lambda f: score(done[f]))
        if best == min(done):
            todo = [best / 2]  # a smaller value might be better still
        elif best == max(done):
            todo = [best * 2]
        else:
            break
    return {f: done[f] for f in sorted(done)}


def race_score(r: TrainResult) -> tuple:
    """Lower is better: a run that reached the target by its training time, then one that did not
    by its best HR@10 (a diverged run, with no HR, last)."""
    if r.time_to_target_s is not None:
        return (0, r.time_to_target_s)
    hr = r.best_hr if r.best_hr is not None else (r.final_hr or 0.0)
    return (1, -hr)


BLOW_UP_LOSS = 1.5 * math.log(2)  # half again an untrained model's BCE (ln 2): the run made its predictions worse


def blew_up(r: TrainResult) -> bool:
    """A run that diverged (inf/nan weights) or whose training loss rose above :data:`BLOW_UP_LOSS` at an
    evaluation point (lesson 04's SGD at lr 8: 2.93, then a constant predictor at chance)."""
    losses = [x for x in (getattr(r, "curve", None) or {}).get("loss", []) if x is not None]
    return bool(getattr(r, "diverged", False)) or any(not x < BLOW_UP_LOSS for x in losses)


def race_rank(r: TrainResult) -> tuple:
    """Lower is better, as the race ranks its grid: :func:`race_score`, except that a run that blew up ranks below
    every run that did not, the smaller lr first, so a grid where every lr blew up extends downward instead of
    ranking chance-level HR@10s."""
    return (2, r.config["peak_lr"]) if blew_up(r) else race_score(r)


def race(data, starts: dict[str, TrainConfig], factors=(0.5, 1.0, 2.0), *, device=None, max_extensions: int = 1,
         progress: str = "auto", sweep_steps: int | None = None) -> tuple[list[TrainResult], list[str]]:
    """Each optimizer at its own best lr (lesson 04): for each ``{name: starting setting}``, runs
    at ``base_lr x factor`` over ``factors``, the grid extended while its best run (``race_score``)
    sits on an edge (``sweep_with_edge_extension``), at most ``max_extensions`` times. Returns every run
    and its label, optimizer by optimizer, lrs ascending.

    With ``sweep_steps`` the grid's runs stop after that many steps (the schedule still planned over the
    setting's ``max_epochs``, so a cut run is the start of a full one, labelled "sweep"), and the best lr
    then runs the full length (last of its optimizer) unless its cut run already reached the target."""
    results, labels = [], []
    for name, cfg in starts.items():
        def run(f, cfg=cfg, name=name, steps=sweep_steps):
            c = cfg.replace(base_lr=cfg.base_lr * f, **({"max_steps": steps} if steps else {}))
            label = f"b{c.global_batch_size} {name} lr {c.peak_lr:.3g}" + (" sweep" if steps else "")
            return label, train_to_target(data, c, device=device, progress=progress, label=label)

        score = lambda done: race_rank(done[1])  # noqa: E731
        done = sweep_with_edge_extension(run, factors, score, max_extensions=max_extensions)
        for label, r in done.values():
            labels.append(label)
            results.append(r)
        best = min(done, key=lambda f: score(done[f]))
        if sweep_steps and done[best][1].time_to_target_s is None:
            label, r = run(best, steps=None)
            labels.append(label)
            results.append(r)
    return results, labels


@dataclass
class Confirmed:
    """A sweep's deciding comparison at more seeds (:func:`confirm`): each candidate's runs, seed by
    seed (``runs[i][0]`` is the sweep's own run), and the winner (the most seeds at the target, then the least
    mean time). :meth:`comparisons` says how far the winner's lead is resolved."""

    labels: list[str]
    runs: list[list[TrainResult]]
    best: int

    @property
    def best_label(self) -> str:
        return self.labels[self.best]

    @property
    def best_runs(self) -> list[TrainResult]:
        return self.runs[self.best]

    def runs_of(self, label: str) -> list[TrainResult]:
        return self.runs[self.labels.index(label)]

    def best_of(self, labels) -> str:
        """The winner among some of the candidates (lesson 03: the best warmup, whatever no warmup did)."""
        labels = [label for label in self.labels if label in labels]
        if not labels:
            raise ValueError(f"none of {list(labels)} was compared (candidates: {self.labels})")
        return min(labels, key=lambda label: _seeds_score(self.runs_of(label)))

    def time_comparison(self, a: str, b: str) -> Comparison | None:
        """``b``'s time to target over ``a``'s over the seeds (:func:`course_lib.compare.ratio`), widened by the
        evaluations' spacing near the target (a time to target is known to the steps between its last two
        evaluations) and, where an arm ran once, by :data:`course_lib.compare.ONE_RUN`. None where a run missed the
        target: the seed table says which reached it."""
        ra, rb = self.runs_of(a), self.runs_of(b)
        if any(r.time_to_target_s is None for r in ra + rb):
            return None
        once = min(len(ra), len(rb)) < 2
        resolution = _spacing(ra) + _spacing(rb) + (compare.ONE_RUN if once else 0.0)
        basis = "one seed each on a shared machine" if once else f"{len(ra)} and {len(rb)} seeds"
        return compare.ratio(f"time to target, {b} / {a}", [r.time_to_target_s for r in ra],
                             [r.time_to_target_s for r in rb], needed=compare.TIME_EFFECT, resolution=resolution,
                             basis=f"{basis}; evaluation spacing")

    def steps_comparison(self, a: str, b: str) -> Comparison | None:
        """``b``'s steps to target over ``a``'s over the seeds, widened by the evaluation spacing (the steps
        are known to within it); None where a run missed the target."""
        ra, rb = self.runs_of(a), self.runs_of(b)
        if any(r.steps_to_target is None for r in ra + rb):
            return None
        window = max(_spacing(ra), _spacing(rb))
        return compare.ratio(f"steps to target, {b} / {a}", [r.steps_to_target for r in ra],
                             [r.steps_to_target for r in rb], needed=compare.TIME_EFFECT, resolution=window,
                             basis=f"{len(ra)} and {len(rb)} seeds; evaluations {window:.0%} apart")

    def comparisons(self, chosen: str | None = None, *, steps: bool = False) -> list[Comparison]:
        """Every other candidate against ``chosen`` (the winner by default): its time to target over the chosen
        one's (*higher*: the chosen one is faster), and with ``steps`` its steps to target too."""
        chosen = chosen or self.best_label
        out = []
        for label in self.labels:
            if label != chosen:
                out += [self.time_comparison(chosen, label)] + ([self.steps_comparison(chosen, label)] if steps else [])
        return [c for c in out if c is not None]

    def winner(self, a: str, b: str) -> str | None:
        """``a`` or ``b``: the one that reached the target on more seeds; where both reached it on every seed, the
        one whose time :meth:`time_comparison` resolves lower; else None."""
        hit = lambda label: sum(r.time_to_target_s is not None for r in self.runs_of(label))  # noqa: E731
        if hit(a) != hit(b):
            return a if hit(a) > hit(b) else b
        c = self.time_comparison(a, b)
        return None if c is None or not c.decided else (b if c.outcome == compare.LOWER else a)

    def table(self, chosen: str | None = None) -> Table:
        """Every run, seed by seed; ``chosen`` (default: the winner) is marked."""
        chosen = chosen or self.best_label
        t = Table(["setting", "seed", "time to target (s)", "steps to target", "final HR@10"],
                  title="The deciding comparison, seed by seed")
        for label, runs in zip(self.labels, self.runs):
            for r in runs:
                t.add(**{"setting": label + (" (chosen)" if label == chosen else ""),
                         "seed": r.config.get("seed"),
                         "time to target (s)": r.time_to_target_s if r.time_to_target_s is not None else
                         ("diverged" if r.diverged else "not reached"),
                         "steps to target": r.steps_to_target if r.steps_to_target is not None else "—",
                         "final HR@10": r.final_hr})
        return t

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())


def _spacing(runs: list[TrainResult]) -> float:
    """The widest evaluation spacing near the target among ``runs``, as a share of their steps to target."""
    return max((target_resolution(r) or 0) / r.steps_to_target for r in runs)


def _seeds_score(runs: list[TrainResult]) -> tuple:
    """Lower is better: fewer seeds that missed the target, then the mean time (or best HR) of the rest."""
    missed = sum(r.time_to_target_s is None for r in runs)
    if missed < len(runs):
        return (missed, statistics.fmean(r.time_to_target_s for r in runs if r.time_to_target_s is not None))
    return (missed, statistics.fmean(race_score(r)[1] for r in runs))  # minus the mean best HR@10


def confirm(data, results, labels, *, seeds=(1,), top: int = 2, include=(), device=None,
            progress: str = "auto") -> Confirmed:
    """The deciding comparison of a sweep, at more seeds (lessons 02-06; the full profile runs two).

    The ``top`` runs of ``results`` by :func:`race_score`, and those whose label is in ``include`` (the
    reference a lesson's verdict compares with: no warmup, Adam, fp32), each re-run at every seed in
    ``seeds`` with nothing else changed. The winner reached the target on the most seeds, then in the
    least mean time; :meth:`Confirmed.comparisons` resolves its lead over the others."""
    order = sorted(range(len(results)), key=lambda i: race_score(results[i]))
    picked = order[:top] + [i for i in order[top:] if labels[i] in include]
    if not picked:
        raise ValueError(f"confirm: nothing to compare (top={top}, include={list(include)}, labels={list(labels)})")
    if len({labels[i] for i in picked}) < len(picked):
        raise ValueError(f"confirm: the labels of the runs to compare must differ, got {[labels[i] for i in picked]}")
    runs = []
    for i in picked:
        cfg = TrainConfig.from_dict(results[i].config)
        again = [train_to_target(data, cfg.replace(seed=s), device=device, progress=progress,
                                 label=f"{labels[i]} seed {s}") for s in seeds]
        runs.append([results[i], *again])
    scores = [_seeds_score(rs) for rs in runs]
    best = min(range(len(runs)), key=lambda j: scores[j])
    return Confirmed([labels[i] for i in picked], runs, best)


# --------------------------------------------------------------------------- Optuna-based search (lesson 12)
#
# Optuna is imported inside the functions: the lessons that only sweep (01-07) do not pay for it.
#
# Storage: a journal file (optuna.storages.JournalStorage over JournalFileBackend), not SQLite.
# Why, from Optuna's own docs and issue tracker: SQLite relies on fcntl() locks, which are broken
# on many NFS mounts (the shared file systems of HPC centers), and several processes writing one
# SQLite file at once fail with "database is locked" (optuna#820, #4994; Optuna's FAQ recommends
# against SQLite for parallel optimization). The journal backend appends one JSON line per change
# under a lock made with link()/symlink(), which works on NFS, and every process replays the log.
# What surprised us (Optuna 5.0, read in its source): the heartbeat that turns the trials of a
# killed process into FAIL (heartbeat_interval, grace_period, RetryFailedTrialCallback) exists for
# RDBStorage only; in a journal a killed trial stays RUNNING forever. ``fail_orphaned_trials``
# does that job here: each trial records its host and pid, and a trial whose process is gone
# (same host) is failed when a search (re)starts. A process killed while holding the journal's
# lock leaves its lock file behind; the next writer waits up to the lock's grace period (30 s)
# and then breaks it. And one about the pruners: a rung of Optuna's successive halving can sit at
# the last step, so asking ``should_prune()`` after the final report can discard a finished run
# (measured here: a full 4-epoch trial at HR@10 0.62 recorded PRUNED); neumf_objective does not ask there.



# --------------------------------------------------------------------------- NeuMF at a large batch



# --------------------------------------------------------------------------- lesson 07's BERT



