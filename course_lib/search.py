"""Sweeps and search: scaled settings, sweeps and their tables, lr grids that extend at their edge (lessons 01-07, 12).

Every run goes through the one engine (``train_to_target`` for NeuMF, ``train_mlm`` for
BERT); this module only builds their inputs, collects their outputs and picks among them.

- ``scaled_config`` / ``scaling_table``: what the linear and square-root rules give
  (pure arithmetic, the lessons' deterministic NBVAL cells);
- ``run_sweep`` / ``sweep_rows`` / ``sweep_table`` / ``fastest``: a sweep and its table;
- ``lr_sweep``: short runs per lr, the best one, the grid extended at its edge (lesson 01);
- ``sweep_with_edge_extension``: a grid that grows while its best point sits on an edge
  (lesson 07's lr search);
- ``race`` / ``race_score``: several optimizers, each at its own best lr from such a grid
  (lesson 04);
- ``confirm``: the deciding comparison of a sweep again at more seeds, read against their noise
  (lessons 02-06: the choice that makes a ladder rung);
- ``scaling_regimes`` / ``regime_reading`` / ``gap_reading``: what a batch sweep shows (lesson 02);
- ``open_study`` / ``run_search`` / ``neumf_objective`` / ``search_worker``: Optuna-based random search,
  successive halving and Hyperband at a budget, in a journal file several processes share (lesson 12).
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from .optim.schedules import LR_RULES, linear_scaled_lr, sqrt_scaled_lr
from .data.movielens import ImplicitData
from .fileio import pid_alive
from .metrics import hr_standard_error, noise_verdict
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
    return [train_to_target(data, cfg, device=device, progress=progress, **kwargs,
                            label=labels[i] if labels else f"b{cfg.global_batch_size} {cfg.optimizer} lr {cfg.peak_lr:.3g}")
            for i, cfg in enumerate(cfgs)]


def sweep_rows(results, labels=None) -> list[dict]:
    """One dict per run: the quantities the lessons tabulate and plot."""
    rows = []
    for i, r in enumerate(results):
        c = r.config
        rows.append({
            "rule": labels[i] if labels else "", "batch size": c["global_batch_size"], "optimizer": c["optimizer"],
            "lr": c["peak_lr"], "warmup steps": c.get("warmup_steps", 0), "precision": r.precision.get("mode", c["precision"]),
            "time to target (s)": r.time_to_target_s, "steps to target": r.steps_to_target,
            "epochs to target": r.epochs_to_target, "final HR@10": r.final_hr, "best HR@10": r.best_hr,
            "train HR@10": r.final_train_hr, "epochs run": r.epochs, "samples/s": r.samples_per_s,
            "diverged": r.diverged, "resolution (steps)": target_resolution(r),
        })
    return rows


def target_resolution(r: TrainResult) -> int | None:
    """How precisely a run's steps to target are known: the steps between the evaluation that first
    reached the target and the one before it (None when it was not reached)."""
    if r.steps_to_target is None:
        return None
    steps = r.curve.get("step", [])
    i = steps.index(r.steps_to_target) if r.steps_to_target in steps else 0
    return steps[i] - steps[i - 1] if i > 0 else r.steps_to_target


REGIMES = ("perfect scaling", "diminishing returns", "maximal data parallelism")


def scaling_regimes(rows, *, perfect: float = -0.8, flat: float = -0.2) -> list[dict]:
    """Shallue et al.'s (2018) regimes, read from a sweep's steps to target (lesson 02).

    Per batch size the best run that reached the target (fewest steps; their regimes assume an lr
    tuned per batch, the nearest here is the better of the two rules), then for each step up in batch
    the log-log slope of steps to target from the last batch that reached it: at most ``perfect`` (-1
    halves the steps per doubling): perfect scaling; at least ``flat``: maximal data parallelism (the
    steps stopped falling); between: diminishing returns. A batch where no run reached the target is
    "not reached (the rules broke)". ``resolved`` says whether the slope is further from the nearest
    threshold than one evaluation interval (:func:`target_resolution`) at either end could move it."""
    by_batch: dict[int, list[dict]] = {}
    for r in rows:
        by_batch.setdefault(r["batch size"], []).append(r)
    out, prev = [], None
    for b in sorted(by_batch):
        reached = [r for r in by_batch[b] if r.get("steps to target") is not None]
        row = {"batch size": b, "from batch": prev["batch size"] if prev else None, "rule": "—",
               "steps to target": None, "slope": None, "regime": None, "resolved": None}
        if not reached:
            row["regime"] = "not reached (the rules broke)"
            out.append(row)
            continue
        best = min(reached, key=lambda r: r["steps to target"])
        row.update({"rule": best.get("rule", ""), "steps to target": best["steps to target"]})
        if prev is not None:
            ratio = math.log(b / prev["batch size"])
            slope = math.log(best["steps to target"] / prev["steps to target"]) / ratio
            uncertainty = sum((x.get("resolution (steps)") or 0) / x["steps to target"] for x in (best, prev)) / ratio
            row.update({"slope": slope, "resolved": min(abs(slope - perfect), abs(slope - flat)) > uncertainty,
                        "regime": REGIMES[0] if slope <= perfect else REGIMES[2] if slope >= flat else REGIMES[1]})
        out.append(row)
        prev = best
    return out


def regime_reading(regimes: list[dict]) -> str:
    """The regimes as sentences: each step up in batch, its slope and regime, and where perfect scaling ended."""
    lines, boundary, last = [], None, None  # last: the latest batch that reached the target
    for r in regimes:
        if r["steps to target"] is None:
            lines.append(f"batch {r['batch size']}: {r['regime']}")
            boundary = boundary or last
            continue
        if r["slope"] is not None:
            coarse = "" if r["resolved"] else " (within one evaluation interval of the next regime: a tendency)"
            lines.append(f"batch {r['from batch']} -> {r['batch size']}: slope {r['slope']:.2f}, {r['regime']}{coarse}")
            if r["regime"] != REGIMES[0]:
                boundary = boundary or r["from batch"]
        last = r["batch size"]
    if not any(r["slope"] is not None for r in regimes):
        return "\n".join(lines + ["fewer than two batch sizes reached the target: no slope to read"])
    lines.append(f"perfect scaling ended after batch {boundary}" if boundary else
                 "perfect scaling held over every batch measured")
    return "\n".join(lines)


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


def gap_reading(results, labels, *, users: int) -> str:
    """The generalization gap (train-side minus test HR@10 at the end) against the batch, per rule, read
    from the runs (lesson 02): at the smallest and the largest batch, whether it grew or shrank by more
    than twice its sampling error (each HR@10 is a fraction of ``users`` users: a binomial standard
    error), and the epochs each had run — a run that trained longer has seen its training items more often."""
    by_rule: dict[str, list] = {}
    for r, label in zip(results, labels):
        if r.generalization_gap is not None:
            by_rule.setdefault(label, []).append(r)
    lines = []
    for rule, runs in by_rule.items():
        runs = sorted(runs, key=lambda r: r.config["global_batch_size"])
        if len(runs) < 2:
            continue
        a, b = runs[0], runs[-1]
        se = lambda r: math.hypot(hr_standard_error(r.final_hr, users), hr_standard_error(r.final_train_hr, users))  # noqa: E731
        noise = 2 * math.hypot(se(a), se(b))
        change = b.generalization_gap - a.generalization_gap
        trend = (f"it grew by {change:.4f}" if change > noise else f"it shrank by {-change:.4f}" if change < -noise
                 else f"no measurable change (within twice the sampling error, {noise:.4f})")
        lines.append(f"{rule}: gap {a.generalization_gap:+.4f} at batch {a.config['global_batch_size']} "
                     f"({a.epochs:.2f} epochs) -> {b.generalization_gap:+.4f} at batch {b.config['global_batch_size']} "
                     f"({b.epochs:.2f} epochs): {trend}")
    if not lines:
        return "fewer than two runs per rule were evaluated on the train side: no gap to compare"
    return "\n".join(lines)


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


def race_reading(results, *, target_hr: float, floor_hr: float | None = None) -> str:
    """Per optimizer, what its best run did (from the records only), then the fastest overall.

    A run's lr that sits at the edge of the grid it was swept over is flagged: the best may lie
    beyond it. ``floor_hr``: the popularity ranking's HR, for runs that ended near it.
    """
    best_hr = lambda r: r.best_hr if r.best_hr is not None else (r.final_hr or 0.0)  # noqa: E731
    lines = []
    by_opt: dict[str, list] = {}
    for r in results:
        by_opt.setdefault(r.config["optimizer"], []).append(r)
    for opt, runs in by_opt.items():
        lrs = sorted(r.config["peak_lr"] for r in runs)
        reached = [r for r in runs if r.time_to_target_s is not None]
        best = min(reached, key=lambda r: r.time_to_target_s) if reached else max(runs, key=best_hr)
        lr = best.config["peak_lr"]
        edge = " (the edge of its grid: a better lr may lie beyond)" if len(lrs) > 1 and lr in (lrs[0], lrs[-1]) else ""
        if reached:
            what = f"reached HR@10 {target_hr} in {best.time_to_target_s:.1f} s ({best.steps_to_target} steps)"
        else:
            near = ""
            if floor_hr is not None and best_hr(best) < floor_hr:
                near = f", below the popularity ranking's {floor_hr:.3f}"
            what = f"did not reach {target_hr}: best HR@10 {best_hr(best):.3f}{near}"
        lines.append(f"{opt} (lr {', '.join(f'{x:.3g}' for x in lrs)}): best at lr {lr:.3g}{edge}, {what}")
    win = fastest(results)
    lines.append(f"fastest to the target: {win.config['optimizer']} at lr {win.config['peak_lr']:.3g}" if win
                 else "no run reached the target")
    return "\n".join(lines)


def lr_sweep(data: ImplicitData, cfg: TrainConfig, lrs, *, max_epochs: float = 0.3, device=None,
             extra: tuple[TrainConfig, ...] = (), progress: str = "none",
             max_extensions: int = 0) -> tuple[Table, float, list[TrainResult]]:
    """Short runs (``max_epochs`` each, the whole budget: no target) at each base lr of ``cfg``
    (plus ``extra`` settings for comparison); returns the table, the base lr of ``cfg.optimizer``
    with the best final HR@10, and the results. With ``max_extensions``, a best lr at the edge
    of ``lrs`` gets up to that many more points beyond it (``sweep_with_edge_extension``)."""
    short = dict(max_epochs=float(max_epochs), max_steps=None, stop_at_target=False)

    def run(c):
        return train_to_target(data, c, device=device, progress=progress, label=f"{c.optimizer} lr {c.peak_lr:g}")

    own = sweep_with_edge_extension(lambda lr: run(cfg.replace(base_lr=lr, **short)), lrs,
                                    lambda r: -r.final_hr, max_extensions=max_extensions)
    results = list(own.values()) + [run(c.replace(**short)) for c in extra]
    t = Table(["optimizer", "lr", "epochs", "HR@10", "NDCG@10", "train loss"],
              title=f"lr sweep at batch {cfg.global_batch_size}, {max_epochs:g} epoch each")
    for r in results:
        t.add(optimizer=r.config["optimizer"], lr=r.config["peak_lr"], epochs=round(r.epochs, 2),
              **{"HR@10": r.final_hr, "NDCG@10": r.final_ndcg, "train loss": r.curve["loss"][-1]})
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


def race(data, starts: dict[str, TrainConfig], factors=(0.5, 1.0, 2.0), *, device=None, max_extensions: int = 1,
         progress: str = "auto") -> tuple[list[TrainResult], list[str]]:
    """Each optimizer at its own best lr (lesson 04): for each ``{name: starting setting}``, runs
    at ``base_lr x factor`` over ``factors``, the grid extended while its best run (``race_score``)
    sits on an edge (``sweep_with_edge_extension``). Returns every run and its label, optimizer
    by optimizer, lrs ascending: ``race_reading`` then says which was best and flags an edge."""
    results, labels = [], []
    for name, cfg in starts.items():
        def run(f, cfg=cfg, name=name):
            c = cfg.replace(base_lr=cfg.base_lr * f)
            label = f"b{c.global_batch_size} {name} lr {c.peak_lr:.3g}"
            return label, train_to_target(data, c, device=device, progress=progress, label=label)

        done = sweep_with_edge_extension(run, factors, lambda lr: race_score(lr[1]), max_extensions=max_extensions)
        for label, r in done.values():
            labels.append(label)
            results.append(r)
    return results, labels


@dataclass
class Confirmed:
    """A sweep's deciding comparison at more seeds (:func:`confirm`): each candidate's runs, seed by
    seed (``runs[i][0]`` is the sweep's own run), the winner and the verdict read from them."""

    labels: list[str]
    runs: list[list[TrainResult]]
    best: int
    verdict: str

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

    def _versus(self, a: str, b: str) -> tuple[str | None, str]:
        ra, rb = self.runs_of(a), self.runs_of(b)
        if all(r.time_to_target_s is not None for r in ra + rb):
            won, text = noise_verdict([r.time_to_target_s for r in ra], [r.time_to_target_s for r in rb], names=(a, b))
            return (None if won is None else (a, b)[won]), text
        hit = lambda rs: sum(r.time_to_target_s is not None for r in rs)  # noqa: E731
        won = a if hit(ra) > hit(rb) else b if hit(rb) > hit(ra) else None
        return won, f"{a} reached the target on {hit(ra)} of {len(ra)} seeds, {b} on {hit(rb)} of {len(rb)}"

    def compare(self, a: str, b: str) -> str:
        """``a`` against ``b``, seed by seed, read against the seed-to-seed range (or reached on how many seeds)."""
        return self._versus(a, b)[1]

    def winner(self, a: str, b: str) -> str | None:
        """``a`` or ``b`` when one is measurably better (:meth:`compare`), else None."""
        return self._versus(a, b)[0]

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
        return f"{self.table()}\n{self.verdict}"


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
    least mean time; the verdict compares it with the best of the others against the seed-to-seed
    range (:func:`course_lib.metrics.noise_verdict`): "no measurable difference" when within it."""
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
    names = [labels[i] for i in picked]
    if len(runs) == 1:
        n = 1 + len(seeds)
        verdict = f"only one setting was compared: {names[0]}, at {n} seed{'s' if n > 1 else ''}"
        return Confirmed(names, runs, best, verdict)
    other = min((j for j in range(len(runs)) if j != best), key=lambda j: scores[j])
    decided = Confirmed(names, runs, best, "")
    decided.verdict = f"chosen: {names[best]}; {decided.compare(names[best], names[other])}"
    return decided


def warmup_reading(results, labels, *, baseline_label: str = "no warmup") -> str:
    """Warmup against none, read from the runs (lesson 03): the best warmup run (by ``race_score``),
    its length (flagged at the edge of the lengths tried), and what it changed against the run
    without warmup: time to target, or reaching it at all."""
    base = next(r for r, lab in zip(results, labels) if lab == baseline_label)
    warm = [(r, lab) for r, lab in zip(results, labels) if lab != baseline_label]
    if not warm:
        return "no warmup run to compare"
    best, label = min(warm, key=lambda rl: race_score(rl[0]))
    lengths = sorted({r.config["warmup_steps"] for r, _ in warm if r.config["warmup"] == best.config["warmup"]})
    edge = (" (the edge of the lengths tried: a better one may lie beyond)"
            if len(lengths) > 1 and best.config["warmup_steps"] in (lengths[0], lengths[-1]) else "")

    def did(r):
        if r.time_to_target_s is not None:
            return f"reached the target in {r.time_to_target_s:.1f} s ({r.steps_to_target} steps)"
        if r.diverged:
            return "diverged"
        return f"did not reach the target (best HR@10 {r.best_hr or 0.0:.3f})"

    line = f"best warmup: {label}{edge}, {did(best)}; without warmup the run {did(base)}"
    if best.time_to_target_s is not None and base.time_to_target_s is not None:
        ratio = base.time_to_target_s / best.time_to_target_s
        steps = base.steps_to_target / max(best.steps_to_target, 1)
        verdict = ("warmup took fewer steps" if steps > 1.05 else "warmup cost steps" if steps < 0.95
                   else "no difference in steps to target")
        line += (f". On this seed {verdict}: without it {steps:.2f}x the steps and {ratio:.2f}x the time "
                 "(one seed: the comparison at two seeds decides)")
    elif best.time_to_target_s is not None:
        line += ". Warmup is what made this batch reach the target at all."
    elif base.time_to_target_s is not None:
        line += ". Warmup did not help at this batch: the run without it reached the target."
    else:
        line += ". Neither reached the target: this batch needs more than warmup (lesson 04)."
    return line


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
               reduction_factor: int = 3, direction: str = "maximize"):
    """Create the study ``name`` in the journal at ``path``, or load it when it exists (a resumed or
    shared search): the strategy's sampler seeded by ``seed`` and its pruner."""
    import optuna

    from .journal import prepare_journal

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prepare_journal(path)  # 0600, the learner's folder, a cut-off last line repaired (issue 32)
    return optuna.create_study(
        study_name=name, storage=journal_storage(path), direction=direction, load_if_exists=True,
        sampler=make_sampler(strategy, seed=seed),
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


def quadratic_objective(trial, *, steps: int = 9, optimum: float = 2.0, sleep_s: float = 0.0, fail_above: float | None = None):
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


# --------------------------------------------------------------------------- NeuMF at a large batch

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

        r = train_to_target(data, cfg, device=device, progress="none", stop_early=report)
        trial.set_user_attr("budget", len(r.curve["hr"]) - 1)  # evaluation points trained (step 0 excluded)
        trial.set_user_attr("samples_per_s", r.samples_per_s)
        trial.set_user_attr("curve_hr", [h for h in r.curve["hr"]])
        if r.diverged:
            raise Diverged(f"trial {trial.number} diverged at epoch {r.epochs:.2f} (peak lr {cfg.peak_lr:.3g})")
        if r.stopped_early:
            raise optuna.TrialPruned()
        return max(h for h in r.curve["hr"] if h is not None)

    return objective


# --------------------------------------------------------------------------- lesson 07's BERT

MLM_SPACE = {  # lesson 12's BERT search: what lesson 07 tuned by hand, the lr (at this batch) and the warmup
    "base_lr": (1e-4, 1e-1),  # log scale
    "warmup_fraction": (0.0, 0.3),  # of the run's steps
}


def suggest_mlm(trial, base_cfg, space: dict = MLM_SPACE):
    """``base_cfg`` (an :class:`~course_lib.train.mlm.MLMTrainConfig`) with the trial's lr and warmup."""
    lr = trial.suggest_float("base_lr", *space["base_lr"], log=True)
    warm = trial.suggest_float("warmup_fraction", *space["warmup_fraction"])
    return base_cfg.replace(base_lr=lr, base_batch_size=base_cfg.global_batch_size, warmup_steps=round(warm * base_cfg.max_steps))


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

        r = train_mlm(cfg, data, device=device, progress="none", stop_early=report)
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
    or as one task of a SLURM array (``python -m course_lib.run course_lib.search:search_worker SPEC``).

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
